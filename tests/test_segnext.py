"""SegNeXt (MSCAN + LightHamHead) against the official PyTorch code's outputs.

The fixtures in tests/fixtures/segnext/ were written by ``tools/segnext_fixtures.py``
with mmsegmentation 1.2.2 (and the original SegNeXt repository's code for its key
layout): official-format checkpoints with random weights and norm statistics, the
official whole-image inference's logits for fixed images and a fixed NMF dictionary
(the one kctx's seeded Hamburger draws), and the keys / shapes of the four real variants.
"""

import json
import os
import pathlib

import keras
import numpy as np
import pytest

from kctx.checkpoints import UnsafeCheckpointError, torch_state_dict
from kctx.convert import CheckpointMismatchError, load_model, load_segnext_weights, module_path
from kctx.convert.segnext import segnext_targets
from kctx.models import MSCAN_VARIANTS, mscan, mscan_classifier, segnext
from kctx.models.resnet import IMAGENET_MEAN, IMAGENET_STD
from kctx.ops import initial_bases

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "segnext"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
TINY = dict(embed_dims=(16, 32, 64, 96), depths=(1, 1, 2, 1), mlp_ratios=(4, 4, 2, 2),
            drop_path_rate=0.1)


def tiny_segnext(weights=None, **kwargs):
    return segnext(None, num_classes=7, channels=64, ham_channels=64, rank=8,
                   backbone_options=TINY, weights=weights, **kwargs)


def assert_close_to_scale(got, expected, relative=1e-4):
    """|got − expected| ≤ relative · max|expected| everywhere (float32 sums in another
    order on other CPUs' kernels stay far inside this)."""
    scale = float(np.abs(expected).max())
    error = float(np.abs(np.asarray(got, np.float64) - expected).max())
    assert error <= relative * scale, f"max error {error:.3g} above {relative} × {scale:.3g}"


def normalized_padded(images, padded_shape):
    mean, std = 255 * np.asarray(IMAGENET_MEAN), 255 * np.asarray(IMAGENET_STD)
    x = ((images - mean) / std).astype(np.float32)
    height, width = padded_shape
    return np.pad(x, [(0, 0), (0, height - x.shape[1]), (0, width - x.shape[2]), (0, 0)])


@pytest.fixture(scope="module")
def tiny_outputs():
    return dict(np.load(FIXTURES / "tiny_outputs.npz"))


@pytest.mark.parametrize("checkpoint", ["tiny_mmseg.pth", "tiny_original.pth"])
def test_tiny_segnext_equals_the_official_whole_image_inference(checkpoint, tiny_outputs):
    """70×90 images (not multiples of 32): normalisation, padding, MSCAN, LightHamHead
    with K = 7 at evaluation, upsampling and crop, as mmseg's EncoderDecoder.predict."""
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(initial_bases("nmf", (1, 64, 8), seed=0)),
        tiny_outputs["bases"])  # the dictionary the official model was run with
    model = tiny_segnext(FIXTURES / checkpoint)
    assert model.get_layer("decode_head-hamburger").eval_steps == int(tiny_outputs["eval_steps"])
    logits = model.predict(tiny_outputs["images"], verbose=0)
    assert logits.shape == tiny_outputs["logits"].shape == (2, 70, 90, 7)
    assert_close_to_scale(logits, tiny_outputs["logits"])
    stages = model.get_layer("backbone").predict(
        normalized_padded(tiny_outputs["images"], tiny_outputs["padded_shape"]), verbose=0)
    for index, stage in enumerate(stages, start=1):
        assert_close_to_scale(stage, tiny_outputs[f"stage{index}"])


@pytest.mark.tf_kernels
def test_segnext_t_equals_the_official_model():
    """The real-size SegNeXt-T (4.3 M parameters): the four stages and the head's logits."""
    outputs = np.load(FIXTURES / "mscan_t_outputs.npz")
    model = segnext("t", weights=FIXTURES / "mscan_t_mmseg.pth")
    head = keras.Model(model.inputs, model.get_layer("decode_head-conv_seg").output)
    assert_close_to_scale(head.predict(outputs["images"], verbose=0), outputs["head_logits"])
    stages = model.get_layer("backbone").predict(
        normalized_padded(outputs["images"], outputs["padded_shape"]), verbose=0)
    for index, stage in enumerate(stages, start=1):
        assert_close_to_scale(stage, outputs[f"stage{index}"])


def test_imagenet_backbone_checkpoint(tiny_outputs):
    """An MSCAN ImageNet checkpoint (no prefix, a 1000-class ``head``) fills the backbone:
    in mscan() the features equal the official ones; in segnext() the head keeps its
    initialisation."""
    backbone = mscan(None, weights=FIXTURES / "tiny_imagenet.pth", **TINY)
    stages = backbone.predict(
        normalized_padded(tiny_outputs["images"], tiny_outputs["padded_shape"]), verbose=0)
    for index, stage in enumerate(stages, start=1):
        assert_close_to_scale(stage, tiny_outputs[f"stage{index}"])
    keras.utils.set_random_seed(0)
    fresh = tiny_segnext()
    keras.utils.set_random_seed(0)
    model = tiny_segnext()
    report = load_segnext_weights(model, FIXTURES / "tiny_imagenet.pth")
    assert report["part"] == "backbone" and report["layout"] == "mmseg"
    assert {"head.weight", "head.bias"} <= set(report["skipped"])
    for name in ("decode_head-conv_seg", "decode_head-squeeze-conv", "decode_head-hamburger"):
        for before, after in zip(fresh.get_layer(name).weights, model.get_layer(name).weights):
            np.testing.assert_array_equal(before.numpy(), after.numpy())
    assert not np.array_equal(fresh.get_layer("backbone").weights[0].numpy(),
                              model.get_layer("backbone").weights[0].numpy())
    # A segmentor checkpoint into mscan(): its backbone, the head deliberately skipped.
    report = load_segnext_weights(mscan(None, **TINY), FIXTURES / "tiny_mmseg.pth")
    assert report["part"] == "segmentor"
    assert "decode_head.conv_seg.weight" in report["skipped"]


@pytest.mark.parametrize("variant", ["t", "s", "b", "l"], ids=lambda v: f"variant-{v}")
def test_every_key_of_the_real_variants_maps(variant):
    """All keys of the official T / S / B / L (mmseg and original layouts, ADE20K and
    Cityscapes heads) find a Keras weight of their shape; the parameter counts agree."""
    ade20k, cityscapes = segnext(variant), segnext(variant, num_classes=19)
    assert sum(int(np.prod(w.shape)) for w in ade20k.trainable_weights) == \
        MANIFEST["variants"][variant]["param_count"]
    for layout in ("state_dict", "original_state_dict"):
        shapes = MANIFEST["variants"][variant][layout]
        state = {key: np.broadcast_to(np.float32(0), shape) for key, shape in shapes.items()}
        report = load_segnext_weights(ade20k, state, assign=False)
        assert report["part"] == "segmentor"
        assert report["layout"] == ("mmseg" if layout == "state_dict" else "original")
        assert set(report["skipped"]) == {key for key in shapes
                                          if key.endswith("num_batches_tracked")}
        city = dict(state, **{key: np.broadcast_to(np.float32(0),
                                                   (19,) + tuple(value.shape[1:]))
                              for key, value in state.items() if "conv_seg" in key})
        load_segnext_weights(cityscapes, city, assign=False)


def test_original_layout_b_and_l_get_the_original_rank():
    shapes = MANIFEST["variants"]["b"]["original_state_dict"]
    state = {key: np.zeros(shape, np.float32) for key, shape in shapes.items()}
    assert segnext("b", weights=state).get_layer("decode_head-hamburger").rank == 64
    mmseg = {key.replace(".dwconv.dwconv.", ".dwconv."): value for key, value in state.items()}
    assert segnext("b", weights=mmseg).get_layer("decode_head-hamburger").rank == 16


def test_a_checkpoint_that_does_not_fit_fails_with_the_names(tmp_path):
    from kctx.checkpoints import torch_state_dict

    state = torch_state_dict(FIXTURES / "tiny_mmseg.pth")
    extra = dict(state, **{"decode_head.extra.weight": np.zeros(3, np.float32)})
    with pytest.raises(CheckpointMismatchError, match="have no Keras weight: "
                                                      "decode_head.extra.weight"):
        tiny_segnext(extra)
    missing = {k: v for k, v in state.items() if k != "backbone.block3.1.mlp.fc2.bias"}
    with pytest.raises(CheckpointMismatchError,
                       match=r"no checkpoint tensor: backbone\.block3\.1\.mlp\.fc2\.bias"):
        tiny_segnext(missing)
    with pytest.raises(CheckpointMismatchError,
                       match=r"shapes differ: decode_head\.conv_seg\.bias: checkpoint \(7,\), "
                             r"model \(5,\), decode_head\.conv_seg\.weight: checkpoint "
                             r"\(7, 64, 1, 1\) as \(1, 1, 64, 7\), model \(1, 1, 64, 5\)"):
        segnext(None, num_classes=5, channels=64, ham_channels=64, rank=8,
                backbone_options=TINY, weights=state)
    t_keys = MANIFEST["variants"]["t"]["state_dict"]
    t_state = {key: np.broadcast_to(np.float32(0), shape) for key, shape in t_keys.items()}
    with pytest.raises(CheckpointMismatchError, match="MSCAN-T: build the model with "
                                                      "variant='t'"):
        segnext("s", weights=t_state)
    s_model = segnext("s")
    with pytest.raises(CheckpointMismatchError, match="MSCAN-T: build the model with "
                                                      "variant='t'"):
        load_segnext_weights(s_model, t_state, assign=False, variants=MSCAN_VARIANTS)
    with pytest.raises(CheckpointMismatchError, match=r"backbone has embed_dims=\(32, 64, 160, "
                                                      r"256\) and depths=\(3, 3, 5, 2\)"):
        load_segnext_weights(s_model, t_state, assign=False)
    mixed = dict(state)
    mixed["backbone.block1.0.mlp.dwconv.dwconv.weight"] = \
        mixed["backbone.block1.0.mlp.dwconv.weight"]
    with pytest.raises(CheckpointMismatchError, match="mixes the original"):
        tiny_segnext(mixed)


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    from test_checkpoints import exploit_pickle, write_zip_checkpoint

    marker = tmp_path / "pwned"
    path = write_zip_checkpoint(tmp_path / "segnext.pth", exploit_pickle(marker))
    with pytest.raises(UnsafeCheckpointError, match="system"):
        segnext("t", weights=path)
    assert not marker.exists()


def test_keras_weights_round_trip_and_serialization(tmp_path, tiny_outputs):
    model = tiny_segnext(FIXTURES / "tiny_mmseg.pth")
    expected = model.predict(tiny_outputs["images"], verbose=0)
    np.testing.assert_array_equal(model.predict(tiny_outputs["images"], verbose=0), expected)
    model.save_weights(tmp_path / "tiny.weights.h5")
    again = tiny_segnext(tmp_path / "tiny.weights.h5")
    np.testing.assert_array_equal(again.predict(tiny_outputs["images"], verbose=0), expected)
    model.save(tmp_path / "tiny.keras")
    loaded = keras.saving.load_model(tmp_path / "tiny.keras")
    np.testing.assert_allclose(loaded.predict(tiny_outputs["images"], verbose=0), expected,
                               rtol=1e-6, atol=1e-6)
    assert loaded.get_layer("decode_head-hamburger").final_relu


def test_any_size_training_step_and_mixed_precision(tiny_outputs):
    model = tiny_segnext(FIXTURES / "tiny_mmseg.pth")
    for size in ((33, 47), (64, 64), (1, 1)):
        images = np.random.default_rng(0).uniform(0, 255, (1, *size, 3)).astype("float32")
        assert keras.ops.convert_to_numpy(model(images, training=False)).shape == (1, *size, 7)
    # One eager step at a size that is no multiple of 32 (the traced step against mmseg's is
    # tests/test_segnext_training.py's).
    model.compile(optimizer=keras.optimizers.AdamW(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  run_eagerly=True)
    labels = np.random.default_rng(1).integers(0, 7, (2, 70, 90))
    loss = model.fit(tiny_outputs["images"], labels, epochs=1, verbose=0).history["loss"][0]
    assert np.isfinite(loss)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        mixed = tiny_segnext()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    mixed.set_weights(tiny_segnext(FIXTURES / "tiny_mmseg.pth").get_weights())
    logits = keras.ops.convert_to_numpy(mixed(tiny_outputs["images"], training=False))
    assert logits.dtype == np.float32
    agreement = np.mean(logits.argmax(-1) == tiny_outputs["logits"].argmax(-1))
    assert agreement > 0.8, agreement


def test_another_context_block_in_the_light_ham_head():
    """``context="none"`` is the SegNeXt paper's decoder ablation (no Hamburger); any
    context block can stand in its place; an ImageNet backbone still loads, a full
    official checkpoint does not (its Hamburger has nowhere to go)."""
    ablation = segnext(None, num_classes=7, channels=64, ham_channels=64, rank=8,
                       backbone_options=TINY, context="none")
    full = tiny_segnext()
    ham = full.get_layer("decode_head-hamburger")
    assert full.count_params() - ablation.count_params() == ham.count_params()
    load_segnext_weights(ablation, FIXTURES / "tiny_imagenet.pth")
    with pytest.raises(CheckpointMismatchError, match="decode_head.hamburger.ham_in"):
        load_segnext_weights(ablation, FIXTURES / "tiny_mmseg.pth")
    attention = segnext(None, num_classes=7, channels=64, ham_channels=64,
                        backbone_options=TINY, context="self_attention")
    images = np.zeros((1, 40, 40, 3), np.float32)
    assert keras.ops.convert_to_numpy(attention(images, training=False)).shape == (1, 40, 40, 7)


def test_segnext_layers_meet_the_layer_standards():
    from kctx.layers import LayerScale
    from kctx.models.segnext import PadToMultiple, UpsampleLogits
    from kctx.testing import run_layer_test

    # Registered under the name it had in kctx.models.segnext: saved models still load.
    assert keras.saving.get_registered_name(LayerScale) == "kctx>LayerScale"
    run_layer_test(LayerScale, {"init_value": 0.3}, (2, 5, 6, 4),
                   expected_num_trainable_weights=1)
    run_layer_test(PadToMultiple, {"size_divisor": 8}, (2, 5, 9, 3),
                   expected_output_shape=(2, 8, 16, 3), run_training=False)
    x = np.arange(2 * 5 * 9 * 3, dtype=np.float32).reshape(2, 5, 9, 3)
    padded = keras.ops.convert_to_numpy(PadToMultiple(8)(x))
    np.testing.assert_array_equal(padded[:, :5, :9], x)
    assert not padded[:, 5:].any() and not padded[:, :, 9:].any()
    # Logits of the padded 8×16 input at 1/4: resized to 8×16, cropped to 5×9, as a
    # bilinear resize of the full map followed by the crop.
    logits = np.random.default_rng(0).standard_normal((2, 2, 4, 7)).astype(np.float32)
    layer = UpsampleLogits(8)
    got = keras.ops.convert_to_numpy(layer([logits, x]))
    full = keras.ops.convert_to_numpy(keras.ops.image.resize(logits, (8, 16)))
    np.testing.assert_allclose(got, full[:, :5, :9], rtol=1e-6, atol=1e-6)
    assert UpsampleLogits.from_config(layer.get_config()).size_divisor == 8


@pytest.mark.parametrize("kwargs, match", [
    (dict(variant="xl"), "variant='xl'"),
    (dict(variant=None), "needs `channels` and `ham_channels`"),
    (dict(variant="t", num_classes=0), "num_classes=0"),
    (dict(variant=None, channels=64, ham_channels=64), "needs embed_dims"),
    (dict(variant="t", backbone_options=dict(depths=(1, 1, 1))), "4 entries"),
])
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        segnext(**kwargs)


def test_missing_checkpoint_file():
    with pytest.raises(FileNotFoundError):
        segnext("t", weights=os.path.join("no", "such.pth"))


def test_layer_names_are_module_paths_without_dots():
    """PyTorch's modules (and Keras on the torch backend) refuse "." in names: each layer is
    its official module path with "-" for ".", and every key still maps back to it."""
    model = tiny_segnext()
    names = [layer.name for layer in model.layers + model.get_layer("backbone").layers]
    assert not [name for name in names if "." in name]
    assert "block1-0-attn-spatial_gating_unit-conv0_1" in names
    assert "decode_head-hamburger" in names
    assert module_path("block1-0-attn-proj_1") == "block1.0.attn.proj_1"


def test_a_keras_file_saved_with_dotted_names_loads():
    """A SegNeXt ``.keras`` file saved before the names lost their dots (by kctx at 0d130f6,
    with its logits for one image): kctx.convert.load_model renames its layers and loads
    its weights, on every backend."""
    saved = pathlib.Path(__file__).parent / "fixtures" / "keras_files"
    model = load_model(saved / "segnext_dotted_names.keras")
    assert model.get_layer("decode_head-hamburger").rank == 4
    assert not any("." in layer.name for layer in model.get_layer("backbone").layers)
    expected = np.load(saved / "segnext_dotted_names.npz")
    np.testing.assert_allclose(model.predict(expected["images"], verbose=0), expected["logits"],
                               rtol=1e-5, atol=1e-5)
    targets = segnext_targets(model)  # the official keys, from the renamed layers
    assert len({id(variable) for variable, _ in targets.values()}) == len(model.weights)
    assert "backbone.block1.0.attn.spatial_gating_unit.conv0_1.weight" in targets


def test_the_mscan_classifier_reads_the_imagenet_head_and_lends_its_backbone(tmp_path):
    """mscan_classifier: an MSCAN ImageNet checkpoint fills the backbone and the linear
    ``head`` (VAN's classifier on the mean of norm4's output); its ``.keras`` file gives a
    SegNeXt its backbone, shape by shape, and refuses one of another shape."""
    state = torch_state_dict(FIXTURES / "tiny_imagenet.pth")
    classes = state["head.weight"].shape[0]
    model = mscan_classifier(None, classes, weights=FIXTURES / "tiny_imagenet.pth",
                             input_shape=(64, 64, 3), backbone_options=TINY)
    images = np.random.default_rng(0).uniform(0, 255, (2, 64, 64, 3)).astype("float32")
    normalized = (images / 255 - np.array(IMAGENET_MEAN)) / np.array(IMAGENET_STD)
    pooled = keras.ops.convert_to_numpy(model.get_layer("backbone")(
        normalized.astype("float32"))[-1]).astype(np.float64).mean(axis=(1, 2))
    expected = pooled @ state["head.weight"].T.astype(np.float64) + state["head.bias"]
    assert_close_to_scale(keras.ops.convert_to_numpy(model(images, training=False)), expected,
                          relative=1e-5)
    # A segmentor's checkpoint fills the classifier's backbone only.
    other = mscan_classifier(None, 3, backbone_options=TINY)
    report = load_segnext_weights(other, FIXTURES / "tiny_mmseg.pth")
    assert report["loaded"] == len(other.get_layer("backbone").weights)
    model.save(tmp_path / "classifier.keras")
    segmentor = tiny_segnext()
    report = load_segnext_weights(segmentor, tmp_path / "classifier.keras")
    assert report == {"layout": "keras", "part": "backbone", "skipped": [],
                      "loaded": len(segmentor.get_layer("backbone").weights)}
    for a, b in zip(segmentor.get_layer("backbone").weights,
                    model.get_layer("backbone").weights):
        np.testing.assert_array_equal(*map(keras.ops.convert_to_numpy, (a, b)))
    wider = mscan_classifier(None, 3, backbone_options=dict(TINY, embed_dims=(16, 32, 64, 128)))
    wider.save(tmp_path / "wider.keras")
    with pytest.raises(CheckpointMismatchError, match="stages have 16, 32, 64, 128 channels"):
        load_segnext_weights(tiny_segnext(), tmp_path / "wider.keras")
    with pytest.raises(ValueError, match="Received: num_classes=0"):
        mscan_classifier("t", num_classes=0)
    with pytest.raises(ValueError, match="Received: variant='x'"):
        mscan_classifier("x")
