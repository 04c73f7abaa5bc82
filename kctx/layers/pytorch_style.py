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
from keras import ops

from kctx.ops.replicas import replicas_in_sync, synchronized_batch_norm

NORM_EPSILON = 1e-5  # PyTorch's BatchNorm / GroupNorm / LayerNorm default
BATCH_NORM_MOMENTUM = 0.9  # PyTorch's momentum 0.1


@keras.saving.register_keras_serializable(package="kctx")
class PyTorchBatchNormalization(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` whose moving variance follows the unbiased batch
    variance, as ``torch.nn.BatchNorm2d``'s running variance does.

    In training the batch is normalised with the biased variance σ² = mean((x − μ)²) over
    the n values of each channel (both libraries), and the moving statistics are updated
    with momentum m as

        moving_mean ← m · moving_mean + (1 − m) · μ
        moving_variance ← m · moving_variance + (1 − m) · σ² · n / (n − 1)

    (Keras' layer uses σ² itself there). n counts every replica's values under
    synchronized batch normalisation. The difference is 1 / (n − 1): 14% for a 2 × 2 map
    of a batch of 2 (SegNeXt's last stage at 64 × 64), negligible on large maps. Inference
    and every other argument are Keras' (``renorm`` and masks: Keras' own update).

    Args:
        **kwargs: ``keras.layers.BatchNormalization`` arguments.

    Call arguments:
        inputs: the tensor to normalise.
        training: normalise with the batch's statistics and update the moving ones.
        mask: as Keras' (then the update is Keras' own).

    Example:

    >>> import numpy as np
    >>> layer = PyTorchBatchNormalization(momentum=0.0)
    >>> x = np.array([[0.0], [2.0]], "float32")
    >>> y = layer(x, training=True)
    >>> float(layer.moving_variance[0])  # the unbiased variance of 0 and 2
    2.0

    Reference:
        ``torch.nn.BatchNorm2d`` (PyTorch 2.x): "the running estimate of the variance is
        calculated via the unbiased estimator".
    """

    def call(self, inputs, training=None, mask=None):
        if not (training and self.trainable) or mask is not None or self.renorm:
            return super().call(inputs, training=training, mask=mask)
        dtype = keras.backend.result_type(inputs.dtype, "float32")
        x = ops.cast(inputs, dtype)
        mean, variance = self._moments(x, None)
        channels = 1
        for axis in (self.axis if isinstance(self.axis, (list, tuple)) else [self.axis]):
            channels *= x.shape[axis]
        count = ops.cast(ops.size(x), dtype) / channels
        if self.synchronized:
            count = count * replicas_in_sync()
        unbiased = variance * count / ops.maximum(count - 1.0, 1.0)
        momentum = self.momentum
        self.moving_mean.assign(ops.cast(self.moving_mean, dtype) * momentum
                                + mean * (1.0 - momentum))
        self.moving_variance.assign(ops.cast(self.moving_variance, dtype) * momentum
                                    + unbiased * (1.0 - momentum))
        outputs = ops.batch_normalization(
            x=x, mean=mean, variance=variance, axis=self.axis,
            offset=ops.cast(self.beta, dtype) if self.center else None,
            scale=ops.cast(self.gamma, dtype) if self.scale else None, epsilon=self.epsilon)
        return ops.cast(outputs, self.compute_dtype)


def batch_norm(name, synchronized=False):
    """``torch.nn.BatchNorm2d``'s batch normalisation (channels-last), as a Keras layer.

    Args:
        name: the layer's name.
        synchronized: all-reduce the batch statistics across the replicas of a
            ``tf.distribute`` strategy (SyncBN; :func:`kctx.ops.synchronized_batch_norm`).

    Returns:
        A :class:`PyTorchBatchNormalization` with ε = 1e-5 and momentum 0.9.

    Examples:
        >>> norm = batch_norm("bn1")
        >>> norm.epsilon, norm.momentum
        (1e-05, 0.9)
    """
    return PyTorchBatchNormalization(momentum=BATCH_NORM_MOMENTUM, epsilon=NORM_EPSILON,
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


__all__ = ["BATCH_NORM_MOMENTUM", "NORM_EPSILON", "PyTorchBatchNormalization", "batch_norm",
           "padded_conv2d"]
