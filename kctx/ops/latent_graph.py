"""LatentGNN's propagation through d latent nodes (Zhang et al.)."""

from keras import ops

from kctx.ops.magnitude import at_least


def _l2_normalize(t, axis, epsilon=1e-12):
    return t / ops.sqrt(at_least(ops.sum(t * t, axis=axis, keepdims=True), epsilon))


def latent_graph_propagation(x, visible_to_latent, latent_to_visible):
    """The three steps of LatentGNN (Zhang et al., ICML 2019, Sec. 3.2), O(N·d·C).

    With N visible nodes X (N×C) and d latent nodes:

    1. visible → latent: Z = Ψ₁ᵀ X (d×C), Ψ₁ (N×d) the non-negative affinities
       ``visible_to_latent``, each latent node's column L2-normalised over the
       N positions (the official code's ``F.normalize(·, dim=2)``);
    2. latent → latent: Z̃ = softmax(Ẑ Ẑᵀ) Z on the fully connected latent
       graph, Ẑ the L2-normalised rows of Z (cosine affinities, d×d);
    3. latent → visible: X̃ = Ψ₂ Z̃ (N×C), Ψ₂ (N×d) ``latent_to_visible``
       with each position's row L2-normalised over the d latent nodes.

    Computed in float32.

    Args:
        x: (B, N, C).
        visible_to_latent: (B, N, d), non-negative.
        latent_to_visible: (B, N, d), non-negative.

    Returns:
        X̃: (B, N, C) in the dtype of ``x``.
    """
    dtype = x.dtype
    x32 = ops.cast(x, "float32")
    v2l = _l2_normalize(ops.cast(visible_to_latent, "float32"), axis=1)
    l2v = _l2_normalize(ops.cast(latent_to_visible, "float32"), axis=2)
    latent = ops.matmul(ops.swapaxes(v2l, 1, 2), x32)  # Z: (B, d, C)
    unit = _l2_normalize(latent, axis=2)
    affinity = ops.softmax(ops.matmul(unit, ops.swapaxes(unit, 1, 2)), axis=-1)  # (B, d, d)
    latent = ops.matmul(affinity, latent)
    out = ops.matmul(l2v, latent)
    return out if dtype == "float32" else ops.cast(out, dtype)
