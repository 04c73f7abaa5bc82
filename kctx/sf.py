"""Non-parametric sparse factorization (SF) of a square matrix, and its TSVD baseline.

SF approximates X (N×N) by a product of M square chord-sparse factors,
X ≈ W⁽¹⁾ W⁽²⁾ ⋯ W⁽ᴹ⁾, minimising ‖X − ∏ W⁽ᵐ⁾‖²_F over the non-zeros
(Khalitov et al., Sec. 3, Eq. 1). Each factor has L = 1 + ⌈log₂ N⌉
non-zeros per row (:mod:`kctx.ops.chord`) and M = :func:`kctx.ops.chord_num_factors`
(N) factors make the product full, N·L·M = O(N log² N) non-zeros in all. TSVD
with :func:`matched_rank` uses no fewer non-zeros (2Nr + r).
"""

import dataclasses
import math

import numpy as np

from kctx.ops.chord import chord_num_factors, chord_product_matmul, chord_width

__all__ = ["fit", "matched_rank", "product", "sf_nonzeros", "SFResult", "tsvd"]


@dataclasses.dataclass
class SFResult:
    """``factors``: (M, N, L) values of W⁽¹⁾…W⁽ᴹ⁾; ``approximation``: their product (N×N);
    ``error``: ‖X − ∏W‖_F; ``relative_error``: error / ‖X‖_F; ``nonzeros``: N·L·M;
    ``losses``: the objective during the optimisation."""

    factors: np.ndarray
    approximation: np.ndarray
    error: float
    relative_error: float
    nonzeros: int
    losses: list


def sf_nonzeros(n, num_factors=None):
    """N·L·M, the stored entries of an SF of an n×n matrix."""
    return n * chord_width(n) * (num_factors or chord_num_factors(n))


def matched_rank(n, num_factors=None):
    """The TSVD rank r whose 2nr + r non-zeros are the fewest not below SF's N·L·M."""
    return max(1, math.ceil(sf_nonzeros(n, num_factors) / (2 * n + 1)))


def product(factors):
    """The dense product W⁽¹⁾ ⋯ W⁽ᴹ⁾ of chord factors ``factors`` (M, N, L), float64."""
    import tensorflow as tf

    factors = tf.convert_to_tensor(np.asarray(factors, np.float64))
    n = int(factors.shape[1])
    identity = tf.eye(n, dtype=tf.float64)[None]
    return chord_product_matmul([f[None] for f in tf.unstack(factors)], identity)[0].numpy()


def fit(matrix, num_factors=None, steps=1000, optimizer="lbfgs", learning_rate=0.01, seed=0,
        tolerance=1e-12):
    """Fit chord-sparse factors to a square ``matrix`` (Eq. 1).

    The non-zeros start uniform in [1/L, 1/L + 0.01] (the paper's
    [K⁻¹, K⁻¹ + 10⁻²] with K the non-zeros per row). The objective and its
    gradient come from TensorFlow in float64.

    Args:
        matrix: (N, N) array.
        num_factors: M (default :func:`kctx.ops.chord_num_factors` (N)).
        steps: optimiser iterations.
        optimizer: ``"lbfgs"`` (SciPy's L-BFGS-B on the TensorFlow gradient; a
            quasi-Newton method like the paper's Matlab ``fminunc``) or
            ``"adam"`` (``keras.optimizers.Adam`` with ``learning_rate``).
        seed: seed of the initial values.
        tolerance: L-BFGS stops when the relative decrease falls below it.

    Returns:
        :class:`SFResult`.
    """
    import tensorflow as tf

    x = np.asarray(matrix, np.float64)
    if x.ndim != 2 or x.shape[0] != x.shape[1] or x.shape[0] < 2:
        raise ValueError(f"`matrix` must be square, at least 2×2. Received: shape {x.shape}")
    if optimizer not in ("lbfgs", "adam"):
        raise ValueError(f"`optimizer` must be 'lbfgs' or 'adam'. Received: {optimizer!r}")
    n = x.shape[0]
    count = num_factors or chord_num_factors(n)
    width = chord_width(n)
    rng = np.random.default_rng(seed)
    start = 1.0 / width + 0.01 * rng.random((count, n, width))
    target = tf.constant(x)
    identity = tf.eye(n, dtype=tf.float64)[None]

    def objective(values):
        factors = [values[m][None] for m in range(count)]
        residual = target - chord_product_matmul(factors, identity)[0]
        return tf.reduce_sum(residual * residual)

    @tf.function
    def value_and_gradient(values):
        with tf.GradientTape() as tape:
            tape.watch(values)
            loss = objective(values)
        return loss, tape.gradient(loss, values)

    losses = []
    if optimizer == "lbfgs":
        from scipy.optimize import minimize

        def scipy_objective(flat):
            loss, gradient = value_and_gradient(tf.constant(flat.reshape(start.shape)))
            losses.append(float(loss))
            return float(loss), gradient.numpy().reshape(-1)

        solution = minimize(scipy_objective, start.reshape(-1), jac=True, method="L-BFGS-B",
                            options={"maxiter": steps, "ftol": tolerance, "gtol": 1e-10,
                                     "maxcor": 20})
        values = solution.x.reshape(start.shape)
    else:
        import keras

        variable = tf.Variable(start)
        adam = keras.optimizers.Adam(learning_rate)

        @tf.function
        def step():
            loss, gradient = value_and_gradient(tf.convert_to_tensor(variable))
            adam.apply_gradients([(gradient, variable)])
            return loss

        for _ in range(steps):
            losses.append(float(step()))
        values = variable.numpy()
    approximation = product(values)
    error = float(np.linalg.norm(x - approximation))
    norm = float(np.linalg.norm(x))
    return SFResult(values, approximation, error, error / norm if norm else float("nan"),
                    sf_nonzeros(n, count), losses)


def tsvd(matrix, rank=None):
    """The best rank-r approximation (truncated SVD) and its error ‖X − X_r‖_F.

    ``rank`` defaults to :func:`matched_rank` (N). Returns ``(approximation, error)``.
    """
    x = np.asarray(matrix, np.float64)
    rank = rank or matched_rank(x.shape[0])
    u, s, vt = np.linalg.svd(x, full_matrices=False)
    approximation = (u[:, :rank] * s[:rank]) @ vt[:rank]
    return approximation, float(np.linalg.norm(x - approximation))
