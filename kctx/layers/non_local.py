"""The non-local block of Wang et al. (embedded Gaussian)."""

import keras
from keras import ops

from kctx.validation import (
    check_image_input,
    check_positive_int,
    standardize_data_format,
    standardize_pool_size,
)
from kctx.layers._projection import ProjectionMixin, serialize_projection_config
from kctx.layers.context_block import register_context_block
from kctx.ops.attention import multi_head_attention, unfold


@keras.saving.register_keras_serializable(package="kctx")
class NonLocal2D(ProjectionMixin, keras.layers.Layer):
    """Non-local block, embedded Gaussian: Z = X + BN(Y W_z), Y = softmax(θ(X) φ(X)ᵀ) g(X).

    θ, φ, g are 1×1 convolutions to ``inter_channels`` (C/2 by default, as
    Wang et al.); the softmax runs over the N positions for each query
    (Eq. 1–2 of Babiloni et al. with f the embedded Gaussian). The N×N
    similarity matrix makes it O(N²·C) in time and O(N²) in memory. W_z maps
    back to C channels and is followed by batch normalisation whose scale is
    initialised to zero, so the block starts as the identity (Wang et al.,
    Sec. 4.1). With ``pool_size`` φ and g are max-pooled (Wang et al.'s
    subsampling), dividing the cost by the pool area. Scores and softmax are
    computed in float32.

    Args:
        inter_channels: width of θ, φ, g (default C // 2, at least 1).
        pool_size: optional int or pair; max-pool φ and g with this window and stride.
        use_bias: biases in θ, φ, g and W_z (Wang et al. use them).
        norm_momentum: momentum of the output batch normalisation.
        kernel_initializer: initializer of the kernels of the four projections.
        kernel_regularizer: regularizer of the kernels of the four projections.
        data_format: must resolve to ``"channels_last"``.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (batch, height, width, channels); height and width may be ``None``.
        training: batch-normalisation mode.

    Examples:
        >>> layer = NonLocal2D()
        >>> tuple(layer(keras.random.normal((2, 8, 8, 16))).shape)
        (2, 8, 8, 16)

    Reference:
        Wang et al., "Non-local Neural Networks", CVPR 2018, Eq. 1–3 (embedded
        Gaussian); Babiloni et al., "Poly-NL", ICCV 2021, Eq. 1–2.
    """

    def __init__(self, inter_channels=None, pool_size=None, use_bias=True, norm_momentum=0.99,
                 kernel_initializer="glorot_uniform", kernel_regularizer=None, data_format=None,
                 **kwargs):
        super().__init__(**kwargs)
        check_positive_int("inter_channels", inter_channels, allow_none=True)
        self.inter_channels = inter_channels
        self.pool_size = standardize_pool_size(pool_size)
        self.norm_momentum = norm_momentum
        self._store_projection_args(use_bias, kernel_initializer, kernel_regularizer)
        self.data_format = standardize_data_format(data_format)
        self.norm = keras.layers.BatchNormalization(momentum=norm_momentum,
                                                    gamma_initializer="zeros",
                                                    dtype=self.dtype_policy, name="norm")

    def build(self, input_shape):
        channels = check_image_input(self, input_shape)
        width = self.inter_channels or max(1, channels // 2)
        self.theta = self._projection("theta", channels, width)
        self.phi = self._projection("phi", channels, width)
        self.g = self._projection("g", channels, width)
        self.output_projection = self._projection("output", width, channels)
        self.norm.build(tuple(input_shape))

    def call(self, inputs, training=None):
        context = inputs
        if self.pool_size is not None:
            context = ops.max_pool(inputs, self.pool_size, strides=self.pool_size)
        attended = multi_head_attention(unfold(self._apply(inputs, self.theta)),
                                        unfold(self._apply(context, self.phi)),
                                        unfold(self._apply(context, self.g)))
        y = self._apply(attended, self.output_projection)
        y = ops.reshape(y, ops.shape(inputs))
        return inputs + self.norm(y, training=training)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update({
            "inter_channels": self.inter_channels,
            "pool_size": self.pool_size,
            "norm_momentum": self.norm_momentum,
            **serialize_projection_config(self),
            "data_format": self.data_format,
        })
        return config


register_context_block("non_local", lambda **kwargs: NonLocal2D(**kwargs))
