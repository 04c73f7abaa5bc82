"""SegNeXt (Guo et al., NeurIPS 2022): the MSCAN backbone and the LightHamHead.

:func:`mscan` builds the Multi-Scale Convolutional Attention Network, a backbone that
returns its pyramid of four stages; :func:`segnext` puts the LightHamHead on stages
2–4 — the official Hamburger (:class:`kctx.layers.Hamburger` configured as
:data:`kctx.layers.OFFICIAL_VARIANTS` ``["light"]``) between two 1×1 conv-GN-ReLU — and
gives a model from RGB images (0–255) to logits at the input resolution, with the
official pipeline's ImageNet normalisation and whole-image inference inside.

Both follow mmsegmentation 1.2.2 (``mmseg/models/backbones/mscan.py``,
``decode_heads/ham_head.py``, the ``segnext_mscan-{t,s,b,l}`` ADE20K configs) and the
original repository (Visual-Attention-Network/SegNeXt) layer for layer; the Keras
layers carry the official module paths as names, "." written "-" (PyTorch refuses dots
in module names: ``block1-0-attn-proj_1``, ``decode_head-hamburger``), so
:func:`kctx.convert.load_segnext_weights` maps a checkpoint onto them one to one.
``tools/segnext_fixtures.py`` runs the official code to write the fixtures the tests
compare against.
"""

import keras
import numpy as np
from keras import ops

from kctx.convert.porting import keras_name
from kctx.convert.segnext import checkpoint_layout, load_segnext_weights, read_checkpoint
from kctx.layers.context_block import context_block
from kctx.layers.depthwise import TapDepthwiseConv2D
from kctx.layers.hamburger import OFFICIAL_VARIANTS, Hamburger
from kctx.layers.layer_scale import LAYER_SCALE_INIT, LayerScale
from kctx.layers.pytorch_style import NORM_EPSILON, batch_norm, padded_conv2d
from kctx.layers.resize import ResizeToMatch
from kctx.models.resnet import torchvision_normalization
from kctx.ops.gelu import gelu
from kctx.ops.resize import resize_bilinear
from kctx.validation import check_choice, check_positive_int

# The official configs (mmseg configs/segnext, the original repo's local_configs).
MSCAN_VARIANTS = {
    "t": dict(embed_dims=(32, 64, 160, 256), depths=(3, 3, 5, 2), mlp_ratios=(8, 8, 4, 4),
              drop_path_rate=0.1),
    "s": dict(embed_dims=(64, 128, 320, 512), depths=(2, 2, 4, 2), mlp_ratios=(8, 8, 4, 4),
              drop_path_rate=0.1),
    "b": dict(embed_dims=(64, 128, 320, 512), depths=(3, 3, 12, 3), mlp_ratios=(8, 8, 4, 4),
              drop_path_rate=0.1),
    "l": dict(embed_dims=(64, 128, 320, 512), depths=(3, 5, 27, 3), mlp_ratios=(8, 8, 4, 4),
              drop_path_rate=0.3),
}
# LightHamHead width per variant (channels = ham_channels). r = 16 in every mmseg config;
# the original repository's B and L configs set no MD_R and run its default r = 64.
HEAD_CHANNELS = {"t": 256, "s": 256, "b": 512, "l": 1024}
RANK = 16
ORIGINAL_RANK = {"t": 16, "s": 16, "b": 64, "l": 64}
# The official data preprocessor (RGB order) normalises 0–255 values with the ImageNet
# mean 123.675 / 116.28 / 103.53 and std 58.395 / 57.12 / 57.375 (torchvision's on [0, 1]:
# kctx.models.resnet.torchvision_normalization) and pads to a multiple of 32 at test time
# (mmseg's SegDataPreProcessor).
SIZE_DIVISOR = 32
# MSCA: a 5×5 depthwise conv, then branches of 1×k and k×1 depthwise strip convs.
ATTENTION_KERNEL = 5
STRIP_KERNELS = (7, 11, 21)


def _padded(size, divisor):
    return (size + divisor - 1) // divisor * divisor


@keras.saving.register_keras_serializable(package="kctx")
class PadToMultiple(keras.layers.Layer):
    """Zero-pad (B, H, W, C) at the bottom and right to multiples of ``size_divisor``.

    The official test pipeline pads the normalised image this way before the network
    (mmseg's ``SegDataPreProcessor`` with ``test_cfg=dict(size_divisor=32)``), so that
    every stride-2 stage halves an even size.

    Args:
        size_divisor: the multiple (1: no padding).

    Call arguments:
        inputs: (B, H, W, C); H and W may be unknown until run time.

    Examples:
        >>> tuple(PadToMultiple(32)(keras.ops.ones((1, 70, 90, 3))).shape)
        (1, 96, 96, 3)
    """

    def __init__(self, size_divisor=SIZE_DIVISOR, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("size_divisor", size_divisor)
        self.size_divisor = size_divisor

    def call(self, inputs):
        if self.size_divisor == 1:
            return inputs
        shape = ops.shape(inputs)
        height, width = shape[1], shape[2]
        padded_height = _padded(height, self.size_divisor)
        padded_width = _padded(width, self.size_divisor)
        pads = [[0, 0], [0, padded_height - height], [0, padded_width - width], [0, 0]]
        # Paddings known only at run time lose the static channels in a TensorFlow graph
        # (LiteRT then cannot convert the next conv): reshape them back in.
        return ops.reshape(ops.pad(inputs, pads),
                           (-1, padded_height, padded_width, inputs.shape[-1]))

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape
        pad = (lambda s: None if s is None else _padded(s, self.size_divisor))
        return (batch, pad(height), pad(width), channels)

    def get_config(self):
        return {**super().get_config(), "size_divisor": self.size_divisor}


@keras.saving.register_keras_serializable(package="kctx")
class UpsampleLogits(keras.layers.Layer):
    """Resize logits bilinearly to the padded input size, then crop the padding.

    The official whole-image inference (mmseg ``EncoderDecoder.predict``): the head's
    logits (at 1/8 of the padded input) are resized to the padded size
    (``align_corners=False``) and the padding is cut off, so the output has the
    input's height and width.

    Args:
        size_divisor: the padding multiple of :class:`PadToMultiple` (1: none).
        **kwargs: base layer arguments (``dtype="float32"`` keeps logits in float32
            under mixed precision).

    Call arguments:
        inputs: ``[logits (B, h, w, K), images (B, H, W, C)]``.

    Examples:
        >>> logits, images = keras.ops.ones((1, 12, 12, 5)), keras.ops.ones((1, 70, 90, 3))
        >>> tuple(UpsampleLogits(32)([logits, images]).shape)
        (1, 70, 90, 5)
    """

    def __init__(self, size_divisor=SIZE_DIVISOR, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("size_divisor", size_divisor)
        self.size_divisor = size_divisor

    def call(self, inputs):
        logits, images = inputs
        shape = ops.shape(images)
        height, width = shape[1], shape[2]
        size = (_padded(height, self.size_divisor), _padded(width, self.size_divisor))
        logits = resize_bilinear(ops.cast(logits, self.compute_dtype), size)
        if self.size_divisor == 1:
            return logits
        return logits[:, :height, :width, :]

    def compute_output_shape(self, input_shapes):
        logits, images = input_shapes
        return (logits[0], images[1], images[2], logits[-1])

    def get_config(self):
        return {**super().get_config(), "size_divisor": self.size_divisor}


def _patch_embedding(x, filters, name):
    """A 3×3/2 conv with PyTorch's symmetric zero padding 1 (TensorFlow's "same" pads a
    stride-2 conv of an even size at the bottom / right only)."""
    return padded_conv2d(x, filters, 3, keras_name(name), keras_name(f"{name}.pad"), strides=2)


def _gelu(name):
    return keras.layers.Activation(gelu, name=keras_name(name))


def _depthwise(x, kernel_size, name):
    return TapDepthwiseConv2D(kernel_size, padding="same", name=keras_name(name))(x)


def _msca(x, name):
    """Multi-scale convolutional attention (Fig. 2 (b), Eq. 1–2):
    Att = Conv1×1(Σ_{i=0..3} Scale_i(DW-Conv(F))), Out = Att ⊗ F, where Scale_0 is the
    identity and Scale_1..3 are 1×k then k×1 depthwise strip convs, k = 7, 11, 21."""
    attention = _depthwise(x, ATTENTION_KERNEL, f"{name}.conv0")
    branches = [attention]
    for index, size in enumerate(STRIP_KERNELS):
        branch = _depthwise(attention, (1, size), f"{name}.conv{index}_1")
        branches.append(_depthwise(branch, (size, 1), f"{name}.conv{index}_2"))
    attention = keras.layers.Add(name=keras_name(f"{name}.sum"))(branches)
    attention = keras.layers.Conv2D(x.shape[-1], 1, name=keras_name(f"{name}.conv3"))(attention)
    return keras.layers.Multiply(name=keras_name(f"{name}.gate"))([attention, x])


def _branch(x, residual, scale_name, drop_path, name):
    x = LayerScale(LAYER_SCALE_INIT, name=keras_name(scale_name))(x)
    if drop_path > 0:  # stochastic depth: whole samples dropped, the rest scaled by 1/(1-p)
        x = keras.layers.Dropout(drop_path, noise_shape=(None, 1, 1, 1),
                                 name=keras_name(f"{name}.drop_path"))(x)
    return keras.layers.Add(name=keras_name(f"{name}.add"))([residual, x])


def _mscan_block(x, mlp_ratio, drop_rate, drop_path, name, synchronized):
    """x + γ₁·SpatialAttention(BN(x)), then x + γ₂·MLP(BN(x)) (MSCAN, Fig. 2 (a))."""
    channels = x.shape[-1]
    h = batch_norm(keras_name(f"{name}.norm1"), synchronized)(x)
    a = keras.layers.Conv2D(channels, 1, name=keras_name(f"{name}.attn.proj_1"))(h)
    a = _gelu(f"{name}.attn.activation")(a)
    a = _msca(a, f"{name}.attn.spatial_gating_unit")
    a = keras.layers.Conv2D(channels, 1, name=keras_name(f"{name}.attn.proj_2"))(a)
    a = keras.layers.Add(name=keras_name(f"{name}.attn.shortcut"))([a, h])  # its own input: BN(x)
    x = _branch(a, x, f"{name}.layer_scale_1", drop_path, f"{name}.attn")
    h = batch_norm(keras_name(f"{name}.norm2"), synchronized)(x)
    hidden = int(channels * mlp_ratio)
    m = keras.layers.Conv2D(hidden, 1, name=keras_name(f"{name}.mlp.fc1"))(h)
    m = _depthwise(m, 3, f"{name}.mlp.dwconv")
    m = _gelu(f"{name}.mlp.act")(m)
    if drop_rate > 0:
        m = keras.layers.Dropout(drop_rate, name=keras_name(f"{name}.mlp.drop1"))(m)
    m = keras.layers.Conv2D(channels, 1, name=keras_name(f"{name}.mlp.fc2"))(m)
    if drop_rate > 0:
        m = keras.layers.Dropout(drop_rate, name=keras_name(f"{name}.mlp.drop2"))(m)
    return _branch(m, x, f"{name}.layer_scale_2", drop_path, f"{name}.mlp")


def _variant_settings(variant, **overrides):
    if variant is None:
        settings = {}
    else:
        check_choice("variant", variant, tuple(MSCAN_VARIANTS))
        settings = dict(MSCAN_VARIANTS[variant])
    settings.update({key: value for key, value in overrides.items() if value is not None})
    missing = [key for key in ("embed_dims", "depths", "mlp_ratios") if key not in settings]
    if missing:
        raise ValueError(f"`variant=None` needs {', '.join(missing)}. Received: "
                         f"variant=None, {', '.join(f'{k}={v!r}' for k, v in overrides.items())}")
    embed_dims, depths, mlp_ratios = (tuple(settings[k]) for k in
                                      ("embed_dims", "depths", "mlp_ratios"))
    if not len(embed_dims) == len(depths) == len(mlp_ratios) == 4:
        raise ValueError("`embed_dims`, `depths` and `mlp_ratios` must each have 4 entries "
                         f"(one per stage). Received: embed_dims={embed_dims}, "
                         f"depths={depths}, mlp_ratios={mlp_ratios}")
    for name, values in (("embed_dims", embed_dims), ("depths", depths)):
        for value in values:
            check_positive_int(name, value)
    settings.update(embed_dims=embed_dims, depths=depths, mlp_ratios=mlp_ratios)
    settings.setdefault("drop_path_rate", 0.0)
    return settings


def mscan(variant="t", weights=None, input_shape=(None, None, 3), embed_dims=None,
          depths=None, mlp_ratios=None, drop_rate=0.0, drop_path_rate=None,
          synchronized_batch_norm=False, name=None):
    """The MSCAN backbone of SegNeXt: a pyramid of four stages at strides 4, 8, 16, 32.

    A stem of two 3×3/2 conv-BN (GELU between) to stride 4, then at each stage an
    overlapping 3×3/2 patch embedding (conv-BN; the stem at stage 1) and MSCAN blocks:
    x + γ₁·SpatialAttention(BN(x)) with the multi-scale convolutional attention
    (a 5×5 depthwise conv and 1×7/7×1, 1×11/11×1, 1×21/21×1 depthwise strip convs,
    summed, a 1×1 conv and a gate, Eq. 1–2), then x + γ₂·MLP(BN(x)) (1×1 conv, 3×3
    depthwise conv, GELU, 1×1 conv), γ = LayerScale (1e-2), stochastic depth rising
    linearly to ``drop_path_rate``; each stage ends with LayerNorm. BatchNorm and
    LayerNorm use ε = 1e-5 and GELU its exact (erf) form, as the official PyTorch code.

    Args:
        variant: ``"t"``, ``"s"``, ``"b"``, ``"l"`` (:data:`MSCAN_VARIANTS`: Tab. 1 of
            the paper), or ``None`` with ``embed_dims``, ``depths`` and ``mlp_ratios``.
        weights: ``None`` (random initialisation), an MSCAN ImageNet checkpoint
            (``.pth``: the mmseg ``mscan_{t,s,b,l}_20230227`` files or the original
            repository's, read without PyTorch by :func:`kctx.checkpoints.read_torch`;
            their ImageNet classifier ``head.*`` is skipped), a SegNeXt checkpoint (its
            backbone), or a Keras ``.weights.h5``. See
            :func:`kctx.convert.load_segnext_weights`.
        input_shape: (H, W, 3) of the ImageNet-normalised input; H and W may be None.
        embed_dims: channels per stage; overrides the variant's.
        depths: blocks per stage; overrides the variant's.
        mlp_ratios: MLP expansion per stage; overrides the variant's.
        drop_rate: dropout in the MLPs (0 in every official config).
        drop_path_rate: the last block's stochastic depth (the variant's by default).
        synchronized_batch_norm: all-reduce batch statistics across replicas (SyncBN).
        name: the model's name (default ``"mscan_<variant>"``).

    Returns:
        A functional ``keras.Model`` from (B, H, W, 3) to the list of the four stages'
        features, (B, ⌈H/4⌉, ⌈W/4⌉, C₁) ... (B, ⌈H/32⌉, ⌈W/32⌉, C₄).

    Examples:
        >>> backbone = mscan("t")
        >>> [tuple(f.shape) for f in backbone(keras.ops.zeros((1, 64, 64, 3)))]
        [(1, 16, 16, 32), (1, 8, 8, 64), (1, 4, 4, 160), (1, 2, 2, 256)]

    Reference:
        Guo, Lu, Hou, Liu, Cheng, Hu. "SegNeXt: Rethinking Convolutional Attention
        Design for Semantic Segmentation", NeurIPS 2022 — Sec. 3.1, Fig. 2, Tab. 1.
    """
    settings = _variant_settings(variant, embed_dims=embed_dims, depths=depths,
                                 mlp_ratios=mlp_ratios, drop_path_rate=drop_path_rate)
    embed_dims, depths, mlp_ratios = (settings[k] for k in ("embed_dims", "depths",
                                                            "mlp_ratios"))
    rates = np.linspace(0.0, settings["drop_path_rate"], sum(depths)).tolist()
    inputs = keras.Input(input_shape, name="images")
    x = _patch_embedding(inputs, embed_dims[0] // 2, "patch_embed1.proj.0")
    x = batch_norm(keras_name("patch_embed1.proj.1"), synchronized_batch_norm)(x)
    x = _gelu("patch_embed1.proj.2")(x)
    x = _patch_embedding(x, embed_dims[0], "patch_embed1.proj.3")
    x = batch_norm(keras_name("patch_embed1.proj.4"), synchronized_batch_norm)(x)
    stages, block = [], 0
    for stage, (channels, depth, mlp_ratio) in enumerate(zip(embed_dims, depths, mlp_ratios),
                                                         start=1):
        if stage > 1:
            x = _patch_embedding(x, channels, f"patch_embed{stage}.proj")
            x = batch_norm(keras_name(f"patch_embed{stage}.norm"), synchronized_batch_norm)(x)
        for index in range(depth):
            x = _mscan_block(x, mlp_ratio, drop_rate, rates[block], f"block{stage}.{index}",
                             synchronized_batch_norm)
            block += 1
        x = keras.layers.LayerNormalization(epsilon=NORM_EPSILON, name=f"norm{stage}")(x)
        stages.append(x)
    model = keras.Model(inputs, stages, name=name or f"mscan_{variant or 'custom'}")
    if weights is not None:
        load_segnext_weights(model, weights, variants=MSCAN_VARIANTS)
    return model


def _conv_gn_relu(x, filters, name, groups):
    x = keras.layers.Conv2D(filters, 1, use_bias=False, name=keras_name(f"{name}.conv"))(x)
    x = keras.layers.GroupNormalization(groups, epsilon=NORM_EPSILON,
                                        name=keras_name(f"{name}.gn"))(x)
    return keras.layers.ReLU(name=keras_name(f"{name}.activate"))(x)


def light_ham_head(features, num_classes, channels=256, ham_channels=256, rank=RANK,
                   dropout_rate=0.1, norm_groups=32, ham_options=None, context=None):
    """SegNeXt's LightHamHead on the backbone's stages 2–4 (mmseg ``LightHamHead``).

    Stages 3 and 4 are resized bilinearly to stage 2's size and concatenated with it;
    a 1×1 conv-GN-ReLU squeezes them to ``ham_channels``; the Hamburger as the
    official head runs it (1×1 lower bread + ReLU, NMF with K = 6 in training and 7 at
    evaluation, r = ``rank``, back-propagation through all steps, the absolute 1e-6
    guard, 1×1 upper bread + GN, ReLU(Z + ·): ``OFFICIAL_VARIANTS["light"]``); a 1×1
    conv-GN-ReLU aligns to ``channels``; channel dropout (``Dropout2d``); a 1×1
    classifier.

    Args:
        features: the backbone's stages [1, 2, 3, 4] (symbolic tensors).
        num_classes: logits per pixel.
        channels: width of the align conv and the classifier's input.
        ham_channels: d, width of the squeeze conv and the Hamburger.
        rank: r of the NMF.
        dropout_rate: of the channel dropout before the classifier.
        norm_groups: groups of every GroupNorm (32).
        ham_options: other :class:`kctx.layers.Hamburger` arguments (override the
            official ones; the dictionary is seeded, ``seed=0``, for reproducible
            inference), or of the ``context`` block.
        context: ``None`` for the official Hamburger, or a
            :func:`kctx.layers.context_block` name in its place (``"none"``: the
            decoder without it, the paper's ablation; ``"ham_nmf"``, ``"self_attention"``...).

    Returns:
        (B, H/8, W/8, num_classes) logits at stage 2's resolution.
    """
    levels = features[1:]
    reference = levels[0]
    resized = [reference] + [
        ResizeToMatch(name=keras_name(f"decode_head.resize{i}"))([level, reference])
        for i, level in enumerate(levels[1:], start=3)]
    x = keras.layers.Concatenate(name=keras_name("decode_head.concat"))(resized)
    x = _conv_gn_relu(x, ham_channels, "decode_head.squeeze", norm_groups)
    if context is None:
        options = dict(OFFICIAL_VARIANTS["light"], rank=rank, norm_groups=norm_groups, seed=0)
        options.update(ham_options or {})
        x = Hamburger(**options, name=keras_name("decode_head.hamburger"))(x)
    else:
        x = context_block(context, recipe="segmentation", channels=ham_channels,
                          name=keras_name("decode_head.context"), **(ham_options or {}))(x)
    x = _conv_gn_relu(x, channels, "decode_head.align", norm_groups)
    x = keras.layers.SpatialDropout2D(dropout_rate,
                                      name=keras_name("decode_head.dropout"))(x)
    return keras.layers.Conv2D(num_classes, 1, name=keras_name("decode_head.conv_seg"))(x)


def segnext(variant="t", num_classes=150, weights=None, input_shape=(None, None, 3),
            channels=None, ham_channels=None, rank=None, dropout_rate=0.1, context=None,
            size_divisor=SIZE_DIVISOR, value_range=(0.0, 255.0), backbone_options=None,
            ham_options=None, synchronized_batch_norm=False, name=None):
    """SegNeXt: MSCAN + LightHamHead, from RGB images (0–255) to logits at their size.

    The model holds the official inference pipeline: ImageNet normalisation (mean
    123.675 / 116.28 / 103.53, std 58.395 / 57.12 / 57.375 on RGB 0–255), zero padding of the
    normalised image to multiples of ``size_divisor`` (32), the network, and the
    logits resized bilinearly to the padded size with the padding cut off — mmseg's
    whole-image inference (``test_cfg=dict(mode='whole')``). At any H and W.

    Args:
        variant: ``"t"``, ``"s"``, ``"b"`` or ``"l"`` (4.3 / 13.9 / 27.6 / 48.9 M
            parameters with 150 classes), or ``None`` with ``backbone_options``
            (``embed_dims``, ``depths``, ``mlp_ratios``), ``channels`` and
            ``ham_channels``.
        num_classes: 150 for ADE20K, 19 for Cityscapes.
        weights: ``None``, a checkpoint or a ``.weights.h5`` (see
            :func:`kctx.convert.load_segnext_weights`): an mmseg SegNeXt checkpoint (ADE20K,
            Cityscapes), the original repository's layout (``.mlp.dwconv.dwconv.*``),
            an MSCAN ImageNet checkpoint (the backbone only; the head keeps its
            initialisation). PyTorch is not needed and nothing pickled is executed.
        input_shape: (H, W, 3); H and W may be None.
        channels: the head's output width (the variant's by default:
            :data:`HEAD_CHANNELS`).
        ham_channels: the Hamburger's width d (the variant's by default).
        rank: r of the NMF; default 16 (mmseg's configs), or 64 when ``weights`` is
            an original-repository checkpoint of variant B or L (its configs' r).
        dropout_rate: the head's channel dropout.
        context: ``None``: the official Hamburger; or a
            :func:`kctx.layers.context_block` name in its place (``"none"`` is the
            paper's decoder ablation without it). Official checkpoints need ``None``.
        size_divisor: padding multiple of whole-image inference (1: none).
        value_range: (low, high) of the input images: (0, 255) as the official
            pipeline; (-1, 1) for kctx's segmentation datasets.
        backbone_options: other :func:`mscan` arguments (``drop_path_rate``, ...).
        ham_options: other :class:`kctx.layers.Hamburger` arguments.
        synchronized_batch_norm: SyncBN in the backbone.
        name: the model's name (default ``"segnext_<variant>"``).

    Returns:
        A functional ``keras.Model``: (B, H, W, 3) RGB 0–255 → float32 logits
        (B, H, W, num_classes); its ``backbone`` layer is the :func:`mscan` model.

    Examples:
        >>> model = segnext("t", num_classes=19)
        >>> tuple(model(keras.ops.zeros((1, 70, 90, 3))).shape)
        (1, 70, 90, 19)

    Reference:
        Guo et al., "SegNeXt: Rethinking Convolutional Attention Design for Semantic
        Segmentation", NeurIPS 2022 — Sec. 3.2 (decoder), Tab. 1; Geng et al., "Is
        Attention Better Than Matrix Decomposition?", ICLR 2021 (the Hamburger).
    """
    check_positive_int("num_classes", num_classes)
    if variant is None and (channels is None or ham_channels is None):
        raise ValueError("`variant=None` needs `channels` and `ham_channels`. Received: "
                         f"channels={channels!r}, ham_channels={ham_channels!r}")
    if variant is not None:
        check_choice("variant", variant, tuple(MSCAN_VARIANTS))
    channels = channels or HEAD_CHANNELS[variant]
    ham_channels = ham_channels or HEAD_CHANNELS[variant]
    if weights is not None:
        weights = read_checkpoint(weights)  # once: the layout may choose r
    if rank is None:
        rank = RANK
        if variant is not None and isinstance(weights, dict) and \
                checkpoint_layout(weights) == "original":
            rank = ORIGINAL_RANK[variant]
    backbone = mscan(variant, input_shape=input_shape, name="backbone",
                     synchronized_batch_norm=synchronized_batch_norm,
                     **(backbone_options or {}))
    inputs = keras.Input(input_shape, name="images")
    x = torchvision_normalization(value_range, name="normalize")(inputs)
    x = PadToMultiple(size_divisor, name="pad")(x)
    features = backbone(x)
    logits = light_ham_head(features, num_classes, channels, ham_channels, rank, dropout_rate,
                            ham_options=ham_options, context=context)
    logits = UpsampleLogits(size_divisor, name="upsample", dtype="float32")([logits, inputs])
    model = keras.Model(inputs, logits, name=name or f"segnext_{variant or 'custom'}")
    if weights is not None:
        load_segnext_weights(model, weights, variants=MSCAN_VARIANTS)
    return model



def mscan_classifier(variant="t", num_classes=1000, weights=None, input_shape=(None, None, 3),
                     value_range=(0.0, 255.0), dropout_rate=0.0, backbone_options=None,
                     synchronized_batch_norm=False, name=None):
    """MSCAN as an image classifier: the ImageNet model SegNeXt's backbones are pretrained as.

    The images are normalised as ImageNet's (mean 123.675 / 116.28 / 103.53, std 58.395 /
    57.12 / 57.375 on RGB 0–255), the :func:`mscan` backbone's last stage (after its
    LayerNorm, ``norm4``) is averaged over the positions, and a linear ``head`` gives the
    logits: the classifier of the Visual Attention Network that MSCAN's ImageNet training
    follows (``x.mean(dim=1)`` then ``nn.Linear``), whose ``head.weight`` and ``head.bias``
    the official MSCAN ImageNet checkpoints hold. Its ``backbone`` layer is what
    :func:`segnext` and ``segmentation.train --backbone-weights`` take from a ``.keras``
    file of it: pretrain here, then segment.

    Args:
        variant: ``"t"``, ``"s"``, ``"b"``, ``"l"`` or ``None`` with ``backbone_options``
            (``embed_dims``, ``depths``, ``mlp_ratios``).
        num_classes: logits per image (1000 for the ImageNet checkpoints).
        weights: ``None``, an MSCAN ImageNet checkpoint (``.pth``: the backbone and the
            ``head``; read without PyTorch), a checkpoint of the backbone alone or of a
            SegNeXt segmentor (the backbone; the head keeps its initialisation), or a Keras
            ``.weights.h5`` / ``.keras`` file (:func:`kctx.convert.load_segnext_weights`).
        input_shape: (H, W, 3); H and W may be None.
        value_range: (low, high) of the input images: (0, 255) as the official pipeline;
            (-1, 1) for kctx's embedded datasets.
        dropout_rate: dropout before the head (0 in VAN's classifier).
        backbone_options: other :func:`mscan` arguments (``drop_path_rate``, ...).
        synchronized_batch_norm: SyncBN in the backbone.
        name: the model's name (default ``"mscan_<variant>_classifier"``).

    Returns:
        A functional ``keras.Model``: (B, H, W, 3) → float32 logits (B, num_classes).

    Examples:
        >>> model = mscan_classifier("t", num_classes=10, input_shape=(64, 64, 3))
        >>> tuple(model(keras.ops.zeros((2, 64, 64, 3))).shape)
        (2, 10)
        >>> [tuple(f.shape[1:]) for f in model.get_layer("backbone").outputs]
        [(16, 16, 32), (8, 8, 64), (4, 4, 160), (2, 2, 256)]

    Reference:
        Guo, Lu, Hou, Liu, Cheng, Hu. "SegNeXt: Rethinking Convolutional Attention Design
        for Semantic Segmentation", NeurIPS 2022 — Sec. 4.1 (ImageNet pretraining); Guo,
        Lu, Liu, Cheng, Hu. "Visual Attention Network", CVMJ 2023 (the classifier head).
    """
    check_positive_int("num_classes", num_classes)
    if weights is not None:
        weights = read_checkpoint(weights)
    backbone = mscan(variant, input_shape=input_shape, name="backbone",
                     synchronized_batch_norm=synchronized_batch_norm,
                     **(backbone_options or {}))
    inputs = keras.Input(input_shape, name="images")
    x = torchvision_normalization(value_range, name="normalize")(inputs)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(backbone(x)[-1])
    x = keras.layers.Dropout(dropout_rate, name="head_drop")(x)
    logits = keras.layers.Dense(num_classes, name="head", dtype="float32")(x)
    model = keras.Model(inputs, logits, name=name or f"mscan_{variant or 'custom'}_classifier")
    if weights is not None:
        load_segnext_weights(model, weights, variants=MSCAN_VARIANTS)
    return model
