"""Kronecker attention operators as a layer (KAO_KV, KAO_QKV)."""

import keras
from keras import ops

from kctx.validation import check_choice
from kctx.layers.attention import _SHARED_ARGS, GlobalAttention2D, _residual_block
from kctx.layers.context_block import register_context_block
from kctx.ops.attention import unfold
from kctx.ops.kronecker_attention import KRONECKER_MODES, kronecker_summary, outer_sum


@keras.saving.register_keras_serializable(package="kctx")
class KroneckerAttention2D(GlobalAttention2D):
    __doc__ = """Kronecker attention operator (KAO) as used in KANets.

    The horizontal and lateral averages H̄ = (1/h)Σᵢ X_{i::} ∈ R^{w×c} and
    L̄ = (1/w)Σⱼ X_{:j:} ∈ R^{h×c} form C = [H̄ᵀ, L̄ᵀ] (Eq. 1). Then, with
    attn(Q, K, V) = V·softmax(KᵀQ) per head:

    * ``mode="kv"`` (Eq. 2): O = attn(X₍₃₎, C, C); every position queries the
      h + w summary vectors; folded back to (h, w). O(hw(h+w)c) time.
    * ``mode="qkv"`` (Eq. 3): [H̃, L̃] = attn(C, C, C) and the output's c-th
      frontal slice is the outer sum L̃_c ⋄ H̃_c. O((h+w)²c) time.

    The linear transforms are applied to the h + w rows of C (averaging and a
    linear map commute), and to X₍₃₎ for KV queries.

    Args:
        mode: ``"kv"`` or ``"qkv"``.
        """ + _SHARED_ARGS + """

    Call arguments:
        inputs: (batch, height, width, channels); height and width may be
            ``None``.
        training: batch statistics of the score normalisation when True.

    Examples:
        >>> layer = KroneckerAttention2D(mode="qkv", num_heads=4)
        >>> tuple(layer(keras.random.normal((2, 14, 14, 32))).shape)
        (2, 14, 14, 32)

    Reference:
        Gao, Wang & Ji, "Kronecker Attention Networks", KDD 2020, Eq. 1–3,
        Sec. 3.2 and Appendix 1 and 4 (4 heads, V-only transform, batch
        normalisation of the coefficient matrices).
    """

    def __init__(self, mode="kv", **kwargs):
        super().__init__(**kwargs)
        check_choice("mode", mode, KRONECKER_MODES)
        self.mode = mode

    def _query_key_value(self, inputs):
        summary = kronecker_summary(inputs)
        query = unfold(inputs) if self.mode == "kv" else summary
        return query, summary, summary

    def _fold(self, out, inputs):
        shape = ops.shape(inputs)
        if self.mode == "kv":
            return ops.reshape(out, (shape[0], shape[1], shape[2], self._out_channels))
        return outer_sum(out, shape[1], shape[2])

    def get_config(self):
        config = super().get_config()
        config["mode"] = self.mode
        return config


register_context_block("kao_kv", _residual_block(KroneckerAttention2D, mode="kv"))
register_context_block("kao_qkv", _residual_block(KroneckerAttention2D, mode="qkv"))
