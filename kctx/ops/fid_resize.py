"""The resizes of the FID implementations, reproduced exactly (every backend).

FID depends on how images reach the 299×299 input of the Inception network, by more
than the gaps papers report (Parmar et al., 2022). The three resizes in use:

* :func:`resize_bilinear_tf1`: TensorFlow 1's ``tf.image.resize_bilinear`` with
  ``align_corners=False`` and no half-pixel centres, the resize inside the 2015-12-05
  Inception graph that TTUR, TF-GAN and torch-fidelity (which reproduces it) use. The
  source coordinate of output pixel i is s = i·(in/out) (float32), read between pixels
  ⌊s⌋ and min(⌊s⌋ + 1, in − 1):  y = x₀ + (x₁ − x₀)·(s − ⌊s⌋), columns then rows.
* :func:`resize_bilinear_torch`: PyTorch's ``F.interpolate(mode="bilinear",
  align_corners=False)`` (pytorch-fid): half-pixel centres, s = max((i + ½)·(in/out) − ½, 0),
  y = (1 − λ)·x₀ + λ·x₁ with λ = s − ⌊s⌋, no antialiasing.
* :func:`resize_bicubic_pil`: Pillow's ``Image.resize(resample=BICUBIC)`` on float
  (mode ``"F"``) images, clean-fid's "clean" resize: the cubic kernel with a = −½
  stretched by the downscaling factor (antialiasing), weights normalised to sum 1,
  columns then rows.

The sampling positions and weights are computed in NumPy exactly as the reference code
computes them (float32 for the bilinear ones, float64 for Pillow's); the images are
then gathered and blended, or multiplied by the (out, in) weight matrices, in
``keras.ops``.

Examples:
    The two bilinear conventions on one row of 4 pixels upsampled to 8:

    >>> x = np.arange(4, dtype="float32").reshape(1, 1, 4, 1)
    >>> keras.ops.convert_to_numpy(resize_bilinear_tf1(x, (1, 8)))[0, 0, :, 0].tolist()
    [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.0]
    >>> keras.ops.convert_to_numpy(resize_bilinear_torch(x, (1, 8)))[0, 0, :, 0].tolist()
    [0.0, 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3.0]
"""


import numpy as np
from keras import ops


def _check(x, size):
    if len(x.shape) != 4:
        raise ValueError(f"Expected images (batch, height, width, channels). Received: "
                         f"x.shape={tuple(x.shape)}")
    size = tuple(int(s) for s in size)
    if len(size) != 2 or min(size) < 1:
        raise ValueError(f"`size` must be two positive ints. Received: size={size}")
    return size


def _tf1_positions(in_size, out_size):
    """Lower / upper source indices and float32 fractions of TF1's resize_bilinear."""
    scale = np.float32(in_size / out_size)  # TF1: (float) in / out
    source = np.arange(out_size, dtype=np.float32) * scale
    lower = np.floor(source).astype(np.int32)
    upper = np.minimum(lower + 1, in_size - 1).astype(np.int32)
    return lower, upper, (source - lower.astype(np.float32)).astype(np.float32)


def _torch_positions(in_size, out_size):
    """PyTorch's upsample_bilinear2d source indices and weights (align_corners=False)."""
    scale = np.float32(in_size / out_size)
    source = (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    source = np.maximum(source, np.float32(0.0))
    lower = source.astype(np.int32)  # truncation = floor for s >= 0
    upper = np.where(lower < in_size - 1, lower + 1, lower).astype(np.int32)
    fraction = (source - lower.astype(np.float32)).astype(np.float32)
    return lower, upper, fraction


def _blend_axis(x, axis, lower, upper, fraction, form):
    shape = [1, 1, 1, 1]
    shape[axis] = -1
    weight = ops.reshape(ops.convert_to_tensor(fraction, x.dtype), shape)
    low = ops.take(x, ops.convert_to_tensor(lower), axis=axis)
    high = ops.take(x, ops.convert_to_tensor(upper), axis=axis)
    if form == "lerp":
        return low + (high - low) * weight
    return low * (1.0 - weight) + high * weight


def _resize_separable(x, size, positions, form):
    size = _check(x, size)
    x = ops.convert_to_tensor(x)
    x = _blend_axis(x, 2, *positions(x.shape[2], size[1]), form)  # columns, then rows
    return _blend_axis(x, 1, *positions(x.shape[1], size[0]), form)


# The Args and Returns of every resize here (one contract: images in, images out).
_RESIZE_ARGS = """Args:
        x: (B, H, W, C) float images.
        size: (H', W') output size.

    Returns:
        (B, H', W', C) in the dtype of ``x``."""


def _with_resize_args(resize):
    """``resize`` with :data:`_RESIZE_ARGS` in its docstring, in place of ``{resize_args}``.

    Args:
        resize: a resize function of this module.

    Returns:
        ``resize`` itself.
    """
    if resize.__doc__ is not None:  # None under ``python -OO``
        resize.__doc__ = resize.__doc__.replace("{resize_args}", _RESIZE_ARGS)
    return resize


@_with_resize_args
def resize_bilinear_tf1(x, size):
    """TensorFlow 1's ``resize_bilinear(align_corners=False)`` (the FID graph's resize).

    {resize_args}
    """
    return _resize_separable(x, size, _tf1_positions, "lerp")


@_with_resize_args
def resize_bilinear_torch(x, size):
    """PyTorch's ``F.interpolate(mode="bilinear", align_corners=False)`` (pytorch-fid).

    {resize_args}
    """
    return _resize_separable(x, size, _torch_positions, "weights")


def _pil_bicubic(t):
    a = -0.5
    t = abs(t)
    if t < 1.0:
        return ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0
    if t < 2.0:
        return (((t - 5.0) * t + 8.0) * t - 4.0) * a
    return 0.0


def pil_bicubic_matrix(in_size, out_size):
    """The (out, in) float64 weights of Pillow's bicubic resize along one axis
    (``precompute_coeffs`` in Pillow's ``Resample.c``: support 2 stretched by the
    downscaling factor, windows rounded as Pillow rounds them, normalised rows)."""
    scale = in_size / out_size
    filter_scale = max(scale, 1.0)
    support = 2.0 * filter_scale
    matrix = np.zeros((out_size, in_size), np.float64)
    for i in range(out_size):
        center = (i + 0.5) * scale
        first = max(int(center - support + 0.5), 0)
        last = min(int(center + support + 0.5), in_size)
        weights = np.array([_pil_bicubic((j - center + 0.5) / filter_scale)
                            for j in range(first, last)])
        total = weights.sum()
        matrix[i, first:last] = weights / total if total != 0.0 else weights
    return matrix


@_with_resize_args
def resize_bicubic_pil(x, size):
    """Pillow's antialiased bicubic resize of float images (clean-fid's "clean" resize).

    Columns first, then rows, as Pillow resamples; no clipping (clean-fid clips the
    result to [0, 255] afterwards).

    {resize_args}

    Examples:
        >>> x = np.full((1, 5, 7, 3), 9.0, "float32")  # a constant stays constant
        >>> bool(np.allclose(resize_bicubic_pil(x, (11, 3)), 9.0))
        True
    """
    size = _check(x, size)
    x = ops.convert_to_tensor(x)
    height, width = x.shape[1], x.shape[2]
    if width != size[1]:
        columns = ops.convert_to_tensor(pil_bicubic_matrix(width, size[1]).T, x.dtype)
        x = ops.einsum("bhwc,wv->bhvc", x, columns)
    if height != size[0]:
        rows = ops.convert_to_tensor(pil_bicubic_matrix(height, size[0]), x.dtype)
        x = ops.einsum("uh,bhwc->buwc", rows, x)
    return x


FID_RESIZES = ("tensorflow", "pytorch-fid", "clean")
"""The ``resize=`` choices of the FID Inception extractor."""


def fid_inception_input(images, size=(299, 299), resize="tensorflow"):
    """uint8-valued (B, H, W, 3) images in [0, 255] → the FID Inception's input.

    As each reference implementation prepares it:

    * ``"tensorflow"``: :func:`resize_bilinear_tf1`, then (x − 128)/128 (the 2015-12-05
      graph; TTUR, TF-GAN, torch-fidelity, clean-fid's ``legacy_tensorflow``);
    * ``"pytorch-fid"``: x/255, :func:`resize_bilinear_torch`, then 2x − 1 (pytorch-fid);
    * ``"clean"``: :func:`resize_bicubic_pil`, clipped to [0, 255], then (x − 128)/128
      (clean-fid's default mode).

    Every mode resizes, even when the images are already 299×299 (where each resize is
    the identity).

    Args:
        images: (B, H, W, 3) float tensor of integer levels 0..255.
        size: the network's input size.
        resize: one of :data:`FID_RESIZES`.

    Returns:
        (B, 299, 299, 3) float32.
    """
    x = ops.cast(images, "float32")
    if resize == "tensorflow":
        return (resize_bilinear_tf1(x, size) - 128.0) / 128.0
    if resize == "pytorch-fid":
        return 2.0 * resize_bilinear_torch(x / 255.0, size) - 1.0
    if resize == "clean":
        return (ops.clip(resize_bicubic_pil(x, size), 0.0, 255.0) - 128.0) / 128.0
    raise ValueError(f"`resize` must be one of {FID_RESIZES}. Received: resize={resize!r}")
