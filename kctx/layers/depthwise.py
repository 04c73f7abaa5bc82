"""``keras.layers.DepthwiseConv2D`` computed as a fused sum of taps where XLA's grouped
convolution is slow (JAX on CPUs, and on GPUs for strip kernels), and wherever TensorFlow's
own depthwise kernel refuses the strides."""

import contextlib
import contextvars
import functools

import keras

from kctx.ops.depthwise import depthwise_conv_taps

_AS_CONVOLUTIONS = contextvars.ContextVar("kctx_depthwise_as_convolutions", default=False)


@contextlib.contextmanager
def as_convolutions():
    """Within this context every ``TapDepthwiseConv2D`` computes the backend's convolution,
    whatever its ``taps``: what ``kctx.profile``'s MAC counters trace, to which the taps'
    multiply-adds are element-wise work (so a model's count is the same on every backend
    and platform).

    Example:
        >>> import numpy as np
        >>> layer = TapDepthwiseConv2D(3, taps=True)
        >>> x = np.zeros((1, 8, 8, 2), "float32")
        >>> with as_convolutions():
        ...     layer._uses_taps(x)
        False
        >>> layer._uses_taps(x)
        True
    """
    token = _AS_CONVOLUTIONS.set(True)
    try:
        yield
    finally:
        _AS_CONVOLUTIONS.reset(token)


@keras.saving.register_keras_serializable(package="kctx")
class TapDepthwiseConv2D(keras.layers.DepthwiseConv2D):
    """``keras.layers.DepthwiseConv2D`` (same config, same weights) computed, where it is
    faster, as :func:`kctx.ops.depthwise.depthwise_conv_taps`: a sum of kh·kw shifted
    (strided) slices times each tap's weight, which XLA fuses into element-wise kernels.

    XLA's grouped convolutions are slow on JAX's CPUs and, for long strips, on GPUs. On a
    CPU, forward and both gradients of each of MSCAN's and the KANets' depthwise
    convolutions run several times faster as taps (``python -m kctx.bench depthwise``): the
    digits KANet's JAX training step took 718 instead of 2,570 ms, SegNeXt-T's call at 512²
    382 instead of 2,360 ms (docs/workflows/backends.md). On an H200, cuDNN's
    ``conv2d_grouped_direct_kernel`` took 16.8 of SegNeXt-T's 33.6 busy milliseconds at
    batch 16 (``jax_profile``), and with MSCAN's strips (1×k, k×1) as taps the network ran
    in 23.1 instead of 35.8 ms (``results/gpu_h200/lease3``); its square kernels (MSCA's
    5×5, the MLP's 3×3) stay XLA's convolution there: as taps they cost SegNeXt-T 20.0
    against 13.4 ms (``results/gpu_h200/lease4``). Which configurations take
    the taps on each JAX platform is ``TAP_KERNELS``; TPUs (unmeasured) and the other
    backends (TensorFlow's oneDNN kernels and PyTorch's depthwise ones are fast) keep their
    own convolution unless ``taps=True``. The outputs agree with the convolution to float
    rounding (the taps are added in another order).

    Unequal strides (s ≠ t) on TensorFlow take the taps too, or where the map size is not
    static (and with ``taps=False``) the convolution compiled by XLA: TensorFlow's own
    depthwise kernel, which runs where oneDNN is off (by default on CPUs without AVX-512)
    and on GPUs, refuses them, where ``keras.layers.DepthwiseConv2D`` fails.

    Args:
        kernel_size: (kh, kw) or an int, as ``keras.layers.DepthwiseConv2D``'s.
        taps: None (default): the taps where ``TAP_KERNELS`` says they are faster; True:
            always the taps (any backend; needs depth multiplier 1, no dilation,
            channels-last and a static map size); False: always the backend's convolution.
        **kwargs: the other arguments of ``keras.layers.DepthwiseConv2D`` (``strides``,
            ``padding``, ``use_bias``, ``name``...).

    Call arguments:
        inputs: (B, H, W, C); H and W static on the taps' path.

    Example:
        >>> import numpy as np
        >>> layer = TapDepthwiseConv2D((1, 21), padding="same")
        >>> tuple(layer(np.zeros((1, 8, 32, 4), "float32")).shape)
        (1, 8, 32, 4)
        >>> strided = TapDepthwiseConv2D(3, strides=2, padding="same", taps=True)
        >>> tuple(strided(np.zeros((2, 9, 9, 4), "float32")).shape)
        (2, 5, 5, 4)

    Reference:
        ``python -m kctx.bench depthwise`` (each configuration as the backend's
        convolution and as taps), ``tools/gpu_depthwise.py`` (MSCAN's depthwise
        convolutions on a GPU) and ``python -m kctx.bench segnext-gpu``.
    """

    # With `taps=None`, on JAX: the platforms that take the taps and for which
    # configurations, as measured on each: "all" (every one the taps compute), "strips" (a
    # kernel side of 1, stride 1, "same" padding). CPUs: every configuration measured was
    # faster as taps, forward and training step (`python -m kctx.bench depthwise`). GPUs: the
    # strips (lease 3); "all" is how lease 3 ran SegNeXt (on an H200, SegNeXt-T float32 at
    # batch 16, with the gathered resize: 20.0 ms so, 13.4 ms with "strips").
    TAP_KERNELS = {"cpu": "all", "gpu": "strips"}

    def __init__(self, kernel_size, taps=None, **kwargs):
        super().__init__(kernel_size, **kwargs)
        if not (taps is None or isinstance(taps, bool)):
            raise ValueError(f"`taps` must be None, True or False. Received: taps={taps!r}")
        if taps and not self._taps_compute_it():
            raise ValueError(
                "`taps=True` needs depth_multiplier=1, dilation_rate=(1, 1) and "
                f"data_format='channels_last'. Received: taps={taps!r} with "
                f"depth_multiplier={self.depth_multiplier}, "
                f"dilation_rate={tuple(self.dilation_rate)}, data_format={self.data_format!r}")
        self.taps = taps

    def _taps_compute_it(self):
        return (self.depth_multiplier == 1 and tuple(self.dilation_rate) == (1, 1)
                and self.data_format == "channels_last")

    def _uses_taps(self, inputs):
        if _AS_CONVOLUTIONS.get():
            return False
        static = all(isinstance(side, int) for side in inputs.shape[1:3])
        if self.taps is not None:
            if self.taps and not static:
                raise ValueError(f"`taps=True` needs a static map size. Received: inputs of "
                                 f"shape {tuple(inputs.shape)}")
            return self.taps
        if keras.backend.backend() == "tensorflow":
            return static and self._taps_compute_it() and self._tensorflow_refuses_strides()
        if keras.backend.backend() != "jax" or not (static and self._taps_compute_it()):
            return False
        import jax

        kernels = self.TAP_KERNELS.get(jax.default_backend())
        strip = (1 in tuple(self.kernel_size) and tuple(self.strides) == (1, 1)
                 and self.padding == "same")
        return kernels == "all" or (kernels == "strips" and strip)

    def _tensorflow_refuses_strides(self):
        """TensorFlow's own ``DepthwiseConv2dNative`` kernel (CPUs where oneDNN is off, which
        it is by default on CPUs without AVX-512, and GPUs) takes equal strides only:
        "Current implementation only supports equal length strides in the row and column
        dimensions"."""
        return keras.backend.backend() == "tensorflow" and len(set(self.strides)) > 1

    def call(self, inputs):
        if self._uses_taps(inputs):
            y = depthwise_conv_taps(inputs, self.kernel, self.bias if self.use_bias else None,
                                    self.strides, self.padding)
        elif self._tensorflow_refuses_strides():
            y = self._xla_convolution(inputs)
        else:
            return super().call(inputs)
        return y if self.activation is None else self.activation(y)

    def _xla_convolution(self, inputs):
        """The convolution (and bias) compiled by XLA, whose convolution takes any strides
        on every device, as Keras compiles the grouped convolutions TensorFlow's CPU kernels
        refuse."""
        kernel = keras.ops.cast(self.kernel, self.compute_dtype)
        y = _xla_depthwise_conv()(inputs, kernel, tuple(self.strides), self.padding,
                                  tuple(self.dilation_rate), self.data_format)
        if not self.use_bias:
            return y
        bias = keras.ops.cast(self.bias, self.compute_dtype)
        return y + (bias if self.data_format == "channels_last"
                    else keras.ops.reshape(bias, (-1, 1, 1)))

    def get_config(self):
        return {**super().get_config(), "taps": self.taps}


@functools.cache
def _xla_depthwise_conv():
    """``keras.ops.depthwise_conv`` as one XLA-compiled ``tf.function`` (TensorFlow only);
    the strides, padding, dilation and data format are its static arguments."""
    import tensorflow as tf

    @tf.function(jit_compile=True, reduce_retracing=True)
    def convolve(inputs, kernel, strides, padding, dilation_rate, data_format):
        return keras.ops.depthwise_conv(inputs, kernel, strides, padding, data_format,
                                        dilation_rate)

    return convolve
