"""Chord sparse factors, non-parametric SF against TSVD, and the PSF-Attn layer."""

import keras
import numpy as np
import pytest

import numpy_reference as ref
from kctx import sf
from kctx.layers import PSFAttention, context_block, context_block_names
from kctx.ops import (chord_dense, chord_indices, chord_matmul, chord_num_factors,
                      chord_product_matmul, chord_width)
from kctx.testing import run_layer_test

_RNG = np.random.default_rng(0)
LENGTHS = list(range(2, 70)) + [97, 100, 127, 128, 129, 251, 256, 257, 1000, 1021, 1024]


@pytest.mark.parametrize("n", LENGTHS)
def test_product_of_chord_factors_is_full(n):
    indices = chord_indices(n)
    mask = ref.chord_mask(n)
    assert indices.shape == (n, chord_width(n))
    dense_pattern = np.zeros((n, n), bool)
    dense_pattern[np.arange(n)[:, None], indices] = True
    np.testing.assert_array_equal(dense_pattern, mask)
    # Structural product: the non-zero pattern of products of M factors with positive entries.
    pattern = mask.astype(np.float64)
    reach = np.eye(n)
    for step in range(chord_num_factors(n)):
        if step == chord_num_factors(n) - 1 and step > 0:
            assert not (reach > 0).all()  # M − 1 factors are not enough: M is the fewest
        reach = np.minimum(reach @ pattern, 1.0)
    assert (reach > 0).all(), f"n={n}: {np.argwhere(reach == 0)[:3]}"
    assert chord_num_factors(n) <= int(np.ceil(np.log2(n)))


def test_chord_matmul_equals_the_dense_factor():
    for n in (2, 5, 16, 37):
        values = _RNG.standard_normal((3, n, chord_width(n))).astype("float32")
        v = _RNG.standard_normal((3, n, 4)).astype("float32")
        dense = keras.ops.convert_to_numpy(chord_dense(values))
        mask = ref.chord_mask(n)
        assert (dense[:, ~mask] == 0).all()
        for b in range(3):  # each row's values land at its chord columns, in offset order
            for i in range(n):
                np.testing.assert_array_equal(dense[b, i, chord_indices(n)[i]], values[b, i])
        np.testing.assert_allclose(keras.ops.convert_to_numpy(chord_matmul(values, v)),
                                   dense @ v, rtol=1e-5, atol=1e-5)
    factors = [_RNG.standard_normal((1, 16, 5)) for _ in range(3)]
    expected = (keras.ops.convert_to_numpy(chord_dense(factors[0]))[0]
                @ keras.ops.convert_to_numpy(chord_dense(factors[1]))[0]
                @ keras.ops.convert_to_numpy(chord_dense(factors[2]))[0])
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(chord_product_matmul(factors, np.eye(16)[None]))[0],
        expected, rtol=1e-10)
    with pytest.raises(ValueError, match=r"L = 5 entries per row for n = 16.*\(1, 16, 4\)"):
        chord_matmul(np.zeros((1, 16, 4)), np.zeros((1, 16, 2)))
    with pytest.raises(ValueError, match="`n` must be at least 2. Received: n=1"):
        chord_indices(1)


def test_sf_fits_a_chord_product_and_beats_tsvd_where_the_paper_says():
    n = 32
    truth = [_RNG.uniform(-1, 1, (n, chord_width(n))) for _ in range(chord_num_factors(n))]
    x = sf.product(np.stack(truth))
    fitted = sf.fit(x, steps=2000, seed=1)
    assert fitted.factors.shape == (chord_num_factors(n), n, chord_width(n))
    assert fitted.relative_error < 0.05  # non-convex: close, not exact, from the paper's start
    assert fitted.losses[-1] < fitted.losses[0]
    np.testing.assert_allclose(sf.product(fitted.factors), fitted.approximation)
    # TSVD gets no fewer non-zeros; on a cyclic shift (sparse, full rank: a product of chord
    # factors) and on a sparse random matrix SF wins, as in the paper's "network" rows.
    rank = sf.matched_rank(n)
    assert 2 * n * rank + rank >= sf.sf_nonzeros(n) > 2 * n * (rank - 1) + rank - 1
    shift = np.roll(np.eye(n), 13, axis=1)
    assert sf.tsvd(shift)[1] == pytest.approx(np.sqrt(n - rank))
    # (300 and 500 L-BFGS steps: 0.54 and 0.48 of TSVD's error here; 1,000: 0.54, 0.43.)
    assert sf.fit(shift, steps=300).error < 0.6 * sf.tsvd(shift)[1]
    sparse = (np.random.default_rng(0).random((48, 48)) < 0.05).astype(float)
    assert sf.fit(sparse, steps=500).error < 0.6 * sf.tsvd(sparse)[1]
    # A rank-2 checkerboard: TSVD is exact, SF is not (the paper's "chess" case).
    board = np.kron((np.indices((4, 4)).sum(0) % 2), np.ones((8, 8)))
    assert sf.tsvd(board)[1] < 1e-10 < sf.fit(board, steps=200).error


def test_tsvd_is_the_svd_truncation():
    x = _RNG.standard_normal((20, 20))
    approximation, error = sf.tsvd(x, rank=3)
    singular = np.linalg.svd(x, compute_uv=False)
    assert np.linalg.matrix_rank(approximation) == 3
    assert error == pytest.approx(np.sqrt((singular[3:] ** 2).sum()))


def test_adam_fit_decreases_the_error():
    x = _RNG.standard_normal((16, 16))
    result = sf.fit(x, steps=300, optimizer="adam", learning_rate=0.02)
    assert result.losses[-1] < 0.5 * result.losses[0]
    with pytest.raises(ValueError, match="`optimizer` must be 'lbfgs' or 'adam'"):
        sf.fit(x, optimizer="sgd")
    with pytest.raises(ValueError, match=r"square, at least 2×2. Received: shape \(3, 4\)"):
        sf.fit(np.zeros((3, 4)))


@pytest.mark.parametrize("kwargs", [{}, dict(num_factors=2, value_units=6, residual="output")],
                         ids=["default", "two-factors"])
def test_psf_layer_standards(kwargs):
    run_layer_test(PSFAttention, dict(hidden_units=8, **kwargs), (2, 13, 4),
                   expected_output_shape=(2, 13, kwargs.get("value_units", 4)),
                   variable_spatial_dims=False)


@pytest.mark.parametrize("residual", ["factor", "output", None])
def test_psf_output_is_the_attention_matrix_times_the_values(residual):
    layer = PSFAttention(hidden_units=8, residual=residual)
    x = _RNG.standard_normal((2, 19, 5)).astype("float32")
    out = keras.ops.convert_to_numpy(layer(x))
    attention = keras.ops.convert_to_numpy(layer.attention_matrix(x))
    assert attention.shape == (2, 19, 19) and layer.factor_count == chord_num_factors(19)
    assert (np.abs(attention) > 0).all()  # full: every position reaches every other
    value = keras.ops.convert_to_numpy(layer._apply(layer.value_mlp, x))
    # The factors in NumPy, W⁽¹⁾ applied first: A = W⁽ᴹ⁾ ⋯ W⁽¹⁾.
    dense = [keras.ops.convert_to_numpy(chord_dense(v)) for v in layer.factor_values(x)]
    product, expected = np.eye(19), value
    for factor in dense:
        product = factor @ product
        expected = factor @ expected + (value if residual == "factor" else 0.0)
    expected = expected + (value if residual == "output" else 0.0)
    np.testing.assert_allclose(attention, product, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    # The whole linear map V → output: I + Σⱼ W⁽ᴹ⁾⋯W⁽ʲ⁾ for "factor", A + I for "output".
    mapping = keras.ops.convert_to_numpy(layer.attention_matrix(x, include_residual=True))
    np.testing.assert_allclose(out, mapping @ value, rtol=1e-4, atol=1e-4)
    if residual == "factor":
        partial_sums, suffix = np.eye(19), np.eye(19)
        for factor in reversed(dense):
            suffix = suffix @ factor
            partial_sums = partial_sums + suffix
        np.testing.assert_allclose(mapping, partial_sums, rtol=1e-4, atol=1e-4)


def test_psf_is_a_sequence_block():
    assert "psf" in context_block_names("sequence") and "psf" not in context_block_names()
    assert isinstance(context_block("psf", hidden_units=4), PSFAttention)
    with pytest.raises(ValueError, match=r"\(batch, n, channels\) with n and channels known"):
        PSFAttention()(keras.Input((None, 4)))
    with pytest.raises(ValueError, match="hidden_units=0"):
        PSFAttention(hidden_units=0)
    with pytest.raises(ValueError, match="Unknown `residual`.*Received: residual=True"):
        PSFAttention(residual=True)
