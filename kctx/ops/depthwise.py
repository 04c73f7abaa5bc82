"""Depthwise 2-D convolution as a sum of shifted taps (weight-free keras.ops math)."""

from keras import ops


def depthwise_conv_taps(x, kernel, bias=None):
    """y[b, i, j, c] = Σ_{u<kh, v<kw} x̄[b, i + u, j + v, c] · w[u, v, c] (+ bias[c]).

    The stride-1, "same"-padded depthwise convolution of ``keras.layers.DepthwiseConv2D``
    (depth multiplier 1, NHWC): x̄ is x zero-padded by (kh − 1) // 2 rows on top and the
    rest below, likewise for the columns. Written as kh·kw shifted slices times each
    tap's per-channel weight, which XLA fuses into one element-wise kernel: on GPUs its
    grouped convolutions for MSCAN's long strips (1×21, 21×1) are far from the memory
    bandwidth that this form needs (``tools/gpu_depthwise.py``).

    Args:
        x: (B, H, W, C).
        kernel: (kh, kw, C, 1), Keras' depthwise kernel layout.
        bias: optional (C,).

    Returns:
        (B, H, W, C).

    Example:
        >>> import numpy as np
        >>> x = np.arange(9, dtype="float32").reshape(1, 3, 3, 1)
        >>> np.asarray(depthwise_conv_taps(x, np.ones((1, 3, 1, 1), "float32")))[0, :, :, 0]
        array([[ 1.,  3.,  3.],
               [ 7., 12.,  9.],
               [13., 21., 15.]], dtype=float32)
    """
    kh, kw = kernel.shape[0], kernel.shape[1]
    height, width = x.shape[1], x.shape[2]
    top, left = (kh - 1) // 2, (kw - 1) // 2
    padded = ops.pad(x, ((0, 0), (top, kh - 1 - top), (left, kw - 1 - left), (0, 0)))
    y = None
    for u in range(kh):
        for v in range(kw):
            term = padded[:, u:u + height, v:v + width, :] * kernel[u, v, :, 0]
            y = term if y is None else y + term
    return y if bias is None else y + bias
