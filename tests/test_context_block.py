import keras
import numpy as np
import pytest

from kctx.layers import Hamburger, SelfAttention2D, context_block, context_block_names
from kctx.testing import run_layer_test

SHAPE = (2, 4, 4, 32)  # 32 channels: ham_nmf_light's group norm has SegNeXt's 32 groups


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
        model = keras.Model(inputs, context_block(name)(keras.layers.Conv2D(SHAPE[-1], 1)(inputs)))
        # Eagerly: each block's traced fit step is its layer test's.
        model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
        x = np.random.default_rng(0).standard_normal(SHAPE).astype("float32")
        loss = model.fit(x, x, epochs=1, verbose=0).history["loss"][0]
        assert np.isfinite(loss), name


@pytest.mark.parametrize("name", context_block_names())
def test_every_block_predicts_deterministically_with_default_arguments(name, tmp_path):
    """predict twice and after a .keras reload: equal outputs, also for the hams built
    without a seed (their inference dictionary is a saved weight)."""
    inputs = keras.Input(SHAPE[1:])
    model = keras.Model(inputs, context_block(name)(keras.layers.Conv2D(SHAPE[-1], 1)(inputs)))
    x = np.random.default_rng(0).standard_normal(SHAPE).astype("float32")
    expected = model.predict(x, verbose=0)
    np.testing.assert_array_equal(model.predict(x, verbose=0), expected)
    model.save(tmp_path / "model.keras")
    reloaded = keras.saving.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(reloaded.predict(x, verbose=0), expected, rtol=1e-6, atol=1e-6)


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match=r"name='ham_svd'.*ham_cd.*ham_nmf.*self_attention"):
        context_block("ham_svd")


def test_recipes_live_with_the_blocks():
    from kctx.layers import RECIPES, check_context_block, context_block_recipe

    assert set(RECIPES) == {"gan", "segmentation"}
    gan = context_block("ham_nmf", recipe="gan", channels=256, name="g_context")
    assert (gan.rank, gan.steps, gan.synchronized_batch_norm, gan.residual_scale_init,
            gan.seed, gan.name) == (32, 6, True, 0.0, 0, "g_context")
    sagan = context_block("self_attention", recipe="gan", channels=256)
    assert (sagan.key_dim, sagan.value_dim, sagan.pool_size, sagan.use_scale) == \
        (32, 128, (2, 2), False)
    head = context_block("ham_cd", recipe="segmentation", channels=512)
    assert (head.rank, head.steps, head.seed, head.method) == (64, 6, 0, "cd")
    # Arguments override the recipe; blocks without the recipe keep their defaults.
    assert context_block("ham_vq", recipe="segmentation", channels=8, rank=4).rank == 4
    assert context_block_recipe("poly_nl", "gan", 64) == {}
    assert isinstance(context_block("poly_nl", recipe="gan", channels=64), type(
        context_block("poly_nl")))
    with pytest.raises(ValueError, match="pass `channels`.*Received: channels=None"):
        context_block("ham_nmf", recipe="gan")
    with pytest.raises(ValueError, match="Unknown `recipe`.*Received: recipe='detr'"):
        context_block("ham_nmf", recipe="detr", channels=8)
    assert check_context_block("ham_nmf") == "ham_nmf"
    assert check_context_block("aspp", also=("aspp",)) == "aspp"
    with pytest.raises(ValueError, match=r"Unknown `head`.*Received: head='psf'"):
        check_context_block("psf", argument="head")  # a sequence block, not an image one


@pytest.mark.parametrize("channels,groups", [(16, 16), (48, 24), (100, 25)])
def test_ham_nmf_light_runs_on_any_channels(channels, groups):
    """The registry's light ham has no norm_groups (None): its group norm, on the upper
    bread's C output channels, takes the largest divisor of C not above 32."""
    layer = context_block("ham_nmf_light", rank=4, seed=0)
    assert layer.norm_groups is None
    layer.build((2, 4, 4, channels))
    assert layer.resolved_norm_groups == layer.norm.groups == groups
    config = layer.get_config()
    assert config["norm_groups"] is None
    # The layer standards on these channels (XLA, mixed precision and two replicas are the
    # light ham's own test's, test_hamburger.py, whose steps do not depend on C).
    run_layer_test(Hamburger, {key: value for key, value in config.items()
                               if key not in ("name", "trainable", "dtype")}, (2, 4, 4, channels),
                   run_xla=False, run_mixed_precision=False, run_distributed=False)


def test_ham_nmf_light_keeps_segnexts_32_groups_and_saves(tmp_path):
    layer = context_block("ham_nmf_light", rank=4, seed=0)
    layer.build((2, 2, 2, 512))
    assert layer.resolved_norm_groups == layer.norm.groups == 32
    # A .keras round trip on 48 channels: the config keeps None and resolves again.
    inputs = keras.Input((4, 4, 48))
    model = keras.Model(inputs, context_block("ham_nmf_light", rank=4, name="ham")(inputs))
    x = np.random.default_rng(0).standard_normal((2, 4, 4, 48)).astype("float32")
    expected = model.predict(x, verbose=0)
    model.save(tmp_path / "model.keras")
    reloaded = keras.saving.load_model(tmp_path / "model.keras")
    ham = reloaded.get_layer("ham")
    assert ham.norm_groups is None and ham.resolved_norm_groups == ham.norm.groups == 24
    np.testing.assert_allclose(reloaded.predict(x, verbose=0), expected, rtol=1e-6, atol=1e-6)


def test_ham_nmf_light_explicit_norm_groups():
    layer = context_block("ham_nmf_light", norm_groups=8)
    layer.build((2, 4, 4, 48))
    assert layer.norm_groups == layer.resolved_norm_groups == layer.norm.groups == 8
    with pytest.raises(ValueError, match="channels=48, norm_groups=32"):
        context_block("ham_nmf_light", norm_groups=32).build((2, 4, 4, 48))
    with pytest.raises(ValueError, match="norm_groups=0"):
        context_block("ham_nmf_light", norm_groups=0)
