"""Multi-head dot-product attention on channels-last matrices, and the 2-D regular attention."""

from keras import ops

from kctx.validation import check_positive_int


def multi_head_attention(query, key, value, num_heads=1, score_transform=None):
    """O = V · softmax(Kᵀ Q) per head, with the softmax over the keys of each query.

    The attention operator of Sec. 2.1 of Gao et al. (Kronecker Attention
    Networks, KDD 2020), written channels-last: the paper's d×m query matrix
    Q is ``query[b].T`` here. There is no 1/√d scaling (as in the paper).
    Heads split the channels of ``query``/``key`` and of ``value`` into
    ``num_heads`` equal groups; their outputs are concatenated. Scores and
    softmax are computed in float32.

    Args:
        query: (B, M, D) — M query vectors.
        key: (B, N, D) — N key vectors.
        value: (B, N, P) — N value vectors.
        num_heads: number of heads; must divide D and P.
        score_transform: optional callable applied to the float32 scores
            (B, num_heads, M, N) before the softmax (e.g. batch normalisation).

    Returns:
        (B, M, P) in the dtype of ``value``.
    """
    check_positive_int("num_heads", num_heads)
    depth, width = query.shape[-1], value.shape[-1]
    for name, size in (("query/key channels", depth), ("value channels", width)):
        if size is not None and size % num_heads:
            raise ValueError(
                f"`num_heads` must divide the {name}. Received: num_heads={num_heads} "
                f"for {size} channels"
            )
    dtype = value.dtype

    def float32(t):  # no op when already float32 (the operator is a handful of small ops)
        return t if t.dtype == "float32" else ops.cast(t, "float32")

    def heads(t, size):  # (B, L, C) -> (B, heads, L, C / heads); one head: (B, 1, L, C)
        if num_heads == 1:
            return ops.expand_dims(t, 1)
        t = ops.reshape(t, (ops.shape(t)[0], ops.shape(t)[1], num_heads, size // num_heads))
        return ops.transpose(t, (0, 2, 1, 3))

    q = heads(float32(query), depth)
    k = heads(float32(key), depth)
    v = heads(float32(value), width)
    scores = ops.matmul(q, ops.swapaxes(k, -1, -2))  # E = KᵀQ: (B, h, M, N), a row per query
    if score_transform is not None:
        scores = score_transform(scores)
    weights = ops.softmax(scores, axis=-1)  # over the keys
    out = ops.matmul(weights, v)  # (B, h, M, P / h)
    if num_heads == 1:
        out = out[:, 0]
    else:
        out = ops.transpose(out, (0, 2, 1, 3))
        out = ops.reshape(out, (ops.shape(out)[0], ops.shape(out)[1], width))
    return out if out.dtype == dtype else ops.cast(out, dtype)


def unfold(x):
    """Mode-3 unfolding, channels-last: (B, H, W, C) -> (B, H·W, C) (Fig. 1)."""
    shape = ops.shape(x)
    return ops.reshape(x, (shape[0], shape[1] * shape[2], x.shape[-1]))


def attention_2d(x, num_heads=1, pool_size=None):
    """Regular (non-local) attention on a feature map: Q = K = V = the mode-3 unfolding.

    With ``pool_size`` the keys and values are max-pooled with that window and
    stride ("Attn+Pool" of Table 1; Wang et al.'s subsampling). Cost
    O(H²W²C) (O(H²W²C / p²) pooled).

    Args:
        x: (B, H, W, C).
        num_heads: heads splitting C.
        pool_size: None, an int or an (int, int) window for keys and values.

    Returns:
        (B, H, W, C).
    """
    context = x if pool_size is None else ops.max_pool(x, pool_size, strides=pool_size)
    out = multi_head_attention(unfold(x), unfold(context), unfold(context), num_heads)
    return ops.reshape(out, ops.shape(x))
