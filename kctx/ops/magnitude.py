"""Per-example magnitude for scale-free evaluation of homogeneous operators."""

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
    if any(size == 0 for size in x.shape[1:]):  # nothing to reduce: m = 1
        return ops.ones_like(ops.sum(x, axis=axes, keepdims=True))
    # No `initial=`: Keras' PyTorch backend (3.15) makes that tensor on the CPU, which
    # fails for inputs on a GPU.
    largest = ops.max(ops.abs(x), axis=axes, keepdims=True)
    return ops.stop_gradient(ops.where(largest > 0, largest, ops.ones_like(largest)))
