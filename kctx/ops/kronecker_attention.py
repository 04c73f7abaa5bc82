"""Kronecker attention operators KAO_KV and KAO_QKV (Gao, Wang & Ji, KDD 2020)."""

from keras import ops

from kctx.validation import check_choice
from kctx.ops.attention import multi_head_attention, unfold

KRONECKER_MODES = ("kv", "qkv")


def kronecker_summary(x):
    """C = [H̄ᵀ, L̄ᵀ] of Eq. 1, channels-last: (B, H, W, C) -> (B, W + H, C).

    Rows 0..W−1 are the horizontal average H̄ = (1/h) Σᵢ X_{i::} (one row per
    column j of the map); rows W..W+H−1 the lateral average L̄ = (1/w) Σⱼ X_{:j:}
    (one row per image row i).
    """
    horizontal = ops.mean(x, axis=1)  # (B, W, C)
    lateral = ops.mean(x, axis=2)  # (B, H, C)
    return ops.concatenate([horizontal, lateral], axis=1)


def outer_sum(attended, height, width):
    """Fold KAO_QKV's output [H̃, L̃] (B, W + H, P) into (B, H, W, P) (Eq. 3).

    Frontal slice c is the outer sum L̃_c ⋄ H̃_c: Y[i, j, c] = L̃[i, c] + H̃[j, c].
    """
    horizontal = attended[:, :width]  # H̃: (B, W, P)
    lateral = attended[:, width:]  # L̃: (B, H, P)
    return lateral[:, :, None, :] + horizontal[:, None, :, :]


def kronecker_attention(x, mode="kv", num_heads=1):
    """The parameter-free Kronecker attention operator on (B, H, W, C).

    * ``"kv"`` (Eq. 2): O = attn(X₍₃₎, C, C) — every position queries the
      W + H averaged vectors; folded back to (B, H, W, C). O(HW·(H+W)·C).
    * ``"qkv"`` (Eq. 3): [H̃, L̃] = attn(C, C, C), output the outer sum of
      H̃ and L̃ per channel. O((H+W)²·C).

    attn(Q, K, V) = V·softmax(KᵀQ) with the softmax over the keys and no
    scaling (Sec. 2.1); heads split the channels.

    Args:
        x: (B, H, W, C).
        mode: ``"kv"`` or ``"qkv"``.
        num_heads: must divide C.

    Returns:
        (B, H, W, C).

    Reference:
        Gao, Wang & Ji, "Kronecker Attention Networks", KDD 2020, Eq. 1–3.
    """
    check_choice("mode", mode, KRONECKER_MODES)
    if len(x.shape) != 4:
        raise ValueError(
            f"kronecker_attention expects a rank-4 input (batch, height, width, channels). "
            f"Received: shape={tuple(x.shape)}"
        )
    summary = kronecker_summary(x)
    if mode == "kv":
        out = multi_head_attention(unfold(x), summary, summary, num_heads)
        return ops.reshape(out, ops.shape(x))
    shape = ops.shape(x)
    out = multi_head_attention(summary, summary, summary, num_heads)
    return outer_sum(out, shape[1], shape[2])
