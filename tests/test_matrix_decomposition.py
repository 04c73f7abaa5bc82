import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import numpy_reference as ref
from kctx.ops import decompose, initial_bases, matrix_decomposition

B, N, D_CH, R = 2, 12, 6, 3


def _inputs(nonnegative=True, seed=0, dtype="float64"):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(B, N, D_CH)) if nonnegative else rng.standard_normal((B, N, D_CH))
    # Largest magnitude exactly 1, so kctx's relative eps equals the paper's absolute eps.
    x = x / np.abs(x).max(axis=(1, 2), keepdims=True)
    bases = rng.uniform(size=(B, D_CH, R)) + 0.1
    bases = bases / np.linalg.norm(bases, axis=1, keepdims=True)
    if not nonnegative:
        bases = rng.standard_normal((B, D_CH, R))
    return x.astype(dtype), bases.astype(dtype)


def _reference(method, x, bases, steps, temperature=1.0, beta=0.1):
    out = []
    for b in range(x.shape[0]):
        X, D = x[b].T.astype("float64"), bases[b].astype("float64")
        if method == "nmf":
            recon = ref.nmf(X, D, steps, temperature=temperature)[0]
        elif method == "vq":
            recon = ref.vq(X, D, steps, temperature)[0]
        else:
            recon = ref.cd(X, D, steps, temperature, beta)[0]
        out.append(recon.T)
    return np.stack(out)


CASES = [("nmf", True, 1.0), ("vq", False, 0.5), ("cd", False, 0.5)]


@pytest.mark.parametrize("method,nonnegative,temperature", CASES)
@pytest.mark.parametrize("steps", [1, 6])
def test_forward_matches_numpy_reference(method, nonnegative, temperature, steps):
    x, bases = _inputs(nonnegative)
    expected = _reference(method, x, bases, steps, temperature)
    got = matrix_decomposition(x, bases, method=method, steps=steps, temperature=temperature)
    np.testing.assert_allclose(ops.convert_to_numpy(got), expected, rtol=1e-6, atol=1e-7)
    # float32 follows the same equations.
    got32 = matrix_decomposition(
        x.astype("float32"), bases.astype("float32"), method=method, steps=steps,
        temperature=temperature,
    )
    np.testing.assert_allclose(ops.convert_to_numpy(got32), expected, rtol=2e-3, atol=2e-4)


def test_decompose_returns_factors_of_the_reconstruction():
    x, bases = _inputs()
    d, c = decompose(x, bases, method="nmf", steps=3)
    assert tuple(d.shape) == (B, D_CH, R) and tuple(c.shape) == (B, N, R)
    recon = matrix_decomposition(x, bases, method="nmf", steps=3)
    np.testing.assert_allclose(
        np.einsum("bnr,bdr->bnd", ops.convert_to_numpy(c), ops.convert_to_numpy(d)),
        ops.convert_to_numpy(recon),
        rtol=1e-10,
    )


def _tf_gradient(method, x, bases, weights, one_step_gradient, temperature, steps=4):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        recon = matrix_decomposition(
            x, tf.constant(bases), method=method, steps=steps, temperature=temperature,
            one_step_gradient=one_step_gradient,
        )
        loss = tf.reduce_sum(recon * weights)
    return tape.gradient(loss, x).numpy()


def _last_update_function(method, X0, D0, steps, temperature, beta=0.1, eps=1e-6):
    """f(X) of the final code update with D_K (and C_K) fixed at their values at X0."""
    if method == "nmf":
        _, DK, CK = ref.nmf(X0, D0, steps, eps=eps, temperature=temperature)
        return lambda X: DK @ ref.nmf_codes_update(X, DK, CK, eps)
    if method == "vq":
        _, DK = ref.vq(X0, D0, steps, temperature)
        return lambda X: DK @ ref.softmax_columns(ref.cosine(DK, X) / temperature)
    _, DK = ref.cd(X0, D0, steps, temperature, beta)
    r = DK.shape[1]
    return lambda X: DK @ np.linalg.solve(DK.T @ DK + beta * np.eye(r), DK.T @ X)


@pytest.mark.parametrize("method,nonnegative,temperature", CASES)
def test_one_step_gradient_is_gradient_of_last_code_update(method, nonnegative, temperature):
    x, bases = _inputs(nonnegative, seed=3)
    weights = np.random.default_rng(4).standard_normal((B, N, D_CH))
    steps = 4
    got = _tf_gradient(method, x, bases, weights, True, temperature, steps)
    for b in range(B):
        X0, D0, W = x[b].T, bases[b], weights[b].T
        last = _last_update_function(method, X0, D0, steps, temperature)
        expected = ref.numerical_gradient(lambda X: np.sum(W * last(X)), X0)
        np.testing.assert_allclose(got[b].T, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method,nonnegative,temperature", CASES)
def test_bptt_gradient_is_full_derivative_and_differs(method, nonnegative, temperature):
    x, bases = _inputs(nonnegative, seed=5)
    weights = np.random.default_rng(6).standard_normal((B, N, D_CH))
    steps = 3
    bptt = _tf_gradient(method, x, bases, weights, False, temperature, steps)
    one_step = _tf_gradient(method, x, bases, weights, True, temperature, steps)
    for b in range(B):
        X0, D0, W = x[b].T, bases[b], weights[b].T

        def full(X, D0=D0, W=W):
            return np.sum(W * _reference(method, X.T[None], D0[None], steps, temperature)[0].T)

        expected = ref.numerical_gradient(full, X0)
        np.testing.assert_allclose(bptt[b].T, expected, rtol=1e-4, atol=1e-5)
    assert not np.allclose(bptt, one_step, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("one_step_gradient", [True, False])
def test_absolute_eps_is_the_official_update(one_step_gradient):
    """relative_eps=False: C ← C ⊙ xD / (C DᵀD + eps) on x itself (official code), not on
    x / max|x|; a large eps and inputs of magnitude 5 make the two differ."""
    x, bases = _inputs(seed=8)
    x = 5.0 * x
    eps, steps = 0.05, 3
    got = matrix_decomposition(x, bases, steps=steps, eps=eps, relative_eps=False,
                               one_step_gradient=one_step_gradient)
    expected = np.stack([ref.nmf(x[b].T, bases[b], steps, eps=eps)[0].T for b in range(B)])
    np.testing.assert_allclose(ops.convert_to_numpy(got), expected, rtol=1e-6, atol=1e-7)
    relative = matrix_decomposition(x, bases, steps=steps, eps=eps)
    assert not np.allclose(ops.convert_to_numpy(relative), expected, rtol=1e-3)
    # Its BPTT gradient is the full derivative of the same function.
    weights = np.random.default_rng(9).standard_normal((B, N, D_CH))
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        loss = tf.reduce_sum(weights * matrix_decomposition(
            xt, tf.constant(bases), steps=steps, eps=eps, relative_eps=False,
            one_step_gradient=False))
    got_grad = tape.gradient(loss, xt).numpy()
    for b in range(B):
        def full(X, b=b):
            return np.sum(weights[b].T * ref.nmf(X, bases[b], steps, eps=eps)[0])

        np.testing.assert_allclose(got_grad[b].T, ref.numerical_gradient(full, x[b].T),
                                   rtol=1e-4, atol=1e-5)


def test_nmf_reconstruction_error_decreases_with_steps():
    rng = np.random.default_rng(7)
    # A noisy rank-4 non-negative matrix.
    x = rng.uniform(size=(1, 200, 4)) @ rng.uniform(size=(1, 4, 32)) + 0.05 * rng.uniform(
        size=(1, 200, 32)
    )
    bases = initial_bases("nmf", (1, 32, 4), seed=0).numpy().astype("float64")
    errors = [
        np.linalg.norm(x - ops.convert_to_numpy(matrix_decomposition(x, bases, steps=k)))
        for k in range(1, 11)
    ]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(errors, errors[1:])), errors
    # Multiplicative updates converge slowly but do reach the rank-4 signal.
    converged = np.linalg.norm(x - ops.convert_to_numpy(matrix_decomposition(x, bases, steps=500)))
    assert converged < 0.2 * errors[0], (converged, errors[0])


@pytest.mark.parametrize("method", ["nmf", "vq", "cd"])
@pytest.mark.parametrize("magnitude", [0.0, 1e-30, 1e30])
def test_finite_for_zero_and_extreme_inputs(method, magnitude):
    x, bases = _inputs(nonnegative=method == "nmf", seed=8, dtype="float32")
    x = tf.constant(x * magnitude)
    with tf.GradientTape() as tape:
        tape.watch(x)
        recon = matrix_decomposition(x, tf.constant(bases), method=method, steps=6)
        loss = tf.reduce_sum(recon / max(magnitude, 1.0))
    grad = tape.gradient(loss, x)
    assert np.all(np.isfinite(recon.numpy())), recon
    assert np.all(np.isfinite(grad.numpy())), grad
    if magnitude == 0:
        np.testing.assert_array_equal(recon.numpy(), 0.0)


@pytest.mark.parametrize("method", ["vq", "cd"])
def test_cosine_hams_are_scale_equivariant(method):
    x, bases = _inputs(nonnegative=False, seed=9)
    base = ops.convert_to_numpy(matrix_decomposition(x, bases, method=method))
    for scale in (1e-20, 1e20):
        scaled = ops.convert_to_numpy(matrix_decomposition(x * scale, bases, method=method))
        np.testing.assert_allclose(scaled / scale, base, rtol=1e-6, atol=1e-9)


def test_initial_bases():
    nmf = initial_bases("nmf", (2, 16, 4), seed=1).numpy()
    assert nmf.min() >= 0
    np.testing.assert_allclose(np.linalg.norm(nmf, axis=1), 1.0, rtol=1e-6)
    vq = initial_bases("vq", (16, 4), seed=1).numpy()
    assert vq.min() < 0
    # Integer seeds give one fixed draw, the same inside an XLA function.
    np.testing.assert_array_equal(initial_bases("cd", (16, 4), seed=5).numpy(),
                                  tf.function(lambda: initial_bases("cd", (16, 4), seed=5),
                                              jit_compile=True)().numpy())


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(method="svd"), "method='svd'"),
        (dict(steps=0), "steps=0"),
        (dict(steps=1.5), "steps=1.5"),
        (dict(temperature=0.0), "temperature=0.0"),
        (dict(beta=-1.0), "beta=-1.0"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    x, bases = _inputs()
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(".", r"\.")):
        matrix_decomposition(x, bases, **kwargs)


def test_bad_shapes_are_named():
    x, bases = _inputs()
    with pytest.raises(ValueError, match="x.shape"):
        matrix_decomposition(x[0], bases)
    with pytest.raises(ValueError, match="bases.shape"):
        matrix_decomposition(x, bases[..., :2, :])


@pytest.mark.parametrize("rank,dim,beta", [(4, 16, 0.1), (64, 512, 0.1), (64, 32, 0.1),
                                           (16, 16, 0.01), (8, 4, 1.0)])
def test_cd_ridge_inverse_is_the_inverse(rank, dim, beta):
    """Newton–Schulz (only matrix products, so CD exports) gives (DᵀD + βI)⁻¹ for unit
    columns to float32 precision: relative error within 1e-6·cond of float64's."""
    import sys

    inverse = sys.modules["kctx.ops.matrix_decomposition"]._ridge_gram_inverse
    rng = np.random.default_rng(rank + dim)
    bases = rng.standard_normal((3, dim, rank))
    bases[1] = bases[1, :, :1] + 0.05 * bases[1]  # nearly coinciding concepts: ill-conditioned
    bases /= np.linalg.norm(bases, axis=1, keepdims=True)
    gram = np.einsum("bdr,bdk->brk", bases, bases) + beta * np.eye(rank)
    expected = np.linalg.inv(gram)
    got = ops.convert_to_numpy(inverse(ops.convert_to_tensor(gram, "float32"), beta))
    for b in range(3):
        error = np.abs(got[b] - expected[b]).max() / np.abs(expected[b]).max()
        assert error <= 1e-6 * np.linalg.cond(gram[b]) + 1e-6, b


def test_cd_with_zero_ridge_stays_finite_where_the_gram_matrix_is_singular():
    rng = np.random.default_rng(0)
    x = np.abs(rng.standard_normal((2, 6, 4))).astype("float32")  # d = 4 < r = 8
    bases = np.abs(rng.standard_normal((2, 4, 8))).astype("float32")
    out = matrix_decomposition(x, bases, method="cd", steps=3, beta=0.0)
    assert np.isfinite(ops.convert_to_numpy(out)).all()
