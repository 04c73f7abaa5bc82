"""kctx.profile's theoretical and effective receptive fields, and segmentation.receptive_field."""

import json
import math
import pathlib

import keras
import numpy as np
import pytest

from kctx.layers import Hamburger, SelfAttention2D, context_block, context_block_names
from kctx.models import PaddedMaxPooling2D, dilated_resnet
from kctx.profile import (Window, effective_receptive_field, register_receptive_field_rule,
                          theoretical_receptive_field)
from kctx.profile.receptive_field import rules
from kctx.profile.receptive_field.rules import is_global_layer, receptive_field_rule
from segmentation import models as segmentation_models
from segmentation.models import AtrousConv2D

KCTX = pathlib.Path(__file__).resolve().parents[1] / "kctx"


def conv(filters=2, kernel=3, strides=1, dilation=1, padding="same", name=None, ones=False):
    return keras.layers.Conv2D(filters, kernel, strides=strides, dilation_rate=dilation,
                               padding=padding, use_bias=not ones, name=name,
                               kernel_initializer="ones" if ones else "glorot_uniform")


def model_of(*layers, shape=(32, 32, 1)):
    inputs = keras.Input(shape)
    x = inputs
    for layer in layers:
        x = layer(x)
    return keras.Model(inputs, x)


def test_stack_strides_and_dilation_match_a_hand_count():
    # Three 3×3 convs: 1 + 3·2 = 7 pixels, jump 1.
    field = theoretical_receptive_field(model_of(conv(), conv(), conv()))
    assert (field.rf, field.jump, field.is_global) == ((7, 7), (1, 1), False)
    # 3×3/2 then 3×3: 3 + 2·2 = 7, jump 2; then a 2×2/2 max-pool: 7 + 1·2 = 9, jump 4.
    field = theoretical_receptive_field(model_of(
        conv(strides=2), conv(), keras.layers.MaxPooling2D(2)))
    assert (field.rf, field.jump, field.size) == ((9, 9), (4, 4), (8, 8))
    # Dilations 1, 2, 4 (3×3): 1 + 2 + 4 + 8 = 15; a 1×5 kernel only widens the width.
    field = theoretical_receptive_field(model_of(
        conv(), conv(dilation=2), conv(dilation=4), conv(kernel=(1, 5))))
    assert field.rf == (15, 19)


def test_offsets_follow_the_padding():
    # "valid" 3×3/2: output 0 is centred on input pixel 1, then every 2 pixels.
    field = theoretical_receptive_field(model_of(conv(strides=2, padding="valid")))
    assert (field.offset, field.jump, field.size) == ((1, 1), (2, 2), (15, 15))
    # PyTorch-style symmetric padding (explicit pad, "valid"), and PaddedMaxPooling2D.
    field = theoretical_receptive_field(model_of(
        keras.layers.ZeroPadding2D(1), conv(strides=2, padding="valid"),
        PaddedMaxPooling2D(3, 2, 1)))
    assert (field.rf, field.jump, field.offset, field.size) == ((7, 7), (4, 4), (0, 0), (8, 8))
    assert field.location((2, 3)) == (8, 12)


def test_branch_merges_take_the_union():
    inputs = keras.Input((16, 16, 1))
    small = conv(kernel=3)(inputs)
    large = conv(kernel=5)(conv(kernel=3)(inputs))  # 7
    added = keras.layers.Add()([small, large])
    joined = keras.layers.Concatenate()([small, conv(kernel=5)(inputs)])
    model = keras.Model(inputs, [added, joined])
    assert theoretical_receptive_field(model, added._keras_history[0].name).rf == (7, 7)
    assert theoretical_receptive_field(model).rf == (5, 5)  # the last output


def test_nested_models_are_walked_into():
    inner_inputs = keras.Input((None, None, 2))
    y = conv(strides=2, name="inner_strided")(inner_inputs)
    y = conv(name="inner_last")(y)
    inner = keras.Model(inner_inputs, y, name="inner")
    outer = model_of(conv(), inner, conv())
    # 3 | +2 (3×3/2) | +4 (3×3 at jump 2) | +4 = 13, jump 2.
    assert theoretical_receptive_field(outer).rf == (13, 13)
    field = theoretical_receptive_field(outer, "inner")
    assert (field.rf, field.jump, field.layer) == ((9, 9), (2, 2), "inner")
    for name in ("inner_strided", "inner/inner_strided"):
        field = theoretical_receptive_field(outer, name)
        assert (field.rf, field.jump, field.layer) == ((5, 5), (2, 2), "inner/inner_strided")
    with pytest.raises(ValueError, match="No layer"):
        theoretical_receptive_field(outer, "missing")


def test_global_layers_make_the_field_global():
    field = theoretical_receptive_field(model_of(conv(filters=8), Hamburger(rank=2), conv(),
                                                 shape=(8, 8, 1)))
    assert field.is_global and field.rf == (5, 5) and len(field.global_layers) == 1
    inputs = keras.Input((8, 8, 4))
    pooled = keras.layers.GlobalAveragePooling2D(keepdims=True)(inputs)
    gated = keras.layers.Multiply()([inputs, pooled])
    field = theoretical_receptive_field(keras.Model(inputs, gated))
    assert field.is_global and field.rf == (1, 1)
    assert theoretical_receptive_field(model_of(SelfAttention2D(), shape=(4, 4, 8))).is_global
    # Every registered image context block but the identity is recognised.
    for name in context_block_names("image"):
        assert is_global_layer(context_block(name)) == (name != "none"), name


class Blur(keras.layers.Layer):
    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(3, 3, input_shape[-1], 1))

    def call(self, inputs):
        return keras.ops.depthwise_conv(inputs, self.kernel, padding="same")


class Scale(keras.layers.Layer):
    def call(self, inputs):
        return inputs * 2.0


def test_unknown_layers_raise_or_are_listed():
    with pytest.raises(ValueError, match="spatial kernel of shape"):
        theoretical_receptive_field(model_of(Blur(name="blur")))
    register_receptive_field_rule(Blur, lambda layer, size: Window((3, 3), padding="same"))
    try:
        assert theoretical_receptive_field(model_of(Blur(), conv())).rf == (5, 5)
    finally:
        rules._RULES.pop(Blur)
    field = theoretical_receptive_field(model_of(Scale(name="double"), conv()))
    assert field.rf == (3, 3) and field.assumed_pointwise == ("double (Scale)",)


class WideBlur(Blur):
    pass


class TallConv(keras.layers.Conv2D):
    pass


def test_rules_are_found_along_the_class_hierarchy():
    # A subclass follows its base's rule (a registered user class, a Keras class) until it
    # registers its own, which then wins.
    register_receptive_field_rule(Blur, lambda layer, size: Window((3, 3), padding="same"))
    try:
        assert theoretical_receptive_field(model_of(WideBlur(), conv())).rf == (5, 5)
        register_receptive_field_rule(WideBlur, lambda layer, size: Window((5, 5), padding="same"))
        assert theoretical_receptive_field(model_of(WideBlur(), conv())).rf == (7, 7)
    finally:
        rules._RULES.pop(Blur)
        rules._RULES.pop(WideBlur, None)
    assert theoretical_receptive_field(model_of(TallConv(2, (5, 1), padding="same"))).rf == (5, 1)
    register_receptive_field_rule(TallConv, lambda layer, size: "global")
    try:
        assert theoretical_receptive_field(model_of(TallConv(2, 3), conv())).is_global
    finally:
        rules._RULES.pop(TallConv)
    with pytest.raises(TypeError, match="must be callable"):
        register_receptive_field_rule(Blur, "pointwise")


def test_a_workflow_registers_its_own_layers():
    # segmentation.models files AtrousConv2D's rule where it defines the class; kctx knows
    # no workflow package.
    assert receptive_field_rule(AtrousConv2D(2, 3)) is segmentation_models._atrous_receptive_field

    class WiderAtrous(AtrousConv2D):
        pass

    assert theoretical_receptive_field(model_of(WiderAtrous(2, 4))).rf == (9, 9)
    mentions = [f"{path.relative_to(KCTX.parent)}:{number}"
                for path in sorted(KCTX.rglob("*.py"))
                for number, line in enumerate(path.read_text().splitlines(), 1)
                if "AtrousConv" in line or (path.is_relative_to(KCTX / "profile")
                                            and "segmentation" in line)]
    assert mentions == []


def test_kctx_and_segmentation_layers():
    # dilated_resnet(14, 8): 7×7/2 stem (7), 3×3/2 max-pool (+2·2 = 11, jump 4), res2's 3×3
    # (+8 = 19), res3's 3×3/2 (+8 = 27, jump 8), res4's first 3×3 at dilation 1 (+16 = 43),
    # res5's first at dilation 2 (+32 = 75); the 1×1 shortcuts add nothing.
    field = theoretical_receptive_field(dilated_resnet(14, 8, width=4, input_shape=(64, 64, 3)))
    assert (field.rf, field.jump, field.size, field.offset) == ((75, 75), (8, 8), (8, 8), (0, 0))
    # AtrousConv2D: a dilated 3×3, or its 1×1 centre once the rate reaches the map's side.
    assert theoretical_receptive_field(model_of(AtrousConv2D(2, 3))).rf == (7, 7)
    assert theoretical_receptive_field(model_of(AtrousConv2D(2, 32))).rf == (1, 1)


def test_erf_of_one_all_ones_conv_is_its_3x3_square():
    model = model_of(conv(filters=1, ones=True), shape=(None, None, 2))
    erf = effective_receptive_field(model, np.random.default_rng(0).normal(size=(3, 9, 9, 2)))
    expected = np.zeros((9, 9))
    expected[3:6, 3:6] = 2.0  # |∂/∂x| summed over the 2 input channels
    np.testing.assert_allclose(erf.map, expected)
    assert erf.position == (4, 4) and erf.centre == (4.0, 4.0)
    assert erf.sides == {0.5: 3, 0.9: 3, 0.95: 3} and erf.support == (3, 3)
    assert erf.radii[0.5] == 1.0 and math.isclose(erf.radii[0.95], math.sqrt(2))


def test_erf_support_of_a_dilated_stack_is_the_theoretical_field():
    inner_inputs = keras.Input((None, None, 1))
    y = conv(filters=2, dilation=2, ones=True, name="dilated")(inner_inputs)
    inner = keras.Model(inner_inputs, conv(filters=1, dilation=3, ones=True)(y), name="inner")
    model = model_of(conv(filters=1, ones=True), inner, shape=(None, None, 1))
    images = np.ones((2, 25, 25, 1))
    for layer, side in ((None, 1 + 2 + 4 + 6), ("inner/dilated", 1 + 2 + 4)):
        erf = effective_receptive_field(model, images, layer)
        assert erf.theoretical.rf == (side, side) and erf.support == (side, side)
        rows, _ = np.nonzero(erf.map)
        assert (rows.min() + rows.max()) / 2 == erf.centre[0] == 12


def test_erf_centre_is_the_theoretical_location():
    model = model_of(conv(filters=1, strides=2, padding="valid", ones=True),
                     conv(filters=1, ones=True), shape=(None, None, 1))
    erf = effective_receptive_field(model, np.ones((1, 16, 16, 1)))
    # 16 → 7 positions; the centre one, 3, is centred on input pixel 1 + 3·2 = 7.
    assert erf.position == (3, 3) and erf.centre == (7.0, 7.0)
    assert erf.centre_source == "theoretical" and erf.support == (7, 7)


def test_label_objects_from_label_maps():
    from segmentation.receptive_field import label_objects

    label = np.zeros((12, 12), np.uint8)
    label[1:4, 1:6] = 3
    label[1, 6] = 255  # an ignored edge pixel joins its object
    label[7:11, 8:10] = 5
    label[7, 2] = 255  # ignore alone: no object
    assert sorted(label_objects(label)) == [(4, 5), (6, 3)]
    assert sorted(label_objects(label, connect_ignore=False)) == [(4, 5), (5, 3)]


def test_cli_writes_the_report(tmp_path, capsys):
    from segmentation.receptive_field import main

    path = tmp_path / "rf.json"
    assert main(["--config", "digits_seg", "--images", "2", "--object-images", "20",
                 "--json", str(path), "--png", str(tmp_path / "rf.png")]) == 0
    report = json.loads(path.read_text())
    assert "head_squeeze_relu" in capsys.readouterr().out
    context, backbone = report["layers"]["context_input"], report["layers"]["backbone"]
    assert context["layer"] == "head_squeeze_relu" and backbone["layer"] == "backbone"
    assert context["theoretical"]["rf"] == [91, 91] and context["theoretical"]["jump"] == [8, 8]
    assert context["theoretical"]["positions"] == 64 and not context["theoretical"]["global"]
    assert backbone["theoretical"]["rf"] == [75, 75]
    assert set(context["erf"]["sides"]) == {"0.5", "0.9", "0.95"}
    assert context["erf"]["images"] == 2 and context["erf"]["centre"] == [32, 32]
    objects = report["objects"]
    assert objects["images"] == 20 and 12 <= objects["side"]["min"] <= objects["side"]["max"] <= 28
    assert set(objects["larger_than"]) == {"context_input_rf", "context_input_erf_0.9",
                                           "backbone_rf", "backbone_erf_0.9"}
    assert (tmp_path / "rf.png").stat().st_size > 0
