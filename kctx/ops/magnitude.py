"""Per-example magnitude for scale-free evaluation of homogeneous operators."""

import keras
from keras import ops


def magnitude(x):
    """m = max|x| over every axis but the batch axis, gradient-free; 1 where x is all zero.

    An operator f that is positively homogeneous of degree k in x
    (f(c·x) = cᵏ f(x) for c > 0: the hams with k = 1, Poly-NL's Y with k = 3)
    can be evaluated as mᵏ f(x / m). Every intermediate then stays finite for
    any input magnitude, and treating m as a constant gives the exact gradient
    (the derivative of mᵏ f(x/m) with m fixed is that of f). An empty batch
    gives an empty m; NaN or inf entries give a non-finite m, so they propagate.

    Args:
        x: (B, ...).

    Returns:
        (B, 1, ..., 1): m, broadcastable against ``x``.
    """
    axes = tuple(range(1, len(x.shape)))
    if keras.backend.backend() == "torch":
        # Keras 3.15's PyTorch `max` makes `initial` a CPU tensor, which fails for inputs on
        # a GPU; PyTorch's shapes are concrete, so an empty input is handled here instead.
        if 0 in tuple(x.shape):  # nothing to reduce: m = 1, of m's shape
            return ops.ones_like(ops.sum(x, axis=axes, keepdims=True))
        largest = ops.max(ops.abs(x), axis=axes, keepdims=True)
    else:  # `initial` keeps an empty batch (of a size known only at run time) legal
        largest = ops.max(ops.abs(x), axis=axes, keepdims=True, initial=0.0)
    return ops.stop_gradient(ops.where(largest > 0, largest, ops.ones_like(largest)))


def at_least(x, floor):
    """max(x, floor) for a Python float ``floor``, applied through the tensor's own
    arithmetic. ``ops.maximum(x, floor)`` makes ``floor`` a tensor at every call, which
    on PyTorch GPUs is a host-to-device copy: it waits for the GPU's queue and cannot be
    captured in a CUDA graph.

    Example:
        >>> import numpy as np
        >>> np.asarray(at_least(np.array([0.0, 2.0], "float32"), 1.0)).tolist()
        [1.0, 2.0]
    """
    return ops.maximum(x, ops.zeros_like(x) + floor)
