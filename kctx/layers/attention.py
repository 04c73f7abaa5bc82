"""Regular attention on the unfolded feature map ("Attn", "Attn+Pool" of Kronecker Attention
Networks, Table 1), and the machinery it shares with the Kronecker attention layer."""

import keras
from keras import ops

from kctx.validation import (
    check_image_input,
    check_optional_number,
    check_positive_int,
    standardize_data_format,
    standardize_pool_size,
)
from kctx.layers._projection import ProjectionMixin, serialize_projection_config
from kctx.layers.context_block import register_context_block
from kctx.ops.attention import multi_head_attention, unfold

PROJECTIONS = ("query", "key", "value")


class GlobalAttention2D(ProjectionMixin, keras.layers.Layer):
    """Base of the attention layers of Gao et al.: linear transforms, heads, score BN, residual.

    Subclasses define ``_query_key_value(inputs) -> (Q, K, V)`` as (B, ·, C)
    matrices (before the linear transforms) and ``_fold(out, inputs)`` which
    maps the attention output (B, M, P) to (B, H, W, P).
    """

    def __init__(
        self,
        num_heads=4,
        projections=("value",),
        normalize_scores=True,
        output_channels=None,
        residual_scale_init=None,
        use_bias=False,
        norm_momentum=0.99,
        norm_epsilon=1e-3,
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        data_format=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("num_heads", num_heads)
        check_positive_int("output_channels", output_channels, allow_none=True)
        check_optional_number("residual_scale_init", residual_scale_init)
        if isinstance(projections, str):
            projections = (projections,)
        projections = tuple(projections or ())
        unknown = [p for p in projections if p not in PROJECTIONS]
        if unknown or len(set(projections)) != len(projections):
            raise ValueError(
                f"`projections` must be distinct names among {PROJECTIONS}. "
                f"Received: projections={projections!r}"
            )
        if output_channels is not None and "value" not in projections:
            raise ValueError(
                "`output_channels` needs a linear transform on the values: add 'value' to "
                f"`projections`. Received: output_channels={output_channels}, "
                f"projections={projections!r}"
            )
        self.num_heads = num_heads
        self.projections = projections
        self.normalize_scores = bool(normalize_scores)
        self.output_channels = output_channels
        self.residual_scale_init = residual_scale_init
        self._store_projection_args(use_bias, kernel_initializer, kernel_regularizer)
        self.norm_momentum = norm_momentum
        self.norm_epsilon = norm_epsilon
        self.data_format = standardize_data_format(data_format)
        self.score_norm = None
        if self.normalize_scores:
            # Per-head statistics of the coefficient matrix E = KᵀQ, in float32.
            self.score_norm = keras.layers.BatchNormalization(
                axis=1, momentum=norm_momentum, epsilon=norm_epsilon, dtype="float32",
                name="score_norm",
            )

    def build(self, input_shape):
        channels = check_image_input(self, input_shape)
        out_channels = self.output_channels or channels
        for name, size in (("input channels", channels), ("output channels", out_channels)):
            if size % self.num_heads:
                raise ValueError(
                    f"`num_heads` must divide the {name}. Received: num_heads={self.num_heads} "
                    f"for {size} {name}"
                )
        if self.residual_scale_init is not None and out_channels != channels:
            raise ValueError(
                "A residual connection needs output_channels equal to the input channels. "
                f"Received: output_channels={self.output_channels}, input channels={channels}"
            )
        self._channels, self._out_channels = channels, out_channels
        self.kernels = {
            name: self._projection(name, channels, out_channels if name == "value" else channels)
            for name in self.projections
        }
        if self.score_norm is not None:
            self.score_norm.build((None, self.num_heads, None, None))
        if self.residual_scale_init is not None:
            self.residual_scale = self.add_weight(
                name="residual_scale", shape=(),
                initializer=keras.initializers.Constant(float(self.residual_scale_init)),
            )

    def _project(self, name, x):
        return self._apply(x, self.kernels[name]) if name in self.kernels else x

    def call(self, inputs, training=None):
        query, key, value = self._query_key_value(inputs)
        def normalize(scores):
            return self.score_norm(scores, training=training)

        out = multi_head_attention(
            self._project("query", query), self._project("key", key),
            self._project("value", value), self.num_heads,
            score_transform=normalize if self.score_norm is not None else None,
        )
        out = self._fold(out, inputs)
        if self.residual_scale_init is not None:
            out = inputs + ops.cast(self.residual_scale, out.dtype) * out
        return out

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.output_channels or input_shape[-1],)

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_heads": self.num_heads,
            "projections": list(self.projections),
            "normalize_scores": self.normalize_scores,
            "output_channels": self.output_channels,
            "residual_scale_init": self.residual_scale_init,
            **serialize_projection_config(self),
            "norm_momentum": self.norm_momentum,
            "norm_epsilon": self.norm_epsilon,
            "data_format": self.data_format,
        })
        return config


_SHARED_ARGS = """num_heads: heads splitting the channels (4 in KANets); must divide
            the input and output channels.
        projections: which of ``"query"``, ``"key"``, ``"value"`` get a
            learned linear transform (1×1, C→C; C→``output_channels`` for
            values). KANets transform only V; the segmentation experiment
            (Sec. 4.5) transforms all three.
        normalize_scores: batch-normalise the coefficient matrix E = KᵀQ
            before the softmax (Appendix 1, "to stabilize the training"), with
            one mean/variance/γ/β per head. The softmax ignores per-head
            shifts, so this is a learned, variance-normalised temperature.
        output_channels: P, the output width (default C); needs ``"value"``
            in ``projections``.
        residual_scale_init: ``None`` returns the operator's output (as inside
            KANet modules); a number returns X + σ·O with a learnable scalar σ
            starting at that value (0: the block starts as the identity, as
            SAGAN's γ).
        use_bias: biases on the linear transforms.
        norm_momentum: momentum of the score batch normalisation.
        norm_epsilon: epsilon of the score batch normalisation.
        kernel_initializer: of the linear transforms (Xavier, as the paper).
        kernel_regularizer: of the linear transforms.
        data_format: must resolve to ``"channels_last"``.
        **kwargs: base layer arguments."""


@keras.saving.register_keras_serializable(package="kctx")
class Attention2D(GlobalAttention2D):
    __doc__ = """Regular attention on the mode-3 unfolding of a feature map ("Attn" / "Attn+Pool").

    Q = K = V = X₍₃₎ (Fig. 1, Fig. 2a): every one of the N = H·W positions
    attends to every position, O = V·softmax(KᵀQ) per head with no scaling
    (Sec. 2.1), folded back to (B, H, W, P). Time O(N²C), memory O(N²). With
    ``pool_size`` keys and values are max-pooled with that window and stride
    ("Attn+Pool" of Table 1: 2×2, after Wang et al.), dividing both by its
    area (maps of any size: a partial window at the bottom or right edge
    pools what it covers, so 1×1 and 7×13 maps work; on sizes divisible by
    ``pool_size`` this is the usual pooling). The baseline of Kronecker
    attention (Tables 1 and 3), with the same options as
    :class:`KroneckerAttention2D`.

    Args:
        pool_size: ``None`` or an int / (int, int) pooling of keys and values.
        """ + _SHARED_ARGS + """

    Call arguments:
        inputs: (batch, height, width, channels); height and width may be
            ``None``.
        training: batch statistics of the score normalisation when True.

    Examples:
        >>> layer = Attention2D(num_heads=4, pool_size=2)
        >>> tuple(layer(keras.random.normal((2, 8, 8, 16))).shape)
        (2, 8, 8, 16)

    Reference:
        Gao, Wang & Ji, "Kronecker Attention Networks", KDD 2020, Sec. 2.1–2.2
        and Table 1; Wang et al., "Non-local Neural Networks", CVPR 2018.
    """

    def __init__(self, pool_size=None, **kwargs):
        super().__init__(**kwargs)
        pool_size = standardize_pool_size(pool_size)
        self.pool_size = pool_size

    def _query_key_value(self, inputs):
        context = inputs
        if self.pool_size is not None:
            context = ops.max_pool(inputs, self.pool_size, strides=self.pool_size, padding="same")
        return unfold(inputs), unfold(context), unfold(context)

    def _fold(self, out, inputs):
        shape = ops.shape(inputs)
        return ops.reshape(out, (shape[0], shape[1], shape[2], self._out_channels))

    def get_config(self):
        config = super().get_config()
        config["pool_size"] = self.pool_size
        return config


def _residual_block(layer_class, **defaults):
    """A context-block factory: the layer entering the residual stream with σ = 0."""
    def factory(**kwargs):
        return layer_class(**{"residual_scale_init": 0.0, **defaults, **kwargs})
    return factory


register_context_block("attention", _residual_block(Attention2D))
register_context_block("attention_pool", _residual_block(Attention2D, pool_size=2))
