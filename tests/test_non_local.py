"""Poly-NL and the non-local family: layer standards, the papers' equations in NumPy,
linear memory, the factory names."""

import keras
import numpy as np
import pytest

import numpy_reference as ref
from kctx.layers import EfficientNonLocal2D, LatentGNN2D, NonLocal2D, PolyNL, context_block
from kctx.ops import (efficient_attention, latent_graph_propagation, magnitude, poly_nl,
                      poly_nl_direct)
from kctx.testing import run_layer_test

SHAPE = (2, 5, 6, 8)
_RNG = np.random.default_rng(0)


def _x(shape=SHAPE, scale=1.0):
    return (scale * _RNG.standard_normal(shape)).astype("float32")


@pytest.mark.parametrize("layer_cls,kwargs", [
    (PolyNL, {}),
    (PolyNL, dict(beta_initializer=keras.initializers.Ones(),
                  kernel_regularizer=keras.regularizers.L2(1e-3))),
    (NonLocal2D, {}),
    (NonLocal2D, dict(inter_channels=3, pool_size=2, use_bias=False)),
    (EfficientNonLocal2D, dict(num_heads=2)),
    (LatentGNN2D, dict(latent_dim=5, channel_stride=2)),
], ids=["poly_nl", "poly_nl-beta1", "non_local", "non_local-pooled", "efficient", "latent_gnn"])
def test_layer_standards(layer_cls, kwargs):
    run_layer_test(layer_cls, kwargs, SHAPE)


def test_poly_nl_is_evaluated_scale_free_and_multiplied_by_its_scale():
    x = _x((2, 3, 4, 6))
    w1, w2, w3 = (_RNG.standard_normal((6, 6)).astype("float32") for _ in range(3))
    y = keras.ops.convert_to_numpy(poly_nl(x, w1, w2, w3))
    # Y is homogeneous of degree 3, and `scale` multiplies it.
    np.testing.assert_allclose(keras.ops.convert_to_numpy(poly_nl(10 * x, w1, w2, w3)),
                               1000 * y, rtol=1e-5, atol=1e-5 * np.abs(1000 * y).max())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(poly_nl(x, w1, w2, w3, scale=-0.5)),
                               -0.5 * y, rtol=1e-6, atol=1e-7)
    # Where Y itself overflows float32 (|x|³ ~ 1e60), scale 0 gives 0, not 0·inf = NaN.
    zero = keras.ops.convert_to_numpy(poly_nl(x * 1e20, w1, w2, w3, scale=0.0))
    np.testing.assert_array_equal(zero, np.zeros_like(zero))
    # m = max|x| per example, 1 for an all-zero example, empty for an empty batch.
    examples = np.stack([np.zeros((3, 4)), np.full((3, 4), -5.0)]).astype("float32")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(magnitude(examples)),
                                  [[[1.0]], [[5.0]]])
    assert tuple(magnitude(np.zeros((0, 3, 4), "float32")).shape) == (0, 1, 1)


def test_poly_nl_matches_eq7_elementwise():
    x = _x((3, 4, 5, 6))
    w1, w2, w3 = (_RNG.standard_normal((6, 6)).astype("float32") for _ in range(3))
    got = keras.ops.convert_to_numpy(poly_nl(x, w1, w2, w3))
    direct = keras.ops.convert_to_numpy(poly_nl_direct(x, w1, w2, w3))
    for b in range(3):
        X = x[b].reshape(-1, 6).astype("float64")
        expected = ref.poly_nl_elementwise(X, w1, w2, w3).reshape(4, 5, 6)
        np.testing.assert_allclose(got[b], expected, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(direct[b], expected, rtol=1e-4, atol=1e-4)


def test_poly_nl_layer_is_alpha_x_plus_beta_y():
    layer = PolyNL()
    x = _x()
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(x)), x)  # α = 1, β = 0
    layer.alpha.assign(0.5)
    layer.beta.assign(-2.0)
    w1, w2, w3 = (keras.ops.convert_to_numpy(w).astype("float64") for w in layer.kernels)
    got = keras.ops.convert_to_numpy(layer(x))
    for b in range(2):
        X = x[b].reshape(-1, 8).astype("float64")
        expected = 0.5 * X - 2.0 * ref.poly_nl_elementwise(X, w1, w2, w3)
        np.testing.assert_allclose(got[b].reshape(-1, 8), expected, rtol=1e-4, atol=1e-4)


def _projection(layer, name):
    kernel, bias = getattr(layer, name)
    kernel = keras.ops.convert_to_numpy(kernel).astype("float64")
    return kernel, (0.0 if bias is None else keras.ops.convert_to_numpy(bias))


def test_non_local_matches_the_embedded_gaussian():
    layer = NonLocal2D(inter_channels=4, use_bias=False)
    x = _x()
    layer.build(SHAPE)
    layer.norm.gamma.assign(np.full(8, 1.5, "float32"))  # inference BN: 1.5·y/√(1+ε)
    got = keras.ops.convert_to_numpy(layer(x, training=False))
    w = {n: _projection(layer, n)[0] for n in ("theta", "phi", "g", "output_projection")}
    for b in range(2):
        X = x[b].reshape(-1, 8).astype("float64")
        y = ref.embedded_gaussian(X, w["theta"], w["phi"], w["g"]) @ w["output_projection"]
        expected = X + 1.5 * y / np.sqrt(1.0 + layer.norm.epsilon)
        np.testing.assert_allclose(got[b].reshape(-1, 8), expected, rtol=1e-4, atol=1e-4)


def test_non_local_starts_as_the_identity():
    x = _x()
    np.testing.assert_allclose(keras.ops.convert_to_numpy(NonLocal2D()(x, training=True)), x,
                               atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(LatentGNN2D(latent_dim=4)(x)), x)


@pytest.mark.parametrize("num_heads", [1, 2])
def test_efficient_attention_equals_the_left_to_right_product(num_heads):
    q, k, v = _x((2, 30, 6), 3.0), _x((2, 30, 6), 3.0), _x((2, 30, 4))
    got = keras.ops.convert_to_numpy(efficient_attention(q, k, v, num_heads))
    dk, dv = 6 // num_heads, 4 // num_heads
    for b in range(2):
        heads = [ref.efficient_attention(q[b, :, h * dk:(h + 1) * dk].astype("float64"),
                                         k[b, :, h * dk:(h + 1) * dk].astype("float64"),
                                         v[b, :, h * dv:(h + 1) * dv].astype("float64"))
                 for h in range(num_heads)]
        np.testing.assert_allclose(got[b], np.concatenate(heads, axis=1), rtol=1e-4, atol=1e-5)


def test_efficient_non_local_layer_matches_the_reference():
    layer = EfficientNonLocal2D(key_dim=4, value_dim=6)
    x = _x()
    got = keras.ops.convert_to_numpy(layer(x))
    p = {n: _projection(layer, n) for n in ("query", "key", "value", "output_projection")}
    for b in range(2):
        X = x[b].reshape(-1, 8).astype("float64")
        Q, K, V = ((X @ p[n][0] + p[n][1]) for n in ("query", "key", "value"))
        w_o, b_o = p["output_projection"]
        expected = X + ref.efficient_attention(Q, K, V) @ w_o + b_o
        np.testing.assert_allclose(got[b].reshape(-1, 8), expected, rtol=1e-4, atol=1e-4)


def test_latent_graph_propagation_matches_the_three_steps():
    features = _x((2, 30, 6))
    psi1, psi2 = np.abs(_x((2, 30, 4))), np.abs(_x((2, 30, 4)))
    got = keras.ops.convert_to_numpy(latent_graph_propagation(features, psi1, psi2))
    for b in range(2):
        expected = ref.latent_gnn(features[b].astype("float64"), psi1[b].astype("float64"),
                                  psi2[b].astype("float64"))
        np.testing.assert_allclose(got[b], expected, rtol=1e-4, atol=1e-5)


def _largest_intermediate(layer, shape):
    """Elements of the largest tensor in the traced inference graph of ``layer``."""
    import tensorflow as tf

    layer(np.zeros(shape, "float32"))
    graph = tf.function(lambda x: layer(x, training=False)).get_concrete_function(
        tf.TensorSpec(shape, tf.float32)).graph
    sizes = [t.shape.num_elements() or 0 for op in graph.get_operations() for t in op.outputs]
    return max(sizes)


@pytest.mark.parametrize("name,kwargs", [
    ("poly_nl", {}), ("efficient_non_local", {}), ("latent_gnn", dict(latent_dim=16))])
def test_linear_blocks_never_hold_an_n_by_n_tensor(name, kwargs):
    shape = (1, 32, 32, 8)  # N = 1,024 positions, N·C = 8,192, N² = 1,048,576
    assert _largest_intermediate(context_block(name, **kwargs), shape) <= 1024 * 16
    assert _largest_intermediate(context_block("non_local"), shape) >= 1024 * 1024


def test_mixed_precision_statistics_are_float32():
    x = _x(scale=20.0)
    layer = PolyNL(dtype="mixed_bfloat16", beta_initializer="ones")
    reference = PolyNL(beta_initializer="ones")
    reference.build(SHAPE)
    layer.build(SHAPE)
    layer.set_weights(reference.get_weights())
    out = keras.ops.convert_to_numpy(keras.ops.cast(layer(x), "float32"))
    expected = keras.ops.convert_to_numpy(reference(x))
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, expected, rtol=0.05, atol=0.05 * np.abs(expected).max())


@pytest.mark.parametrize("layer_cls,kwargs,match", [
    (NonLocal2D, dict(inter_channels=0), "inter_channels=0"),
    (NonLocal2D, dict(pool_size=(2, 2, 2)), r"pool_size=\(2, 2, 2\)"),
    (EfficientNonLocal2D, dict(num_heads=0), "num_heads=0"),
    (EfficientNonLocal2D, dict(key_dim=-1), "key_dim=-1"),
    (LatentGNN2D, dict(latent_dim=1.5), "latent_dim=1.5"),
    (LatentGNN2D, dict(channel_stride=0), "channel_stride=0"),
    (PolyNL, dict(data_format="channels_first"), "data_format='channels_first'"),
])
def test_bad_arguments_are_named(layer_cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        layer_cls(**kwargs)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match=r"num_heads=3, key_dim=4 \(input channels 8\)"):
        EfficientNonLocal2D(num_heads=3)(_x())
    with pytest.raises(ValueError, match=r"PolyNL expects a rank-4 input.*\(2, 5, 8\)"):
        PolyNL()(_x((2, 5, 8)))
