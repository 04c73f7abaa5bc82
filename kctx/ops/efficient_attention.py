"""Efficient attention (Shen et al.): softmax-normalised keys and queries, computed right to left."""

from keras import ops

from kctx.validation import check_positive_int


def efficient_attention(query, key, value, num_heads=1):
    """E = ρ_q(Q) (ρ_k(K)ᵀ V) — Eq. 2 of Shen et al., "Efficient Attention".

    ρ_k is a softmax over the N positions for each key channel, ρ_q a softmax
    over the channels of each query, and the product is taken right to left,
    so the N×N matrix ρ_q(Q) ρ_k(K)ᵀ is never formed: each head builds a
    d_k × d_v global context ρ_k(K)ᵀ V in O(N d_k d_v) and each query reads it
    in O(d_k d_v). Heads split the key and value channels into ``num_heads``
    equal groups (Shen et al.'s head_count). Softmaxes and products in float32.

    Args:
        query: (B, N, D_k); key: (B, M, D_k); value: (B, M, D_v).
        num_heads: must divide D_k and D_v.

    Returns:
        (B, N, D_v) in the dtype of ``value``.
    """
    check_positive_int("num_heads", num_heads)
    depth, width = query.shape[-1], value.shape[-1]
    for name, size in (("key channels", depth), ("value channels", width)):
        if size is not None and size % num_heads:
            raise ValueError(f"`num_heads` must divide the {name}. "
                             f"Received: num_heads={num_heads} for {size} channels")
    dtype = value.dtype

    def heads(t, size):  # (B, L, C) -> (B, h, L, C / h)
        t = ops.cast(t, "float32")
        t = ops.reshape(t, (ops.shape(t)[0], ops.shape(t)[1], num_heads, size // num_heads))
        return ops.transpose(t, (0, 2, 1, 3))

    q = ops.softmax(heads(query, depth), axis=-1)  # ρ_q: over each query's channels
    k = ops.softmax(heads(key, depth), axis=-2)  # ρ_k: over the positions
    context = ops.matmul(ops.swapaxes(k, -1, -2), heads(value, width))  # (B, h, d_k, d_v)
    out = ops.transpose(ops.matmul(q, context), (0, 2, 1, 3))  # (B, N, h, d_v)
    out = ops.reshape(out, (ops.shape(out)[0], ops.shape(out)[1], width))
    return out if dtype == "float32" else ops.cast(out, dtype)
