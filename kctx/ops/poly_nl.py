"""Poly-NL: the linear-complexity third-order polynomial non-local operator."""

from keras import ops

from kctx.ops.magnitude import magnitude
from kctx.ops.shapes import positions


def _positions_axes(x):
    return tuple(range(1, len(x.shape) - 1))


def poly_nl(x, w1, w2, w3, scale=None):
    """Y = (Φ(X W₁ ⊙ X W₂) ⊙ X) W₃ — Eq. 6 of Babiloni et al. (Poly-NL).

    X holds the N positions of each example as rows (``x`` is (B, N, C) or
    (B, H, W, C): every axis between batch and channels is a position axis);
    Φ averages over the positions and expands the (B, 1, C) average back to
    every position; ⊙ is element-wise. Element-wise this is Eq. 7:
    y_ab = Σ_{d,f,h} Σ_e (1/N) w1_hd w2_fd w3_db x_ad x_ef x_eh.

    The average is computed without the two N×C embeddings: for each channel
    d, mean_n (XW₁)_nd (XW₂)_nd = [W₁ᵀ G W₂]_dd with the Gram matrix
    G = XᵀX / N (C×C), so s = Φ(...) = Σ_f W₁_fd (G W₂)_fd. Then Y = X (diag(s) W₃).
    Cost 2·N·C² + C³ multiply-adds (Eq. 6 as written: 3·N·C²) and no N-sized
    intermediate but the output: O(N) in time and memory.

    Range: Y is a cubic form of X, so it overflows float32 from |X| ≈ 1e12.
    It is computed from X̂ = X / m with m = max|X| per example, as
    Y = m³ Ŷ (exact: Y is homogeneous of degree 3), in float32 under mixed
    precision too, and returned as ``scale`` · Y with the scalar factor
    ``scale · m · m · m`` formed first: ``scale = 0`` gives exactly 0 (no
    0 · inf) however large X is, and the gradients with respect to X and the
    W's stay finite there. An all-zero example gives Y = 0.

    Args:
        x: (B, ..., C) with N positions in the middle axes.
        w1: (C, C) — the first embedding whose products are averaged.
        w2: (C, C) — the second one.
        w3: (C, C_out) — the output projection.
        scale: optional scalar factor (e.g. the β of :class:`kctx.layers.PolyNL`).

    Returns:
        ``scale`` · Y, (B, ..., C_out), in the dtype of ``x``.
    """
    dtype = x.dtype
    x32 = ops.cast(x, "float32")
    flat = ops.reshape(x32, (ops.shape(x)[0], positions(x.shape), x.shape[-1]))  # (B, N, C)
    m = magnitude(flat)  # (B, 1, 1)
    flat = flat / m  # X̂
    count = ops.shape(flat)[1]  # a Python int where static (no tensor made per call)
    count = count if isinstance(count, int) else ops.cast(count, "float32")
    gram = ops.matmul(ops.swapaxes(flat, 1, 2), flat) / count  # (B, C, C)
    w1, w2, w3 = (ops.cast(w, "float32") for w in (w1, w2, w3))
    context = ops.sum(ops.matmul(gram, w2) * w1, axis=1)  # ŝ: (B, C), Φ before expansion
    m = m[:, :, 0]  # (B, 1)
    factor = m if scale is None else ops.cast(scale, "float32") * m
    factor = factor * m * m  # scale · m³, left to right: scale = 0 stays 0
    mixing = ops.expand_dims(context * factor, -1) * w3  # diag(scale·m³·ŝ) W₃
    y = ops.matmul(flat, mixing)
    y = ops.reshape(y, tuple(ops.shape(x)[:-1]) + (w3.shape[-1],))
    return y if dtype == "float32" else ops.cast(y, dtype)


def poly_nl_direct(x, w1, w2, w3):
    """Eq. 6 evaluated as written (both N×C embeddings materialised); equal to
    :func:`poly_nl` up to rounding. For comparison and benchmarks."""
    a = ops.matmul(x, ops.cast(w1, x.dtype))
    b = ops.matmul(x, ops.cast(w2, x.dtype))
    context = ops.mean(ops.cast(a, "float32") * ops.cast(b, "float32"),
                       axis=_positions_axes(x), keepdims=True)
    return ops.matmul(ops.cast(context, x.dtype) * x, ops.cast(w3, x.dtype))
