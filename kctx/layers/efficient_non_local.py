"""The efficient non-local block of Shen et al. (efficient attention)."""

import keras
from keras import ops

from kctx.validation import check_image_input, check_positive_int, standardize_data_format
from kctx.layers._projection import ProjectionMixin, serialize_projection_config
from kctx.layers.context_block import register_context_block
from kctx.ops.attention import unfold
from kctx.ops.efficient_attention import efficient_attention


@keras.saving.register_keras_serializable(package="kctx")
class EfficientNonLocal2D(ProjectionMixin, keras.layers.Layer):
    """Efficient non-local block: Z = X + ρ_q(Q) (ρ_k(K)ᵀ V) W_o.

    Q, K, V are 1×1 convolutions of X; ρ_k is a softmax over the positions
    for each key channel and ρ_q a softmax over each query's channels, so the
    product can be taken right to left (:func:`kctx.ops.efficient_attention`):
    O(N·d_k·d_v) time, O(N·C + d_k·d_v) memory, no N×N matrix. Heads split the
    key and value channels. W_o ("reprojection") maps back to C channels and
    the result is added to the input, as in Shen et al.'s block.

    Args:
        key_dim: width of queries and keys (default C // 2, at least 1).
        value_dim: width of values (default C // 2, at least 1).
        num_heads: heads (must divide key_dim and value_dim).
        use_bias: biases in the four projections (Shen et al. use them).
        kernel_initializer: initializer of the projections' kernels.
        kernel_regularizer: regularizer of the projections' kernels.
        data_format: must resolve to ``"channels_last"``.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (batch, height, width, channels); height and width may be ``None``.

    Examples:
        >>> layer = EfficientNonLocal2D(num_heads=2)
        >>> tuple(layer(keras.random.normal((2, 8, 8, 16))).shape)
        (2, 8, 8, 16)

    Reference:
        Shen et al., "Efficient Attention: Attention with Linear
        Complexities", WACV 2021, Eq. 2 and Sec. 3.3 (the efficient attention
        module); Babiloni et al., "Poly-NL", ICCV 2021, Sec. 4.2 (E-NL).
    """

    def __init__(self, key_dim=None, value_dim=None, num_heads=1, use_bias=True,
                 kernel_initializer="glorot_uniform", kernel_regularizer=None, data_format=None,
                 **kwargs):
        super().__init__(**kwargs)
        check_positive_int("key_dim", key_dim, allow_none=True)
        check_positive_int("value_dim", value_dim, allow_none=True)
        check_positive_int("num_heads", num_heads)
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.num_heads = num_heads
        self._store_projection_args(use_bias, kernel_initializer, kernel_regularizer)
        self.data_format = standardize_data_format(data_format)

    def build(self, input_shape):
        channels = check_image_input(self, input_shape)
        key_dim = self.key_dim or max(1, channels // 2)
        value_dim = self.value_dim or max(1, channels // 2)
        for name, size in (("key_dim", key_dim), ("value_dim", value_dim)):
            if size % self.num_heads:
                raise ValueError(f"`num_heads` must divide `{name}`. Received: num_heads="
                                 f"{self.num_heads}, {name}={size} (input channels {channels})")
        self.query = self._projection("query", channels, key_dim)
        self.key = self._projection("key", channels, key_dim)
        self.value = self._projection("value", channels, value_dim)
        self.output_projection = self._projection("output", value_dim, channels)

    def call(self, inputs):
        attended = efficient_attention(unfold(self._apply(inputs, self.query)),
                                       unfold(self._apply(inputs, self.key)),
                                       unfold(self._apply(inputs, self.value)), self.num_heads)
        y = self._apply(attended, self.output_projection)
        return inputs + ops.reshape(y, ops.shape(inputs))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update({
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "num_heads": self.num_heads,
            **serialize_projection_config(self),
            "data_format": self.data_format,
        })
        return config


register_context_block("efficient_non_local", lambda **kwargs: EfficientNonLocal2D(**kwargs))
