import keras
import numpy as np
import pytest

from kctx.layers import Hamburger, SelfAttention2D, context_block, context_block_names

SHAPE = (2, 4, 4, 16)


def test_registered_names():
    assert {"ham_nmf", "ham_vq", "ham_cd", "self_attention", "none"} <= set(context_block_names())


@pytest.mark.parametrize(
    "name,cls,method",
    [("ham_nmf", Hamburger, "nmf"), ("ham_vq", Hamburger, "vq"), ("ham_cd", Hamburger, "cd"),
     ("self_attention", SelfAttention2D, None)],
)
def test_factory_builds_the_named_layer(name, cls, method):
    layer = context_block(name, name=f"block_{name}")
    assert type(layer) is cls and layer.name == f"block_{name}"
    if method:
        assert layer.method == method
    out = layer(np.random.default_rng(0).standard_normal(SHAPE).astype("float32"))
    assert tuple(out.shape) == SHAPE


def test_factory_forwards_kwargs():
    layer = context_block("ham_cd", rank=5, steps=2, latent_dim=8)
    assert (layer.rank, layer.steps, layer.latent_dim) == (5, 2, 8)


def test_none_is_identity():
    x = np.random.default_rng(0).standard_normal(SHAPE).astype("float32")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(context_block("none")(x)), x)


def test_every_block_fits_in_a_functional_model():
    for name in context_block_names():
        inputs = keras.Input(SHAPE[1:])
        model = keras.Model(inputs, context_block(name)(keras.layers.Conv2D(16, 1)(inputs)))
        model.compile(optimizer="sgd", loss="mse")
        x = np.random.default_rng(0).standard_normal(SHAPE).astype("float32")
        loss = model.fit(x, x, epochs=1, verbose=0).history["loss"][0]
        assert np.isfinite(loss), name


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match=r"name='ham_svd'.*ham_cd.*ham_nmf.*self_attention"):
        context_block("ham_svd")
