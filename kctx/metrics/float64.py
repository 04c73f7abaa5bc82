"""Float64 sums of the streaming metrics on every backend.

The FID / FCD and the classifier score accumulate float64 sums (Σf, Σffᵀ, n;
Σ p log p, Σp, n), so that their value does not depend on how the samples are
batched. TensorFlow (and JAX with ``jax_enable_x64``) keeps them in float64
Keras variables; JAX without x64, its default, has no float64 arrays (a
float64 variable or cast silently computes in float32), so there the sums are
NumPy float64 arrays on the host, updated eagerly, and the final linear
algebra runs in NumPy float64 too. Either way the sums are float64.
"""

import keras
import numpy as np
from keras import ops


def host_float64():
    """Whether float64 sums live in NumPy on the host: on JAX without ``jax_enable_x64``."""
    if keras.backend.backend() != "jax":
        return False
    import jax

    return not jax.config.jax_enable_x64


class Float64Sums:
    """Named float64 accumulators of a metric: float64 Keras variables of ``metric``,
    or NumPy float64 arrays on the host (:func:`host_float64`).

    Args:
        metric: the ``keras.metrics.Metric`` they belong to.
        shapes: dict name → shape.
        host: keep them in NumPy (default :func:`host_float64`).

    Attributes:
        host: whether they are NumPy arrays; :meth:`cast` and :attr:`ops` then give
            NumPy float64 values and functions, else ``keras.ops`` float64 tensors.

    Examples:
        >>> metric = keras.metrics.Metric(name="mean64")
        >>> sums = Float64Sums(metric, {"total": (), "count": ()})
        >>> values = np.array([0.1, 0.2, 0.3], "float32")
        >>> sums.add("total", sums.ops.sum(sums.cast(values)))
        >>> sums.add("count", sums.cast(len(values)))
        >>> round(float(sums.value("total") / sums.value("count")), 6)
        0.2
    """

    def __init__(self, metric, shapes, host=None):
        self.host = host_float64() if host is None else host
        self.ops = np if self.host else ops
        self.values = {
            name: np.zeros(shape, np.float64) if self.host else
            metric.add_variable(shape, "zeros", dtype="float64", name=name)
            for name, shape in shapes.items()}

    def cast(self, value):
        """``value`` as float64: a NumPy array on the host, else a Keras tensor."""
        if self.host:
            return np.asarray(ops.convert_to_numpy(value), np.float64)
        return ops.cast(value, "float64")

    def eigh(self, matrix):
        """Eigenvalues and eigenvectors of a symmetric float64 matrix."""
        return np.linalg.eigh(matrix) if self.host else ops.eigh(matrix)

    def add(self, name, value):
        """Add ``value`` (from :meth:`cast` and :attr:`ops`) to the sum ``name``."""
        if self.host:
            self.values[name] += value
        else:
            self.values[name].assign_add(value)

    def value(self, name):
        return self.values[name]

    def reset(self):
        for name, value in self.values.items():
            if self.host:
                value[...] = 0.0
            else:
                value.assign(ops.zeros(value.shape, dtype=value.dtype))
