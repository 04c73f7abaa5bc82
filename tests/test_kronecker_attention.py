"""KAO_KV / KAO_QKV and the regular-attention baselines against NumPy references."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from kctx.layers import Attention2D, KroneckerAttention2D, context_block
from kctx.ops import attention_2d, kronecker_attention
from kctx.profile import count_macs
from kctx.testing import run_layer_test

SHAPE = (2, 5, 7, 8)  # h ≠ w, so a swapped H̄ / L̄ cannot pass


def _x(shape=SHAPE, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


@pytest.mark.parametrize("mode", ["kv", "qkv"])
@pytest.mark.parametrize("num_heads", [1, 2])
def test_op_matches_numpy_reference(mode, num_heads):
    x = _x()
    got = keras.ops.convert_to_numpy(kronecker_attention(x, mode=mode, num_heads=num_heads))
    for b in range(SHAPE[0]):
        expected = ref.kao(x[b].astype("float64"), mode, num_heads)
        np.testing.assert_allclose(got[b], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pool", [None, (2, 2)])
def test_attention_2d_op_matches_numpy_reference(pool):
    x = _x((2, 6, 4, 8))
    got = keras.ops.convert_to_numpy(attention_2d(x, num_heads=2, pool_size=pool))
    for b in range(2):
        np.testing.assert_allclose(got[b], ref.attention_2d(x[b].astype("float64"), 2, pool),
                                   rtol=1e-4, atol=1e-5)


def test_qkv_output_is_an_outer_sum_per_channel():
    # Eq. 3: every frontal slice is μ1ᵀ + 1vᵀ, so its double differences vanish.
    y = keras.ops.convert_to_numpy(kronecker_attention(_x(), mode="qkv", num_heads=4))
    double_difference = y[:, 1:, 1:] - y[:, 1:, :-1] - y[:, :-1, 1:] + y[:, :-1, :-1]
    np.testing.assert_allclose(double_difference, 0.0, atol=1e-5)


@pytest.mark.parametrize("mode", ["kv", "qkv"])
def test_layer_with_projections_and_score_norm_matches_reference(mode):
    layer = KroneckerAttention2D(mode=mode, num_heads=2,
                                 projections=("query", "key", "value"), output_channels=6,
                                 normalize_scores=True, norm_epsilon=1e-3)
    x = _x()
    layer.build(SHAPE)
    rng = np.random.default_rng(3)
    norm = layer.score_norm
    stats = {name: rng.uniform(0.5, 1.5, 2).astype("float32") for name in
             ("gamma", "beta", "moving_mean", "moving_variance")}
    for name, value in stats.items():
        getattr(norm, name).assign(value)
    got = keras.ops.convert_to_numpy(layer(x, training=False))

    def score_fn(E, head):  # inference BN with the head's statistics
        return ((E - stats["moving_mean"][head]) / np.sqrt(stats["moving_variance"][head] + 1e-3)
                * stats["gamma"][head] + stats["beta"][head])

    W = {name: layer.kernels[name][0].numpy().astype("float64") for name in layer.kernels}
    for b in range(SHAPE[0]):
        expected = ref.kao(x[b].astype("float64"), mode, 2, W["query"], W["key"], W["value"],
                           score_fn)
        np.testing.assert_allclose(got[b], expected, rtol=1e-4, atol=1e-5)
    assert got.shape == SHAPE[:3] + (6,)


@pytest.mark.parametrize(
    "cls,kwargs",
    [
        (KroneckerAttention2D, dict(mode="kv")),
        (KroneckerAttention2D, dict(mode="qkv", projections=("query", "key", "value"),
                                    use_bias=True, output_channels=12)),
        (KroneckerAttention2D, dict(mode="qkv", normalize_scores=False,
                                    residual_scale_init=0.5)),
        (Attention2D, dict()),
        (Attention2D, dict(pool_size=2, residual_scale_init=0.0)),
    ],
    ids=["kao_kv", "kao_qkv-projected", "kao_qkv-residual", "attn", "attn_pool"],
)
def test_layer_standards(cls, kwargs):
    out_channels = kwargs.get("output_channels", 8)
    run_layer_test(cls, kwargs, (2, 6, 4, 8), expected_output_shape=(2, 6, 4, out_channels))


def test_kanet_defaults_four_heads_value_only():
    layer = KroneckerAttention2D()
    layer.build((None, 14, 14, 32))
    assert layer.num_heads == 4 and layer.projections == ("value",)
    # Only the C×C value transform and the per-head score BN (γ, β trainable).
    assert layer.count_params() == 32 * 32 + 4 * 4
    assert len(layer.trainable_weights) == 3


@pytest.mark.parametrize("name", ["kao_kv", "kao_qkv", "attention", "attention_pool"])
def test_context_blocks_start_as_identity(name):
    block = context_block(name)
    x = _x((2, 8, 8, 16))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(block(x)), x, atol=1e-6)
    assert float(block.residual_scale.numpy()) == 0.0
    assert context_block(name, residual_scale_init=None, num_heads=2)(x).shape == x.shape


def test_macs_follow_the_complexities_of_sec_3_1():
    # Per head-split attention: scores and weighted sum each cost (#queries · #keys · C).
    b, h, w, c = 8, 56, 56, 8
    n = h * w
    kv = count_macs(lambda t: kronecker_attention(t, "kv", 1), (b, h, w, c))
    qkv = count_macs(lambda t: kronecker_attention(t, "qkv", 1), (b, h, w, c))
    full = count_macs(lambda t: attention_2d(t, 1), (b, h, w, c))
    pooled = count_macs(lambda t: attention_2d(t, 1, pool_size=2), (b, h, w, c))
    assert full == 2 * b * n * n * c  # O(h⁴c)
    assert pooled == 2 * b * n * (n // 4) * c
    assert kv == 2 * b * n * (h + w) * c  # O(h³c)
    assert qkv == 2 * b * (h + w) ** 2 * c  # O(h²c)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="Unknown `mode`.*mode='kq'"):
        KroneckerAttention2D(mode="kq")
    with pytest.raises(ValueError, match="Unknown `mode`"):
        kronecker_attention(_x(), mode="q")
    with pytest.raises(ValueError, match="`num_heads` must divide the input channels.*"
                                         "num_heads=3 for 8"):
        KroneckerAttention2D(num_heads=3)(_x())
    with pytest.raises(ValueError, match="`num_heads` must divide the query/key channels"):
        kronecker_attention(_x(), num_heads=3)
    with pytest.raises(ValueError, match="rank-4"):
        KroneckerAttention2D()(np.zeros((2, 5, 8), "float32"))
    with pytest.raises(ValueError, match="rank-4.*shape=\\(2, 5, 8\\)"):
        kronecker_attention(np.zeros((2, 5, 8), "float32"))
    with pytest.raises(ValueError, match="`projections` must be distinct.*'values'"):
        KroneckerAttention2D(projections=("values",))
    with pytest.raises(ValueError, match="`output_channels` needs a linear transform"):
        KroneckerAttention2D(projections=(), output_channels=4)
    with pytest.raises(ValueError, match="`num_heads` must be a positive integer"):
        Attention2D(num_heads=0)
    with pytest.raises(ValueError, match="residual connection needs output_channels"):
        KroneckerAttention2D(output_channels=4, residual_scale_init=0.0)(_x())
    with pytest.raises(ValueError, match="`pool_size` must be a positive integer"):
        Attention2D(pool_size=(2, 0))


def test_scores_and_softmax_in_float32_under_mixed_precision():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        layer = KroneckerAttention2D(mode="kv", num_heads=2)
        x = tf.constant(_x() * 300.0)  # scores of ~1e5 overflow float16
        out = layer(x, training=True)
        assert out.dtype == "float16"
        assert np.isfinite(keras.ops.convert_to_numpy(out)).all()
    finally:
        keras.mixed_precision.set_global_policy("float32")
