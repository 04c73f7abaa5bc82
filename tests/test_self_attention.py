import keras
import numpy as np
import pytest

import numpy_reference as ref
from kctx.layers import SelfAttention2D
from kctx.testing import run_layer_test

SHAPE = (2, 5, 6, 8)


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(key_dim=2, value_dim=4, pool_size=2, use_scale=False, use_bias=True)],
    ids=["full-width", "sagan"],
)
def test_layer_standards(kwargs):
    run_layer_test(SelfAttention2D, kwargs, SHAPE)


def test_full_width_has_four_projections():
    layer = SelfAttention2D()
    layer.build((1, 4, 4, 512))
    # Table 3's SA: four 512×512 projections (+ the residual scale γ).
    assert layer.count_params() == 4 * 512 * 512 + 1


@pytest.mark.parametrize("use_scale", [True, False])
def test_matches_numpy_reference(use_scale):
    layer = SelfAttention2D(key_dim=3, value_dim=5, use_scale=use_scale)
    x = np.random.default_rng(0).standard_normal(SHAPE).astype("float32")
    layer.build(SHAPE)
    layer.gamma.assign(0.7)
    got = layer(x).numpy()
    w = {name: getattr(layer, name)[0].numpy() for name in ("query", "key", "value",
                                                             "output_projection")}
    for b in range(SHAPE[0]):
        X = x[b].reshape(-1, SHAPE[-1]).astype("float64")
        expected = ref.self_attention(X, w["query"], w["key"], w["value"],
                                      w["output_projection"], 0.7, scale=use_scale)
        np.testing.assert_allclose(got[b].reshape(-1, SHAPE[-1]), expected, rtol=1e-4, atol=1e-5)


def test_pooling_attends_to_pooled_positions():
    layer = SelfAttention2D(pool_size=2)
    x = np.random.default_rng(0).standard_normal((1, 4, 4, 8)).astype("float32")
    layer.build(x.shape)
    layer.gamma.assign(1.0)
    pooled = x.reshape(1, 2, 2, 2, 2, 8).max(axis=(2, 4)).reshape(-1, 8)
    w = [getattr(layer, n)[0].numpy() for n in ("query", "key", "value", "output_projection")]
    X = x.reshape(-1, 8)
    Q, K, V = X @ w[0], pooled @ w[1], pooled @ w[2]
    S = Q @ K.T / np.sqrt(8)
    A = np.exp(S - S.max(1, keepdims=True))
    A /= A.sum(1, keepdims=True)
    np.testing.assert_allclose(layer(x).numpy().reshape(-1, 8), X + A @ V @ w[3],
                               rtol=1e-4, atol=1e-5)


def test_residual_scale_starts_at_zero():
    x = np.random.default_rng(0).standard_normal(SHAPE).astype("float32")
    np.testing.assert_array_equal(SelfAttention2D()(x).numpy(), x)


def test_mixed_precision_softmax_is_stable():
    layer = SelfAttention2D(dtype="mixed_bfloat16")
    x = 30 * np.random.default_rng(0).standard_normal(SHAPE).astype("float32")
    layer.build(SHAPE)
    layer.gamma.assign(1.0)
    out = keras.ops.convert_to_numpy(keras.ops.cast(layer(x), "float32"))
    assert np.all(np.isfinite(out))


@pytest.mark.parametrize(
    "kwargs,match",
    [(dict(key_dim=0), "key_dim=0"), (dict(value_dim=-2), "value_dim=-2"),
     (dict(pool_size=(2, 2, 2)), r"pool_size=\(2, 2, 2\)"),
     (dict(data_format="channels_first"), "data_format='channels_first'")],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SelfAttention2D(**kwargs)


def test_bad_input_rank_is_named():
    with pytest.raises(ValueError, match=r"input_shape=\(2, 8\)"):
        SelfAttention2D()(np.zeros((2, 8), "float32"))
