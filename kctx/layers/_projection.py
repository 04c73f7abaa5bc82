"""Position-wise linear maps (1×1 convolutions) shared by the attention-style layers."""

import keras
from keras import ops


class ProjectionMixin:
    """``self._projection(name, fan_in, fan_out)`` adds a kernel (and a bias when
    ``self.use_bias``) initialised and regularised by ``self.kernel_initializer`` /
    ``self.kernel_regularizer``; :meth:`_apply` maps the last axis with it."""

    def _store_projection_args(self, use_bias, kernel_initializer, kernel_regularizer):
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)

    def _projection(self, name, fan_in, fan_out, use_bias=None):
        kernel = self.add_weight(name=f"{name}_kernel", shape=(fan_in, fan_out),
                                 initializer=self.kernel_initializer,
                                 regularizer=self.kernel_regularizer)
        bias = None
        if self.use_bias if use_bias is None else use_bias:
            bias = self.add_weight(name=f"{name}_bias", shape=(fan_out,), initializer="zeros")
        return kernel, bias

    @staticmethod
    def _apply(x, projection):
        kernel, bias = projection
        y = ops.matmul(x, kernel)
        return y if bias is None else y + bias


def serialize_projection_config(layer):
    """The config entries of :class:`ProjectionMixin`'s attributes."""
    return {"use_bias": layer.use_bias,
            "kernel_initializer": keras.initializers.serialize(layer.kernel_initializer),
            "kernel_regularizer": keras.regularizers.serialize(layer.kernel_regularizer)}
