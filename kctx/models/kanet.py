"""KANets (Table 6 of Gao, Wang & Ji), MobileNetV2 + KAO (Table 4) and the MobileNetV2 baseline."""

import keras

from kctx.validation import check_choice, check_positive_float
from kctx.layers.kanet_modules import AttnModule, AttnSkipModule, BaseModule, BaseSkipModule

KANET_VARIANTS = ("kv", "qkv", "attn", "attn_pool", "none")
OUTPUT_STRIDES = (8, 16, 32)

# Table 6: (module, expansion r, output channels c, repeats n, stride s). "Attn" rows
# sit at 28², 14² and 7²; all others are BaseSkipModules.
KANET_LAYOUT = (
    ("base", 1, 16, 1, 1),
    ("base", 6, 24, 2, 2),
    ("base", 6, 32, 2, 2),
    ("attn", 6, 32, 1, 1),
    ("base", 6, 64, 1, 2),
    ("attn", 6, 64, 3, 1),
    ("attn", 6, 96, 3, 1),
    ("base", 6, 160, 1, 2),
    ("attn", 6, 160, 2, 1),
    ("attn", 6, 320, 1, 1),
)
FIRST_DOWNSAMPLING_ROW = 1  # the 24-channel stage: stride 1 at output stride 8


def _make_divisible(value, divisor=8):
    """MobileNetV2's channel rounding (never below 90% of ``value``)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _network(base_module, attn_module, attention, num_classes, input_shape, width_multiplier,
             dropout_rate, include_top, name, output_stride=32, norm_momentum=0.999):
    check_positive_float("width_multiplier", width_multiplier)
    check_choice("output_stride", output_stride, OUTPUT_STRIDES)
    # Output stride 16 runs the stem at stride 1; 8 also the first stride-2 stage
    # (the usual CIFAR adaptation of MobileNetV2).
    skipped = {32: 0, 16: 1, 8: 2}[output_stride]
    inputs = keras.Input(input_shape, name="images")
    x = keras.layers.Conv2D(_make_divisible(32 * width_multiplier), 3,
                            strides=1 if skipped >= 1 else 2,
                            padding="same", use_bias=False, name="stem_conv")(inputs)
    x = keras.layers.BatchNormalization(momentum=norm_momentum, name="stem_norm")(x)
    x = keras.layers.ReLU(6.0, name="stem_relu")(x)
    index = 0
    for row, (kind, expansion, channels, repeats, stride) in enumerate(KANET_LAYOUT):
        channels = _make_divisible(channels * width_multiplier)
        if row == FIRST_DOWNSAMPLING_ROW and skipped >= 2:
            stride = 1
        for repeat in range(repeats):
            module = attn_module if kind == "attn" else base_module
            kwargs = {"attention": attention} if kind == "attn" and attention else {}
            x = module(expansion, channels, strides=stride if repeat == 0 else 1,
                       norm_momentum=norm_momentum, name=f"block{index}_{module.__name__}",
                       **kwargs)(x)
            index += 1
    last = _make_divisible(1280 * max(1.0, width_multiplier))
    x = keras.layers.Conv2D(last, 1, use_bias=False, name="head_conv")(x)
    x = keras.layers.BatchNormalization(momentum=norm_momentum, name="head_norm")(x)
    x = keras.layers.ReLU(6.0, name="head_relu")(x)
    x = keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
    if include_top:
        x = keras.layers.Dropout(dropout_rate, name="dropout")(x)
        x = keras.layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, x, name=name)


def kanet(variant="kv", num_classes=1000, input_shape=(224, 224, 3), width_multiplier=1.0,
          dropout_rate=0.2, include_top=True, output_stride=32, norm_momentum=0.999, name=None):
    """A Kronecker attention network (Table 6) and its comparison models.

    Stem conv 3×3/2 → the module rows of Table 6 (BaseSkipModules, and
    AttnSkipModules at 28², 14², 7² for 224² inputs) → 1×1 conv to 1280 →
    global average pooling → dropout (keep 0.8) → linear logits.

    Args:
        variant: ``"kv"`` (KANet_KV), ``"qkv"`` (KANet_QKV), ``"attn"``
            (AttnNet: regular attention, Table 3), ``"attn_pool"``
            (AttnNet+Pool), or ``"none"`` (KANet w/o KAO, Table 4: the
            AttnSkipModules replaced by BaseModules).
        num_classes: k, the logits' width.
        input_shape: (H, W, 3); any size the five stride-2 stages divide.
        width_multiplier: MobileNetV2's α (channels rounded to multiples of 8).
        dropout_rate: before the classifier (the paper: keep rate 0.8).
        include_top: add dropout and the classifier; else end at the pooled
            1280-d features.
        output_stride: total downsampling, 32 (the paper, ImageNet), 16 (stem
            at stride 1) or 8 (stem and the 24-channel stage at stride 1, the
            usual CIFAR adaptation: 32×32 inputs keep the attention modules at
            16², 8², 4²).
        norm_momentum: of every batch normalisation (0.999 as Keras'
            MobileNetV2 for long ImageNet runs; ~0.9 for runs of a few
            hundred steps, whose moving statistics must converge in time).
        name: model name (default ``kanet_<variant>``).

    Returns:
        A functional ``keras.Model`` returning logits.

    Examples:
        >>> model = kanet("kv", num_classes=10, input_shape=(32, 32, 3))
        >>> model.output_shape
        (None, 10)

    Reference:
        Gao, Wang & Ji, "Kronecker Attention Networks", KDD 2020, Table 6,
        Tables 2–4.
    """
    check_choice("variant", variant, KANET_VARIANTS)
    attention = None if variant == "none" else variant
    return _network(BaseSkipModule, BaseModule if variant == "none" else AttnSkipModule,
                    attention, num_classes, input_shape, width_multiplier, dropout_rate,
                    include_top, name or f"kanet_{variant}", output_stride, norm_momentum)


def mobilenet_v2(num_classes=1000, input_shape=(224, 224, 3), width_multiplier=1.0,
                 dropout_rate=0.2, include_top=True, output_stride=32, norm_momentum=0.999,
                 name="mobilenet_v2"):
    """MobileNetV2 (Sandler et al. 2018) built from :class:`BaseModule` on KANet's grid.

    The same stages as Table 6 (MobileNetV2's own: 1, 2, 3, 4, 3, 3, 1 blocks
    of 16, 24, 32, 64, 96, 160, 320 channels), every module a BaseModule; the
    baseline of Tables 2 and 4. Arguments as :func:`kanet`.
    """
    return _network(BaseModule, BaseModule, None, num_classes, input_shape, width_multiplier,
                    dropout_rate, include_top, name, output_stride, norm_momentum)


def mobilenet_v2_kao(attention="kv", num_classes=1000, input_shape=(224, 224, 3),
                     width_multiplier=1.0, dropout_rate=0.2, include_top=True, output_stride=32,
                     norm_momentum=0.999, name="mobilenet_v2_kao"):
    """MobileNetV2 + KAO (Table 4): MobileNetV2 with the BaseModules at KANet's attention
    positions (stride 1 at 28², 14², 7²) replaced by AttnModules (no extra skips).

    Args:
        attention: ``"kv"``, ``"qkv"``, ``"attn"`` or ``"attn_pool"``.
        num_classes: as :func:`kanet`; so are the other arguments.
    """
    return _network(BaseModule, AttnModule, attention, num_classes, input_shape,
                    width_multiplier, dropout_rate, include_top, name, output_stride,
                    norm_momentum)


# The rows of Tables 2–4 by name: (label in the paper's tables, builder, fixed arguments).
KANET_FAMILY = {
    "mobilenet_v2": ("MobileNetV2", mobilenet_v2, {}),
    "kanet_kv": ("KANet_KV", kanet, {"variant": "kv"}),
    "kanet_qkv": ("KANet_QKV", kanet, {"variant": "qkv"}),
    "attnnet": ("AttnNet", kanet, {"variant": "attn"}),
    "attnnet_pool": ("AttnNet+Pool", kanet, {"variant": "attn_pool"}),
    "mobilenet_v2_kao": ("MobileNetV2+KAO", mobilenet_v2_kao, {"attention": "kv"}),
    "kanet_none": ("KANet w/o KAO", kanet, {"variant": "none"}),
}


def kanet_family_model(name, **kwargs):
    """One model of Tables 2–4 by name (a key of ``KANET_FAMILY``, e.g. ``"kanet_kv"``).

    ``kwargs`` go to the builder (``num_classes``, ``input_shape``,
    ``width_multiplier``, ``output_stride``, ...).
    """
    check_choice("name", name, tuple(KANET_FAMILY))
    _, build, fixed = KANET_FAMILY[name]
    return build(**fixed, **kwargs)
