"""Token and position embeddings for fixed-length sequence models."""

import keras
from keras import ops

from kctx.validation import check_sequence_input


@keras.saving.register_keras_serializable(package="kctx")
class PrependToken(keras.layers.Layer):
    """Prepends one learned token (a [CLS] embedding, initialised to zeros) to a
    (batch, n, d) sequence: (batch, n + 1, d).

    Examples:
        >>> tuple(PrependToken()(keras.random.normal((2, 5, 8))).shape)
        (2, 6, 8)
    """

    def build(self, input_shape):
        _, channels = check_sequence_input(self, input_shape, length_known=False)
        self.token = self.add_weight(name="token", shape=(1, 1, channels), initializer="zeros")

    def call(self, inputs):
        token = ops.cast(ops.tile(self.token, (ops.shape(inputs)[0], 1, 1)), inputs.dtype)
        return ops.concatenate([token, inputs], axis=1)

    def compute_output_shape(self, input_shape):
        length = None if input_shape[1] is None else input_shape[1] + 1
        return (input_shape[0], length, input_shape[2])


@keras.saving.register_keras_serializable(package="kctx")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned embedding of each position to a (batch, n, d) sequence (n fixed at build).

    Args:
        initializer: of the (n, d) position embeddings.

    Examples:
        >>> tuple(PositionEmbedding()(keras.random.normal((2, 5, 8))).shape)
        (2, 5, 8)
    """

    def __init__(self, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        length, channels = check_sequence_input(self, input_shape)
        self.positions = self.add_weight(name="positions", shape=(length, channels),
                                         initializer=self.initializer)

    def call(self, inputs):
        return inputs + ops.cast(self.positions, inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config["initializer"] = keras.initializers.serialize(self.initializer)
        return config
