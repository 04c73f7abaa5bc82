"""kctx.models.dilated_resnet against torchvision's ResNet-50 / -101, without PyTorch.

The fixtures (tests/fixtures/resnet, written by tools/resnet_fixtures.py) are
torchvision state dicts with random weights and torchvision's own layer4
features of them on two ImageNet-normalised 48×13 images.
"""

import functools
import pathlib

import keras
import numpy as np
import pytest

from kctx.checkpoints import torch_state_dict
from kctx.convert import CheckpointMismatchError, load_torchvision_resnet_weights
from kctx.models import (IMAGENET_MEAN, IMAGENET_STD, PaddedMaxPooling2D, dilated_resnet,
                         torchvision_normalization)

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "resnet"
# Max abs error over max |features|: 9e-7 to 1.5e-6 measured (TF 2.21 with oneDNN, x86);
# torchvision itself in float32 is 1e-6 to 1.3e-6 off its float64 features (README there).
# Other CPUs pick other oneDNN kernels, or TensorFlow's own where oneDNN is off: 1e-4 leaves
# room, and wrong padding or dilation gives 0.2 to 0.3.
TOLERANCE = 1e-4


def _checkpoint(depth):
    return FIXTURES / f"resnet{depth}_torchvision.pth"


@functools.cache
def _features():
    with np.load(FIXTURES / "resnet_features.npz") as data:
        return dict(data)


@functools.cache
def _state(depth):
    return torch_state_dict(_checkpoint(depth))


@functools.cache
def _pretrained(depth, output_stride):
    return dilated_resnet(depth, output_stride, weights=_checkpoint(depth))


def _relative_error(got, expected):
    return float(np.abs(np.asarray(got) - expected).max() / np.abs(expected).max())


@pytest.mark.tf_kernels
@pytest.mark.parametrize("output_stride", (8, 16))
@pytest.mark.parametrize("depth", (50, 101))
def test_features_equal_torchvision_dilated_resnet(depth, output_stride):
    model = _pretrained(depth, output_stride)
    fixtures = _features()
    expected = fixtures[f"resnet{depth}_os{output_stride}"]
    got = model.predict(fixtures["input"], verbose=0)
    assert got.shape == expected.shape == (2, -(-48 // output_stride), -(-13 // output_stride),
                                           2048)
    assert _relative_error(got, expected) <= TOLERANCE


def test_every_checkpoint_tensor_is_loaded_or_skipped_by_name():
    model = dilated_resnet(50, 16, input_shape=(32, 32, 3))
    state = _state(50)
    report = load_torchvision_resnet_weights(model, _checkpoint(50))
    counters = [key for key in state if key.endswith(".num_batches_tracked")]
    assert report["skipped"] == sorted(["fc.weight", "fc.bias"] + counters)
    assert report["loaded"] + len(report["skipped"]) == len(state)
    assert report["loaded"] == len(model.weights) == 265
    np.testing.assert_array_equal(model.get_layer("stem_conv").kernel,
                                  state["conv1.weight"].transpose(2, 3, 1, 0))
    np.testing.assert_array_equal(model.get_layer("res4_block5_2_conv").kernel,
                                  state["layer3.5.conv2.weight"].transpose(2, 3, 1, 0))
    shortcut = model.get_layer("res2_block0_shortcut_norm")
    for variable, key in ((shortcut.gamma, "weight"), (shortcut.beta, "bias"),
                          (shortcut.moving_mean, "running_mean"),
                          (shortcut.moving_variance, "running_var")):
        np.testing.assert_array_equal(variable, state[f"layer1.0.downsample.1.{key}"])


@functools.cache
def _target():
    return dilated_resnet(50, 16, input_shape=(32, 32, 3))


def _fails_naming(state, *names):
    model = _target()
    before = model.get_layer("stem_conv").kernel.numpy().copy()
    with pytest.raises(CheckpointMismatchError) as error:
        load_torchvision_resnet_weights(model, state)
    for name in names:
        assert name in str(error.value)
    # Nothing is assigned when the checkpoint does not match.
    np.testing.assert_array_equal(model.get_layer("stem_conv").kernel, before)
    return str(error.value)


def test_an_unused_checkpoint_tensor_fails_naming_it():
    state = dict(_state(50), **{"layer2.1.conv4.weight": np.zeros((128, 128, 1, 1), "float32"),
                                "aux_head.bias": np.zeros(3, "float32")})
    message = _fails_naming(state, "layer2.1.conv4.weight", "aux_head.bias")
    assert "2 checkpoint tensors have no Keras weight" in message


def test_a_missing_checkpoint_tensor_fails_naming_it():
    state = dict(_state(50))
    del state["layer3.2.bn1.running_var"], state["layer1.0.downsample.0.weight"]
    message = _fails_naming(state, "layer3.2.bn1.running_var", "layer1.0.downsample.0.weight")
    assert "2 Keras weights have no checkpoint tensor" in message


def test_a_wrong_shape_fails_naming_it():
    state = dict(_state(50))
    state["layer1.0.conv1.weight"] = state["layer1.0.conv1.weight"][:32]
    state["layer4.2.bn3.weight"] = state["layer4.2.bn3.weight"][:-1]
    message = _fails_naming(state, "layer1.0.conv1.weight: checkpoint (32, 64, 1, 1) as "
                            "(1, 1, 64, 32), model (1, 1, 64, 64)",
                            "layer4.2.bn3.weight: checkpoint (2047,), model (2048,)")
    assert "2 shapes differ" in message


def test_resnet50_weights_into_a_resnet101_fail_with_the_depths():
    with pytest.raises(CheckpointMismatchError,
                       match=r"checkpoint is a ResNet-50 \(blocks per stage \(3, 4, 6, 3\)\) "
                             r"but the model 'resnet101_os16' is a ResNet-101 \(blocks per "
                             r"stage \(3, 4, 23, 3\)\)"):
        load_torchvision_resnet_weights(_pretrained(101, 16), _checkpoint(50))


def test_unknown_weights_are_refused(tmp_path):
    with pytest.raises(ValueError, match="weights"):
        dilated_resnet(14, 16, weights=str(tmp_path / "backbone.h5"), width=16)
    with pytest.raises(FileNotFoundError):
        dilated_resnet(14, 16, weights=tmp_path / "missing.pth", width=16)


def test_keras_weights_round_trip_across_output_strides(tmp_path):
    path = tmp_path / "resnet50.weights.h5"
    _pretrained(50, 16).save_weights(path)
    # Dilation changes no weight: output stride 16's weights give output stride 8's features.
    model = dilated_resnet(50, 8, weights=path)
    fixtures = _features()
    got = model.predict(fixtures["input"], verbose=0)
    assert _relative_error(got, fixtures["resnet50_os8"]) <= TOLERANCE


def test_model_saves_and_reloads(tmp_path):
    keras.utils.set_random_seed(0)
    model = dilated_resnet(14, 8, width=16, name="tiny")
    x = np.random.default_rng(0).standard_normal((2, 37, 30, 3)).astype("float32")
    model.compile("sgd", "mse")
    model.fit(x, np.zeros((2, 5, 4, 512), "float32"), epochs=1, verbose=0)  # moving stats
    path = tmp_path / "tiny.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert isinstance(reloaded.get_layer("stem_pool"), PaddedMaxPooling2D)
    assert reloaded.get_layer("stem_pool").get_config()["padding"] == 1
    np.testing.assert_allclose(reloaded(x, training=False), model(x, training=False),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("size", [(7, 6), (8, 9), (1, 2)])
def test_padded_max_pooling_is_torch_max_pool_with_minus_infinity_padding(size):
    x = np.random.default_rng(sum(size)).standard_normal((2, *size, 3)).astype("float32") - 3.0
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-np.inf)
    rows, cols = (size[0] - 1) // 2 + 1, (size[1] - 1) // 2 + 1
    expected = np.array([[padded[:, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(1, 2))
                          for j in range(cols)] for i in range(rows)]).transpose(2, 0, 1, 3)
    layer = PaddedMaxPooling2D(3, 2, 1)
    np.testing.assert_array_equal(layer(x), expected)
    dynamic = keras.Model(inputs := keras.Input((None, None, 3)), layer(inputs))
    np.testing.assert_array_equal(dynamic.predict(x, verbose=0), expected)
    assert layer.compute_output_shape((2, *size, 3)) == (2, rows, cols, 3)
    with pytest.raises(ValueError, match="padding"):
        PaddedMaxPooling2D(3, 2, 2)


def test_torchvision_normalization_maps_any_range():
    x = np.random.default_rng(0).uniform(-1, 1, (2, 4, 5, 3)).astype("float32")
    expected = ((x + 1) / 2 - np.array(IMAGENET_MEAN)) / np.array(IMAGENET_STD)
    np.testing.assert_allclose(torchvision_normalization((-1, 1))(x), expected, atol=1e-5)
    np.testing.assert_allclose(torchvision_normalization((0, 255))((x + 1) * 127.5), expected,
                               atol=1e-5)
    with pytest.raises(ValueError, match="value_range"):
        torchvision_normalization((1, 1))


@pytest.mark.parametrize("output_stride,size", [(8, 8), (16, 4)])
def test_output_stride_gives_the_feature_size(output_stride, size):
    tiny = dilated_resnet(14, output_stride, input_shape=(64, 64, 3), width=16)
    assert tiny.output_shape == (None, size, size, 512)
    resnet50 = dilated_resnet(50, output_stride, input_shape=(64, 64, 3))
    assert resnet50.output_shape == (None, size, size, 2048)
    # Each dilated stage's first block keeps the previous rate (torchvision's convention).
    rates = {layer.name.split("_")[0]: layer.dilation_rate[0] for layer in resnet50.layers
             if layer.name.endswith("_2_conv")}
    assert rates == ({"res2": 1, "res3": 1, "res4": 2, "res5": 4} if output_stride == 8 else
                     {"res2": 1, "res3": 1, "res4": 1, "res5": 2})
    first = {name: resnet50.get_layer(f"{name}_block0_2_conv").dilation_rate[0]
             for name in ("res4", "res5")}
    assert first == ({"res4": 1, "res5": 2} if output_stride == 8 else {"res4": 1, "res5": 1})
    # Strided convs pad explicitly and symmetrically, as PyTorch (not "same").
    strided = [layer for layer in resnet50.layers
               if isinstance(layer, keras.layers.Conv2D) and layer.strides[0] == 2]
    assert all(layer.padding == "valid" for layer in strided)
    assert [layer.name for layer in resnet50.layers
            if isinstance(layer, keras.layers.ZeroPadding2D)] == \
        ["stem_pad", "res3_block0_2_pad"] + (["res4_block0_2_pad"] if output_stride == 16 else [])


def test_resnet50_and_101_have_keras_hub_parameter_counts():
    keras_hub = pytest.importorskip("keras_hub")
    for depth, blocks in ((50, [3, 4, 6, 3]), (101, [3, 4, 23, 3])):
        # keras-hub's ResNet (v1.5 bottlenecks), built offline from its arguments.
        reference = keras_hub.models.ResNetBackbone(
            input_conv_filters=[64], input_conv_kernel_sizes=[7],
            stackwise_num_filters=[64, 128, 256, 512], stackwise_num_blocks=blocks,
            stackwise_num_strides=[1, 2, 2, 2], block_type="bottleneck_block",
            image_shape=(None, None, 3))
        assert dilated_resnet(depth, 8).count_params() == reference.count_params()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="depth"):
        dilated_resnet(34)
    with pytest.raises(ValueError, match="output_stride"):
        dilated_resnet(50, 32)
    with pytest.raises(ValueError, match="width"):
        dilated_resnet(50, 8, width=0)
