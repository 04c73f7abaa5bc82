"""Causal linear attention (Katharopoulos et al., 2020): a baseline for causal token mixers.

"Transformers are RNNs: Fast Autoregressive Transformers with Linear Attention" (ICML 2020):
with the feature map φ(x) = elu(x) + 1, causal attention is

    V'_t = φ(Q_t)ᵀ S_t / (φ(Q_t)ᵀ z_t),   S_t = Σ_{j≤t} φ(K_j) V_jᵀ,   z_t = Σ_{j≤t} φ(K_j)

(Eq. 9 with the causal sums of Sec. 3.3), O(T·d_k·d_v) instead of softmax attention's
O(T²·d). Written here in its chunkwise form: within a chunk the masked products
(φ(Q)φ(K)ᵀ ⊙ M)·V, across chunks the carried sums S and z, so memory stays
O(chunk² + d_k·d_v); :func:`causal_linear_attention_step` is the recurrent form, one
position at a time with the state (S, z). Layout: (batch, heads, T, channels).
"""

from keras import ops

from kctx.validation import check_positive_int


def feature_map(x):
    """φ(x) = elu(x) + 1 (Katharopoulos et al., Eq. 7): positive, so the normaliser is."""
    return ops.elu(x) + 1.0


def causal_linear_attention(q, k, v, chunk_size=64, eps=1e-6):
    """Causal linear attention of queries ``q`` and keys ``k`` (B, H, T, d_k) over values
    ``v`` (B, H, T, d_v): position t attends to positions ≤ t.

    Args:
        q: queries (before the feature map).
        k: keys (before the feature map).
        v: values.
        chunk_size: positions per chunk (the last chunk may be shorter).
        eps: added to the normaliser φ(Q_t)ᵀ z_t.

    Returns:
        (B, H, T, d_v).

    Examples:
        >>> q, k, v = (keras.random.normal((1, 2, 10, 4), seed=s) for s in range(3))
        >>> tuple(causal_linear_attention(q, k, v, chunk_size=4).shape)
        (1, 2, 10, 4)

    Reference:
        Katharopoulos, Vyas, Pappas & Fleuret, "Transformers are RNNs", ICML 2020, Eq. 7–9.
    """
    check_positive_int("chunk_size", chunk_size)
    q, k = feature_map(q), feature_map(k)
    length = q.shape[2]
    sums, normaliser, outputs = None, None, []
    for start in range(0, length, chunk_size):
        q_c, k_c, v_c = (t[:, :, start:start + chunk_size] for t in (q, k, v))
        size = q_c.shape[2]
        mask = ops.cast(ops.tril(ops.ones((size, size))), q.dtype)
        scores = ops.einsum("bhtd,bhsd->bhts", q_c, k_c) * mask
        numerator = ops.einsum("bhts,bhsv->bhtv", scores, v_c)
        denominator = ops.sum(scores, axis=-1)
        if sums is not None:
            numerator = numerator + ops.einsum("bhtd,bhdv->bhtv", q_c, sums)
            denominator = denominator + ops.einsum("bhtd,bhd->bht", q_c, normaliser)
        outputs.append(numerator / (ops.expand_dims(denominator, -1) + eps))
        chunk_sums = ops.einsum("bhsd,bhsv->bhdv", k_c, v_c)
        chunk_normaliser = ops.sum(k_c, axis=2)
        sums = chunk_sums if sums is None else sums + chunk_sums
        normaliser = chunk_normaliser if normaliser is None else normaliser + chunk_normaliser
    return ops.concatenate(outputs, axis=2)


def causal_linear_attention_step(q_t, k_t, v_t, state, eps=1e-6):
    """One position of :func:`causal_linear_attention` in its recurrent form.

    Args:
        q_t: the position's query (B, H, d_k).
        k_t: its key (B, H, d_k).
        v_t: its value (B, H, d_v).
        state: ``(S, z)`` of the positions before, (B, H, d_k, d_v) and (B, H, d_k) (zeros
            at the start).
        eps: added to the normaliser.

    Returns:
        ``(output, state)``: (B, H, d_v) and the sums including this position.
    """
    q_t, k_t = feature_map(q_t), feature_map(k_t)
    sums = state[0] + ops.einsum("bhd,bhv->bhdv", k_t, v_t)
    normaliser = state[1] + k_t
    numerator = ops.einsum("bhd,bhdv->bhv", q_t, sums)
    denominator = ops.sum(q_t * normaliser, axis=-1, keepdims=True)
    return numerator / (denominator + eps), (sums, normaliser)
