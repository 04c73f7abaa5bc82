"""``keras.layers.Rescaling`` that turns its scale and offset into tensors once."""

import keras
from keras import ops

from kctx.layers._eager_constants import torch_constant


@keras.saving.register_keras_serializable(package="kctx")
class ChannelRescaling(keras.layers.Rescaling):
    """``keras.layers.Rescaling`` (x · scale + offset, per channel or scalar) that makes its
    scale and offset tensors once per compute dtype instead of at every call.

    Keras' ``Rescaling`` converts its Python scale and offset at every call. On PyTorch,
    which runs eagerly, each conversion is a host-to-device copy from pageable memory: it
    waits for the GPU's queue to drain, and it cannot be captured in a CUDA graph
    (``torch.cuda.graph`` refuses it). The other backends trace the call once, so there
    the result is the same either way. Same config, same output as ``Rescaling``.

    Args:
        scale: float or per-channel list, the factor.
        offset: float or per-channel list, added after scaling.
        **kwargs: base layer arguments (``name``, ``dtype``).

    Call arguments:
        inputs: (..., channels) tensor.

    Example:
        >>> import numpy as np
        >>> layer = ChannelRescaling([1.0, 2.0], [0.0, -1.0])
        >>> np.asarray(layer(np.ones((1, 2), "float32"))).tolist()
        [[1.0, 1.0]]
    """

    def __init__(self, scale, offset=0.0, **kwargs):
        super().__init__(scale, offset, **kwargs)

    def call(self, inputs):
        dtype = self.compute_dtype
        if keras.backend.backend() != "torch":
            return super().call(inputs)
        scale, offset = torch_constant(
            self, "_torch_constants", str(inputs.device), dtype,
            lambda: (ops.convert_to_tensor(self.scale, dtype),
                     ops.convert_to_tensor(self.offset, dtype)))
        if len(scale.shape) > 0 and keras.config.image_data_format() == "channels_first":
            scale = ops.reshape(scale, tuple(scale.shape) + (1,) * (3 - len(scale.shape)))
        return ops.cast(inputs, dtype) * scale + offset
