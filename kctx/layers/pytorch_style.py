"""Keras layers set up to compute what PyTorch's defaults compute, for ported models.

:func:`batch_norm` is ``torch.nn.BatchNorm2d``'s: ε = 1e-5 and momentum 0.1 in PyTorch's
convention (new = 0.9·old + 0.1·batch), which is Keras' momentum 0.9.
:func:`padded_conv2d` is ``torch.nn.Conv2d(padding=d·(k − 1) / 2)``: a strided
convolution pads d·(k − 1) / 2 rows and columns on every side (an explicit
``ZeroPadding2D`` and a ``"valid"`` convolution), not as TensorFlow's ``"same"``, which
pads one more at the bottom and right than at the top and left for even sizes; a
stride-1 convolution uses ``"same"``, which is symmetric there for odd kernels.

The layers keep the names the callers give: checkpoints and saved models find them by name.
"""

import keras

from kctx.ops.replicas import synchronized_batch_norm

NORM_EPSILON = 1e-5  # PyTorch's BatchNorm / GroupNorm / LayerNorm default
BATCH_NORM_MOMENTUM = 0.9  # PyTorch's momentum 0.1


def batch_norm(name, synchronized=False):
    """``torch.nn.BatchNorm2d``'s batch normalisation (channels-last), as a Keras layer.

    Args:
        name: the layer's name.
        synchronized: all-reduce the batch statistics across the replicas of a
            ``tf.distribute`` strategy (SyncBN; :func:`kctx.ops.synchronized_batch_norm`).

    Returns:
        A ``keras.layers.BatchNormalization`` with ε = 1e-5 and momentum 0.9.

    Examples:
        >>> norm = batch_norm("bn1")
        >>> norm.epsilon, norm.momentum
        (1e-05, 0.9)
    """
    return keras.layers.BatchNormalization(momentum=BATCH_NORM_MOMENTUM, epsilon=NORM_EPSILON,
                                           synchronized=synchronized_batch_norm(synchronized),
                                           name=name)


def padded_conv2d(x, filters, kernel_size, name, pad_name, strides=1, dilation_rate=1,
                  use_bias=True):
    """Apply ``torch.nn.Conv2d(filters, k, stride, padding=d·(k − 1) / 2, dilation=d)`` to ``x``.

    Args:
        x: the (B, H, W, C) symbolic input.
        filters: output channels.
        kernel_size: k, odd.
        name: the convolution's name.
        pad_name: the ``ZeroPadding2D``'s name, added only for a strided convolution
            that pads.
        strides: the stride s.
        dilation_rate: the dilation d.
        use_bias: add a bias (PyTorch's ``bias=True``).

    Returns:
        (B, ⌊(H − 1) / s⌋ + 1, ⌊(W − 1) / s⌋ + 1, filters).

    Examples:
        >>> x = keras.Input((7, 7, 3))
        >>> tuple(padded_conv2d(x, 8, 3, "proj", "proj.pad", strides=2).shape)
        (None, 4, 4, 8)
    """
    padding = dilation_rate * (kernel_size - 1) // 2
    if strides > 1 and padding:
        x = keras.layers.ZeroPadding2D(padding, name=pad_name)(x)
    return keras.layers.Conv2D(filters, kernel_size, strides=strides,
                               padding="same" if strides == 1 else "valid",
                               dilation_rate=dilation_rate, use_bias=use_bias, name=name)(x)


__all__ = ["BATCH_NORM_MOMENTUM", "NORM_EPSILON", "batch_norm", "padded_conv2d"]
