"""Self-attention over the H·W positions (non-local / SAGAN style)."""

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
from kctx.ops.shapes import positions


@keras.saving.register_keras_serializable(package="kctx")
class SelfAttention2D(ProjectionMixin, keras.layers.Layer):
    """Dot-product self-attention over all positions of a feature map.

    Attention(Q, K, V) = softmax(Q Kᵀ / √d) V  (Eq. 3 of Geng et al.; the
    non-local block of Wang et al. and SAGAN's attention are this with
    different widths and no scaling). Q = X W_q, K = X W_k, V = X W_v over the
    N = H·W positions, the output projection W_o maps back to C channels and
    enters the residual stream through a learnable scale γ initialised to 0
    (SAGAN): Y = X + γ · (Attention(Q, K, V) W_o).

    With ``key_dim = value_dim = C`` (the default) this is the "SA" row of the
    paper's Table 3 (four full-width projections, 4C² parameters, O(N²C)
    MACs). SAGAN uses ``key_dim=C // 8``, ``value_dim=C // 2``,
    ``use_scale=False`` and ``pool_size=2`` (2×2 max-pooled keys and values).
    Scores and softmax are computed in float32 under mixed precision.

    Args:
        key_dim: width of queries and keys; defaults to the input channels.
        value_dim: width of values; defaults to the input channels.
        pool_size: optional int or (int, int); max-pool keys and values with
            this window and stride (SAGAN / BigGAN), reducing cost by its area.
        use_scale: divide the scores by √key_dim (Eq. 3).
        use_bias: add biases to the four projections.
        kernel_initializer: initializer of the projections.
        kernel_regularizer: regularizer of the projections.
        data_format: must resolve to ``"channels_last"``.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (batch, height, width, channels); height and width may be
            ``None``.

    Examples:
        >>> layer = SelfAttention2D(key_dim=8, value_dim=32)
        >>> tuple(layer(keras.random.normal((2, 8, 8, 64))).shape)
        (2, 8, 8, 64)

    Reference:
        Vaswani et al., "Attention Is All You Need", 2017 (Eq. 3 of Geng et
        al. 2021); Zhang et al., "Self-Attention Generative Adversarial
        Networks", ICML 2019 (γ initialised to 0).
    """

    def __init__(
        self,
        key_dim=None,
        value_dim=None,
        pool_size=None,
        use_scale=True,
        use_bias=False,
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        data_format=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("key_dim", key_dim, allow_none=True)
        check_positive_int("value_dim", value_dim, allow_none=True)
        pool_size = standardize_pool_size(pool_size)
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.pool_size = pool_size
        self.use_scale = use_scale
        self._store_projection_args(use_bias, kernel_initializer, kernel_regularizer)
        self.data_format = standardize_data_format(data_format)

    def build(self, input_shape):
        channels = check_image_input(self, input_shape)
        self._channels = channels
        self._key_dim = self.key_dim or channels
        self._value_dim = self.value_dim or channels
        self.query = self._projection("query", channels, self._key_dim)
        self.key = self._projection("key", channels, self._key_dim)
        self.value = self._projection("value", channels, self._value_dim)
        self.output_projection = self._projection("output", self._value_dim, channels)
        self.gamma = self.add_weight(name="gamma", shape=(), initializer="zeros")

    def call(self, inputs):
        shape = ops.shape(inputs)
        batch = shape[0]
        kv_inputs = inputs
        if self.pool_size is not None:
            kv_inputs = ops.max_pool(inputs, self.pool_size, strides=self.pool_size, padding="valid")
        n, m = positions(inputs.shape), positions(kv_inputs.shape)  # static where known
        query = ops.reshape(self._apply(inputs, self.query), (batch, n, self._key_dim))
        key = ops.reshape(self._apply(kv_inputs, self.key), (batch, m, self._key_dim))
        value = ops.reshape(self._apply(kv_inputs, self.value), (batch, m, self._value_dim))
        query = ops.cast(query, "float32")
        if self.use_scale:
            query = query * (1.0 / float(self._key_dim) ** 0.5)
        scores = ops.einsum("bnk,bmk->bnm", query, ops.cast(key, "float32"))
        weights = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        attended = ops.einsum("bnm,bmv->bnv", weights, value)
        out = self._apply(attended, self.output_projection)
        out = ops.reshape(out, shape)
        return inputs + self.gamma * out

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "pool_size": self.pool_size,
                "use_scale": self.use_scale,
                **serialize_projection_config(self),
                "data_format": self.data_format,
            }
        )
        return config


def _sagan_recipe(channels):
    # SAGAN's block (Zhang et al. 2019): C/8 keys, C/2 values, 2×2-max-pooled keys and
    # values, no 1/√d scaling, γ = 0.
    return dict(key_dim=max(1, channels // 8), value_dim=max(1, channels // 2), pool_size=2,
                use_scale=False)


register_context_block("self_attention", lambda **kwargs: SelfAttention2D(**kwargs),
                       recipes={"gan": _sagan_recipe})
