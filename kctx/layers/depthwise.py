"""``keras.layers.DepthwiseConv2D`` computed as a fused sum of taps on JAX GPUs."""

import keras

from kctx.ops.depthwise import depthwise_conv_taps


@keras.saving.register_keras_serializable(package="kctx")
class TapDepthwiseConv2D(keras.layers.DepthwiseConv2D):
    """``keras.layers.DepthwiseConv2D`` (same config, same weights) that on JAX GPUs computes
    its strip convolutions (1×k, k×1: stride 1, "same" padding, undilated, depth multiplier
    1, channels-last) as :func:`kctx.ops.depthwise.depthwise_conv_taps`: a sum of k shifted
    slices times each tap's weight, which XLA fuses into element-wise kernels.

    XLA hands grouped convolutions to cuDNN's ``conv2d_grouped_direct_kernel``, far from the
    GPU's memory bandwidth for MSCAN's long strips: on an H200 at batch 16 it took 16.8 of
    SegNeXt-T's 33.6 busy milliseconds (``jax_profile``), and with this form the whole
    network ran in 23.1 instead of 35.8 ms (``results/gpu_h200/lease3``). Square kernels
    (MSCA's 5×5, the MLP's 3×3) stay XLA's convolution (``SQUARE_TAPS``): as taps they cost
    SegNeXt-T 20.0 against 13.4 ms at batch 16 (``results/gpu_h200/lease4``). JAX on other
    platforms (``TAP_PLATFORMS``) and the other backends keep their own convolution
    (PyTorch's depthwise kernels and TensorFlow's oneDNN ones are fast); so does any other
    configuration. The outputs agree with the convolution to float rounding (the taps are
    added in another order).

    Args:
        kernel_size: (kh, kw) or an int, as ``keras.layers.DepthwiseConv2D``'s.
        **kwargs: the other arguments of ``keras.layers.DepthwiseConv2D`` (``padding``,
            ``use_bias``, ``name``...).

    Call arguments:
        inputs: (B, H, W, C) with static H and W on JAX's taps path.

    Example:
        >>> import numpy as np
        >>> layer = TapDepthwiseConv2D((1, 21), padding="same")
        >>> tuple(layer(np.zeros((1, 8, 32, 4), "float32")).shape)
        (1, 8, 32, 4)

    Reference:
        ``tools/gpu_depthwise.py`` (each of MSCAN's depthwise convolutions on a GPU, XLA's,
        the taps and PyTorch's) and ``python -m kctx.bench segnext-gpu``.
    """

    def __init__(self, kernel_size, **kwargs):
        super().__init__(kernel_size, **kwargs)

    # The JAX platforms where the taps were measured faster than XLA's convolution (on
    # a CPU, at SegNeXt's small test sizes, they were not; TPUs are unmeasured).
    TAP_PLATFORMS = ("gpu",)
    # Whether kernels with no side of 1 take the taps too, as lease 3 ran SegNeXt (on an H200,
    # SegNeXt-T float32 at batch 16, with the gathered resize: 20.0 ms so, 13.4 ms without).
    SQUARE_TAPS = False

    def _uses_taps(self, inputs):
        if keras.backend.backend() != "jax":
            return False
        import jax

        return (jax.default_backend() in self.TAP_PLATFORMS and tuple(self.strides) == (1, 1)
                and self.padding == "same" and tuple(self.dilation_rate) == (1, 1)
                and self.depth_multiplier == 1 and self.data_format == "channels_last"
                and (self.SQUARE_TAPS or 1 in tuple(self.kernel_size))
                and all(isinstance(side, int) for side in inputs.shape[1:3]))

    def call(self, inputs):
        if not self._uses_taps(inputs):
            return super().call(inputs)
        y = depthwise_conv_taps(inputs, self.kernel, self.bias if self.use_bias else None)
        return y if self.activation is None else self.activation(y)
