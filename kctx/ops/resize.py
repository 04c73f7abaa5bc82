"""Bilinear resizing of feature maps to a size known at run time."""

import keras
from keras import ops

from kctx.ops.fid_resize import resize_bilinear_torch


# The JAX platforms on which resize_bilinear gathers and blends two taps per axis
# (PyTorch's form, kctx.ops.fid_resize.resize_bilinear_torch) instead of jax.image.resize's
# interpolation matrices, which on an H200 ran as a float32 GEMM without tensor cores (2.35
# ms) and a transpose (1.79 ms) for SegNeXt-T's 512² logits at batch 16. With the gathers,
# SegNeXt-T float32 took 20.0 instead of 22.8 ms at batch 16 and 2.66 instead of 2.88 ms at
# batch 1 on an H200 (results/gpu_h200/lease4; `python -m kctx.bench.segnext_gpu --cell t
# float32 [--matrix-resize]`, docs/performance.md).
GATHER_PLATFORMS = ("gpu",)


def _gathers(x, size):
    if keras.backend.backend() != "jax" or not GATHER_PLATFORMS:
        return False
    import jax

    return (jax.default_backend() in GATHER_PLATFORMS
            and all(isinstance(s, int) for s in tuple(size) + tuple(x.shape[1:3])))


def resize_bilinear(x, size):
    """Bilinearly resize (B, H, W, C) ``x`` to ``size`` = (H', W') without antialiasing.

    Half-pixel centres: the same sampling as PyTorch's
    ``F.interpolate(mode="bilinear", align_corners=False)`` (mmsegmentation's ``resize``)
    and TensorFlow's ``tf.image.resize(method="bilinear")``.

    ``size`` may hold tensors known only at run time (an input of unknown height and
    width): ``keras.ops.image.resize`` checks ``size[0] <= 0`` in Python, which such a
    size fails when traced without AutoGraph (``model.export``), so on TensorFlow the op
    that Keras calls is called directly.

    Args:
        x: (B, H, W, C) float tensor, channels-last.
        size: (H', W'), ints or scalar integer tensors.

    Returns:
        (B, H', W', C), the dtype of ``x``.

    Examples:
        >>> tuple(resize_bilinear(keras.ops.ones((2, 3, 5, 4)), (12, 20)).shape)
        (2, 12, 20, 4)
    """
    if keras.backend.backend() == "tensorflow" and not all(isinstance(s, int) for s in size):
        import tensorflow as tf

        resized = tf.image.resize(x, tf.stack([tf.cast(s, tf.int32) for s in size]),
                                  method="bilinear")
        return ops.cast(resized, x.dtype)
    if _gathers(x, size):
        return resize_bilinear_torch(x, size)
    return ops.image.resize(x, tuple(size), interpolation="bilinear")
