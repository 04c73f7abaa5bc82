"""insert_context_block: context blocks inside keras.applications and keras-hub backbones."""

import keras
import numpy as np
import pytest

from kctx.layers import PolyNL
from kctx.models import insert_context_block, resnet50_positions


@pytest.fixture(scope="module")
def resnet50():
    keras.utils.set_random_seed(0)
    return keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=4)


def test_resnet50_positions():
    assert resnet50_positions("res4") == ["conv4_block5_out"]
    assert resnet50_positions("res3+4+5") == resnet50_positions("res345") == [
        "conv3_block3_out", "conv4_block5_out", "conv5_block2_out"]
    with pytest.raises(ValueError, match="Unknown ResNet-50 stage.*Received: \\['res6'\\]"):
        resnet50_positions("res6")


def test_res345_poly_nl_trains_and_round_trips(resnet50, tmp_path):
    model = insert_context_block(resnet50, resnet50_positions("res3+4+5"), "poly_nl")
    blocks = [layer for layer in model.layers if isinstance(layer, PolyNL)]
    assert [b.name for b in blocks] == ["poly_nl_after_conv3_block3_out",
                                        "poly_nl_after_conv4_block5_out",
                                        "poly_nl_after_conv5_block2_out"]
    # Each block sits between its layer and that layer's consumers (the next block's convs
    # and its residual add).
    consumers = {node.operation.name for node in blocks[1]._outbound_nodes}
    assert consumers == {"conv4_block6_1_conv", "conv4_block6_add"}
    x = np.random.default_rng(0).random((4, 32, 32, 3)).astype("float32")
    # β = 0: the new model starts as the old one, and shares its weights.
    np.testing.assert_allclose(model(x, training=False), resnet50(x, training=False),
                               atol=1e-6)
    assert model.get_layer("conv1_conv") is resnet50.get_layer("conv1_conv")
    # A step run eagerly: Poly-NL's traced and XLA steps are its layer test's (traced,
    # ResNet-50's step made this test 18 CPU s; eagerly 7).
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy",
                  run_eagerly=True)
    model.fit(x, np.arange(4) % 4, epochs=1, batch_size=4, verbose=0)
    assert all(float(b.beta.numpy()) != 0.0 for b in blocks)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(loaded(x, training=False), model(x, training=False),
                               atol=1e-5)


def test_keras_hub_backbone_with_several_block_kinds(tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    backbone = keras_hub.models.ResNetBackbone(
        input_conv_filters=[16], input_conv_kernel_sizes=[3], stackwise_num_filters=[64, 32],
        stackwise_num_blocks=[2, 2], stackwise_num_strides=[1, 2],
        block_type="bottleneck_block", image_shape=(None, None, 3))
    model = insert_context_block(
        backbone, ["stack0_block0_out", "stack1_block0_out"],
        ["latent_gnn", lambda: PolyNL(name="poly")], name="hub_with_context")
    assert model.name == "hub_with_context"
    assert {"latent_gnn_after_stack0_block0_out", "poly"} <= {layer.name for layer in model.layers}
    x = np.random.default_rng(1).random((2, 24, 24, 3)).astype("float32")
    np.testing.assert_allclose(model(x), backbone(x), atol=1e-6)  # both blocks start as identity
    model.save(tmp_path / "hub.keras")
    loaded = keras.saving.load_model(tmp_path / "hub.keras")
    np.testing.assert_allclose(loaded(x), model(x), atol=1e-6)


def test_bad_positions_and_blocks_are_named(resnet50):
    with pytest.raises(ValueError, match=r"no layer named 'conv4_block5_ou' \(close: \['conv4_"):
        insert_context_block(resnet50, "conv4_block5_ou")
    with pytest.raises(ValueError, match="cannot be inserted at several positions"):
        insert_context_block(resnet50, ["conv3_block3_out", "conv4_block5_out"], PolyNL())
    with pytest.raises(ValueError, match="'avg_pool' must be one rank-4"):
        insert_context_block(resnet50, "avg_pool")
    with pytest.raises(ValueError, match="`block` lists 1 blocks for 2 positions"):
        insert_context_block(resnet50, ["conv3_block3_out", "conv4_block5_out"], ["poly_nl"])
    with pytest.raises(ValueError, match="Unknown context block: name='poly'"):
        insert_context_block(resnet50, "conv4_block5_out", "poly")
