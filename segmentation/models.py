"""Segmenters: HamNet-style dilated ResNets with a context head, and SegNeXt.

The backbone is :func:`kctx.models.dilated_resnet`: torchvision's ResNet-50 /
-101 (v1.5 bottlenecks) with its last stages dilated instead of strided,
DeepLab style, for output stride 8 or 16, which loads torchvision's ImageNet
weights (the initialisation of HamNet's and DeepLab's backbones). Images in
[-1, 1] are mapped to torchvision's ImageNet normalisation inside the model
before the backbone. The head follows Geng et al. (ICLR 2021), Appendix E.3:
3×3 conv-BN-ReLU to 512 channels, the context block (Hamburger, d = 512,
r = 64, K = 6 by default, or any name of :func:`kctx.layers.context_block`),
3×3 conv-BN-ReLU to 256, dropout 0.1, a 1×1 classifier and bilinear upsampling
to the input size. ``context="aspp"`` swaps the head for DeepLabV3's ASPP as
the comparison.

``mscan_t`` / ``_s`` / ``_b`` / ``_l`` backbones give SegNeXt instead
(:func:`kctx.models.segnext`: MSCAN and the LightHamHead, on the same [-1, 1] images),
with SegNeXt's own Hamburger (context ``ham_nmf_light``) or any context block in its
place.
"""

import keras
from keras import ops

from kctx.convert.segnext import load_segnext_weights
from kctx.layers import ResizeToMatch, check_context_block, context_block
from kctx.layers.pytorch_style import batch_norm
from kctx.models.resnet import dilated_resnet, torchvision_normalization
from kctx.models.segnext import MSCAN_VARIANTS, segnext
from kctx.profile import Window, register_receptive_field_rule
from kctx.validation import check_choice, check_positive_int

# Backbone names -> kctx.models.dilated_resnet arguments.
BACKBONES = {
    "resnet50": {"depth": 50},
    "resnet101": {"depth": 101},
    # Small enough for CPU runs on 64×64 inputs: one block per stage, 1/4 width.
    "resnet_tiny": {"depth": 14, "width": 16},
}
# SegNeXt backbone names -> kctx.models.segnext variants.
MSCAN_BACKBONES = {"mscan_t": "t", "mscan_s": "s", "mscan_b": "b", "mscan_l": "l"}
BACKBONE_NAMES = (*BACKBONES, *MSCAN_BACKBONES)
# The context name of SegNeXt's own head: the official Hamburger, as HamNet's
# ham_nmf_light block configures it (kctx.layers.OFFICIAL_VARIANTS["light"]).
SEGNEXT_CONTEXT = "ham_nmf_light"
HAMNET_HEAD_CHANNELS = 512
IMAGE_RANGE = (-1.0, 1.0)  # segmentation.data's images


@keras.saving.register_keras_serializable(package="kctx")
class AtrousConv2D(keras.layers.Layer):
    """A 3×3 convolution with dilation ``rate`` and zero "same" padding, without bias.

    Equal to ``Conv2D(filters, 3, dilation_rate=rate, padding="same")``, but
    when the rate reaches the feature map's (static) height and width, every
    tap except the centre reads padding, so the layer computes the 1×1
    convolution with the centre weights instead. TensorFlow implements
    dilation by space-to-batch, whose cost grows with rate², which made
    DeepLab's rates 12/24/36 on small maps the slowest part of a segmenter.

    Args:
        filters: output channels.
        rate: dilation rate r.
        kernel_initializer: for the (3, 3, C_in, filters) kernel.

    Call arguments:
        inputs: (B, H, W, C_in).

    Example:

    >>> layer = AtrousConv2D(16, rate=12)
    >>> tuple(layer(keras.ops.ones((2, 8, 8, 32))).shape)
    (2, 8, 8, 16)

    Reference:
        Chen et al., "Rethinking Atrous Convolution for Semantic Image
        Segmentation" (DeepLabV3), 2017, Sec. 3.1: y[i] = Σ_k x[i + r·k] w[k],
        and Sec. 3.3 on rates close to the feature map size degenerating to
        1×1 filters.
    """

    def __init__(self, filters, rate, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        check_positive_int("filters", filters)
        check_positive_int("rate", rate)
        self.filters, self.rate = filters, rate
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        self.kernel = self.add_weight(name="kernel", shape=(3, 3, input_shape[-1], self.filters),
                                      initializer=self.kernel_initializer)

    def call(self, inputs):
        height, width = inputs.shape[1], inputs.shape[2]
        kernel = ops.cast(self.kernel, inputs.dtype)
        if height is not None and width is not None and self.rate >= max(height, width):
            return ops.einsum("bhwc,cf->bhwf", inputs, kernel[1, 1])
        return ops.conv(inputs, kernel, padding="same", dilation_rate=self.rate)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.filters,)

    def get_config(self):
        config = super().get_config()
        config.update({"filters": self.filters, "rate": self.rate,
                       "kernel_initializer": keras.initializers.serialize(self.kernel_initializer)})
        return config


def _atrous_receptive_field(layer, input_size):
    """kctx.profile's receptive-field rule of :class:`AtrousConv2D`: a "same" 3×3 window
    with dilation ``rate``, or the 1×1 centre tap it computes once the rate reaches the
    (static) map's height and width (DeepLabV3, Sec. 3.3)."""
    height, width = input_size
    if height is not None and width is not None and layer.rate >= max(height, width):
        return Window((1, 1))
    return Window((3, 3), (1, 1), (layer.rate, layer.rate), "same")


register_receptive_field_rule(AtrousConv2D, _atrous_receptive_field)


def _conv_norm_relu(x, filters, kernel_size, name, synchronized):
    x = keras.layers.Conv2D(filters, kernel_size, padding="same", use_bias=False,
                            name=f"{name}_conv")(x)
    x = batch_norm(f"{name}_norm", synchronized)(x)
    return keras.layers.ReLU(name=f"{name}_relu")(x)


def _ham_head(features, context, context_kwargs, head_channels, synchronized):
    x = _conv_norm_relu(features, head_channels, 3, "head_squeeze", synchronized)
    # The "segmentation" recipe: HamNet's r = 64, K = 6, seeded (reproducible inference).
    x = context_block(context, recipe="segmentation", channels=head_channels, name="context",
                      **(context_kwargs or {}))(x)
    return _conv_norm_relu(x, 256, 3, "head_align", synchronized)


def _aspp_head(features, output_stride, synchronized, channels=256):
    rates = (6, 12, 18) if output_stride == 16 else (12, 24, 36)
    branches = [_conv_norm_relu(features, channels, 1, "aspp_1x1", synchronized)]
    for rate in rates:
        x = AtrousConv2D(channels, rate, name=f"aspp_rate{rate}_conv")(features)
        x = batch_norm(f"aspp_rate{rate}_norm", synchronized)(x)
        branches.append(keras.layers.ReLU(name=f"aspp_rate{rate}_relu")(x))
    pooled = keras.layers.GlobalAveragePooling2D(keepdims=True, name="aspp_pool")(features)
    pooled = _conv_norm_relu(pooled, channels, 1, "aspp_pool_proj", synchronized)
    branches.append(ResizeToMatch(name="aspp_pool_resize")([pooled, features]))
    x = keras.layers.Concatenate(name="aspp_concat")(branches)
    return _conv_norm_relu(x, channels, 1, "aspp_project", synchronized)


HEADS = ("aspp",)


def segmenter(backbone="resnet50", output_stride=8, context="ham_nmf", num_classes=21,
              input_shape=(None, None, 3), context_kwargs=None, head_channels=512,
              dropout_rate=0.1, synchronized_batch_norm=False, backbone_weights=None,
              backbone_options=None, name=None):
    """A semantic segmenter: backbone → context head → per-pixel logits at input size.

    With a dilated ResNet backbone the images, RGB in [-1, 1] (:mod:`segmentation.data`),
    are first mapped to torchvision's ImageNet normalisation ((x + 1) / 2 minus the
    ImageNet mean, over its std: the layer ``input_normalization``), the input that
    :func:`kctx.models.dilated_resnet` and its torchvision weights expect; the same
    whether the backbone starts from ImageNet weights or from scratch. With an
    ``mscan_*`` backbone it is :func:`kctx.models.segnext` on [-1, 1] images (the same
    normalisation inside, padding to multiples of 32, the LightHamHead).

    Args:
        backbone: a key of ``BACKBONES`` (``"resnet50"``, ``"resnet101"``,
            ``"resnet_tiny"``) or of ``MSCAN_BACKBONES`` (``"mscan_t"`` ... ``"mscan_l"``).
        output_stride: 8 or 16 (8 for SegNeXt, whose head decodes at 1/8).
        context: ``"aspp"`` (DeepLabV3 head) or any
            :func:`kctx.layers.context_block` name (``"ham_nmf"`` default,
            ``"ham_cd"``, ``"ham_vq"``, ``"self_attention"``, ``"kao_kv"``,
            ``"none"``...), which sits between the head's two 3×3 convs. For SegNeXt,
            ``"ham_nmf_light"`` (:data:`SEGNEXT_CONTEXT`) is its official Hamburger
            (``decode_head-hamburger``: official checkpoints load) and any other block
            takes its place in the LightHamHead (``"none"``: the decoder without it).
        num_classes: logits per pixel.
        input_shape: (H, W, 3); H and W may be None (multi-scale evaluation).
        context_kwargs: extra arguments of the context block (for hams the
            defaults are r = 64, K = 6 and seed 0; d is the head width); for SegNeXt's
            Hamburger, :class:`kctx.layers.Hamburger` arguments over the official ones.
        head_channels: width of the head's first conv, the context block's d
            (512 in the paper; None: 512); the ASPP branches get half of it (DeepLabV3's
            256). For SegNeXt the LightHamHead's ``channels`` and ``ham_channels``
            (None: the variant's).
        dropout_rate: before the classifier (0.1 in the paper and SegNeXt).
        synchronized_batch_norm: all-reduce batch statistics across replicas.
        backbone_weights: weights of the ``backbone`` sub-model: a torchvision
            ResNet-50 / -101 checkpoint (``.pth``, e.g. torchvision's ImageNet
            ``resnet101-63fe2227.pth``; :func:`kctx.convert.load_torchvision_resnet_weights`),
            for SegNeXt an MSCAN ImageNet or SegNeXt ``.pth`` (its backbone;
            :func:`kctx.convert.load_segnext_weights`), or a Keras ``.weights.h5`` of
            the backbone. None: random initialisation.
        backbone_options: other arguments of the backbone (:func:`kctx.models.mscan`'s
            ``embed_dims``, ``depths``, ``mlp_ratios``, ``drop_path_rate``;
            :func:`kctx.models.dilated_resnet`'s ``depth``, ``width``).
        name: the model's name.

    Returns:
        A functional ``keras.Model`` mapping (B, H, W, 3) images to float32
        (B, H, W, num_classes) logits.

    Example:

    >>> model = segmenter("mscan_t", 8, "ham_nmf_light", num_classes=11)
    >>> tuple(model(keras.ops.zeros((1, 64, 64, 3))).shape)
    (1, 64, 64, 11)

    Reference:
        Geng et al., "Is Attention Better Than Matrix Decomposition?", ICLR
        2021, Appendix E.3; Guo et al., "SegNeXt: Rethinking Convolutional Attention
        Design for Semantic Segmentation", NeurIPS 2022.
    """
    check_choice("backbone", backbone, BACKBONE_NAMES)
    check_context_block(context, also=HEADS)
    check_positive_int("num_classes", num_classes)
    if head_channels is not None:
        check_positive_int("head_channels", head_channels)
    if backbone in MSCAN_BACKBONES:
        return _segnext(backbone, output_stride, context, num_classes, input_shape,
                        context_kwargs, head_channels, dropout_rate, synchronized_batch_norm,
                        backbone_weights, backbone_options, name)
    head_channels = head_channels or HAMNET_HEAD_CHANNELS
    features_model = dilated_resnet(output_stride=output_stride, weights=backbone_weights or None,
                                    input_shape=input_shape,
                                    synchronized_batch_norm=synchronized_batch_norm,
                                    name="backbone",
                                    **{**BACKBONES[backbone], **(backbone_options or {})})
    inputs = keras.Input(input_shape, name="images")
    normalized = torchvision_normalization(IMAGE_RANGE, name="input_normalization")(inputs)
    features = features_model(normalized)
    if context == "aspp":  # 256 branches for the paper's 512-wide Ham head: half its width
        x = _aspp_head(features, output_stride, synchronized_batch_norm, head_channels // 2)
    else:
        x = _ham_head(features, context, context_kwargs, head_channels, synchronized_batch_norm)
    x = keras.layers.Dropout(dropout_rate, name="head_dropout")(x)
    x = keras.layers.Conv2D(num_classes, 1, name="classifier")(x)
    logits = ResizeToMatch(name="upsample", dtype="float32")([x, inputs])
    return keras.Model(inputs, logits, name=name or f"{backbone}_os{output_stride}_{context}")


def _segnext(backbone, output_stride, context, num_classes, input_shape, context_kwargs,
             head_channels, dropout_rate, synchronized, backbone_weights, backbone_options,
             name):
    if output_stride != 8 or context in HEADS:
        raise ValueError(f"SegNeXt ({backbone}) decodes at output stride 8 with a context "
                         f"block (e.g. {SEGNEXT_CONTEXT!r}). Received: "
                         f"output_stride={output_stride}, context={context!r}")
    variant = MSCAN_BACKBONES[backbone]
    official = context == SEGNEXT_CONTEXT
    model = segnext(variant, num_classes, input_shape=input_shape, channels=head_channels,
                    ham_channels=head_channels, dropout_rate=dropout_rate,
                    context=None if official else context, value_range=IMAGE_RANGE,
                    backbone_options=backbone_options, ham_options=context_kwargs,
                    synchronized_batch_norm=synchronized,
                    name=name or f"segnext_{variant}" + ("" if official else f"_{context}"))
    if backbone_weights:
        load_segnext_weights(model.get_layer("backbone"), backbone_weights,
                             variants=MSCAN_VARIANTS)
    return model
