"""HamNet-style segmenters: a dilated ResNet, a context head, bilinear upsampling.

The backbone is ResNet v1.5 (bottleneck blocks, stride on the 3×3 conv, as
keras-hub's and torchvision's ResNets) with its last stages dilated instead of
strided, DeepLab style, for output stride 8 or 16. keras-hub's
``ResNetBackbone`` cannot dilate, so the blocks are built here with the same
layout. The head follows Geng et al. (ICLR 2021), Appendix E.3: 3×3
conv-BN-ReLU to 512 channels, the context block (Hamburger, d = 512, r = 64,
K = 6 by default, or any name of :func:`kctx.layers.context_block`), 3×3
conv-BN-ReLU to 256, dropout 0.1, a 1×1 classifier and bilinear upsampling to
the input size. ``context="aspp"`` swaps the head for DeepLabV3's ASPP as the
comparison.
"""

import keras
from keras import ops

from kctx.layers import check_context_block, context_block
from kctx.validation import check_choice, check_positive_int

# (bottleneck filters per stage, blocks per stage, stem filters).
BACKBONES = {
    "resnet50": ((64, 128, 256, 512), (3, 4, 6, 3), 64),
    "resnet101": ((64, 128, 256, 512), (3, 4, 23, 3), 64),
    # Small enough for CPU runs on 64×64 inputs: one block per stage, 1/4 width.
    "resnet_tiny": ((16, 32, 64, 128), (1, 1, 1, 1), 16),
}
OUTPUT_STRIDES = (8, 16)
BOTTLENECK_EXPANSION = 4


@keras.saving.register_keras_serializable(package="kctx")
class ResizeToMatch(keras.layers.Layer):
    """Bilinearly resize ``inputs[0]`` to the height and width of ``inputs[1]``.

    Spatial sizes may be unknown until run time (multi-scale evaluation feeds
    several sizes to one model). Computes in the layer's dtype
    (``dtype="float32"`` for logits under mixed precision).

    Args:
        **kwargs: base layer arguments (``name``, ``dtype``).

    Call arguments:
        inputs: ``[x, reference]``, both channels-last.

    Example:

    >>> x, reference = keras.ops.ones((2, 3, 5, 4)), keras.ops.zeros((2, 12, 20, 3))
    >>> tuple(ResizeToMatch()([x, reference]).shape)
    (2, 12, 20, 4)

    Reference:
        Geng et al., "Is Attention Better Than Matrix Decomposition?", ICLR
        2021, Appendix E.3 (bilinear upsampling of the logits to the input).
    """

    def call(self, inputs):
        x, reference = inputs
        x = ops.cast(x, self.compute_dtype)
        size = ops.shape(reference)[1:3]
        if keras.backend.backend() == "tensorflow" and not all(isinstance(s, int) for s in size):
            # keras.ops.image.resize checks `size[0] <= 0` in Python, which a size known
            # only at run time fails when traced without AutoGraph (``model.export``):
            # call the TensorFlow op that Keras calls.
            import tensorflow as tf

            return ops.cast(tf.image.resize(x, tf.stack(size), method="bilinear"), x.dtype)
        return ops.image.resize(x, size, interpolation="bilinear")

    def compute_output_shape(self, input_shapes):
        x, reference = input_shapes
        return (x[0], reference[1], reference[2], x[-1])


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


def _norm(name, synchronized):
    return keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5, synchronized=synchronized,
                                           name=name)


def _conv_norm_relu(x, filters, kernel_size, name, synchronized):
    x = keras.layers.Conv2D(filters, kernel_size, padding="same", use_bias=False,
                            name=f"{name}_conv")(x)
    x = _norm(f"{name}_norm", synchronized)(x)
    return keras.layers.ReLU(name=f"{name}_relu")(x)


def _bottleneck(x, filters, strides, dilation, name, synchronized):
    out_channels = filters * BOTTLENECK_EXPANSION
    shortcut = x
    if strides > 1 or x.shape[-1] != out_channels:
        shortcut = keras.layers.Conv2D(out_channels, 1, strides=strides, use_bias=False,
                                       name=f"{name}_shortcut_conv")(x)
        shortcut = _norm(f"{name}_shortcut_norm", synchronized)(shortcut)
    y = _conv_norm_relu(x, filters, 1, f"{name}_1", synchronized)
    y = keras.layers.Conv2D(filters, 3, strides=strides, padding="same", dilation_rate=dilation,
                            use_bias=False, name=f"{name}_2_conv")(y)
    y = keras.layers.ReLU(name=f"{name}_2_relu")(_norm(f"{name}_2_norm", synchronized)(y))
    y = keras.layers.Conv2D(out_channels, 1, use_bias=False, name=f"{name}_3_conv")(y)
    y = _norm(f"{name}_3_norm", synchronized)(y)
    y = keras.layers.Add(name=f"{name}_add")([shortcut, y])
    return keras.layers.ReLU(name=f"{name}_out")(y)


def dilated_resnet(backbone="resnet50", output_stride=8, input_shape=(None, None, 3),
                   synchronized_batch_norm=False, name=None):
    """A ResNet v1.5 feature extractor whose last stages are dilated.

    Stem 7×7/2 conv and 3×3/2 max-pool (stride 4), then stages res2–res5 of
    bottleneck blocks. At output stride 16, res5 runs at stride 1 with
    dilation 2; at 8, res4 and res5 run at stride 1 with dilations 2 and 4.
    A dilated stage's first block keeps the previous dilation (torchvision's
    ``replace_stride_with_dilation``).

    Args:
        backbone: ``"resnet50"``, ``"resnet101"`` or ``"resnet_tiny"``.
        output_stride: 8 or 16.
        input_shape: (H, W, 3); H and W may be None.
        synchronized_batch_norm: all-reduce batch statistics across replicas.

    Returns:
        A functional ``keras.Model`` from images to res5 features
        (H/os, W/os, 4 × last stage filters).

    Reference:
        He et al., "Deep Residual Learning", CVPR 2016; Chen et al.,
        "Rethinking Atrous Convolution" (DeepLabV3), 2017.
    """
    check_choice("backbone", backbone, tuple(BACKBONES))
    check_choice("output_stride", output_stride, OUTPUT_STRIDES)
    filters, blocks, stem = BACKBONES[backbone]
    inputs = keras.Input(input_shape, name="images")
    x = keras.layers.Conv2D(stem, 7, strides=2, padding="same", use_bias=False,
                            name="stem_conv")(inputs)
    x = keras.layers.ReLU(name="stem_relu")(_norm("stem_norm", synchronized_batch_norm)(x))
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="stem_pool")(x)
    stride, dilation = 4, 1
    for stage, (stage_filters, count) in enumerate(zip(filters, blocks), start=2):
        strides = 1 if stage == 2 else 2
        previous = dilation
        if strides == 2 and stride >= output_stride:
            strides, dilation = 1, dilation * 2
        stride *= strides
        for block in range(count):
            x = _bottleneck(x, stage_filters, strides if block == 0 else 1,
                            previous if block == 0 else dilation, f"res{stage}_block{block}",
                            synchronized_batch_norm)
    return keras.Model(inputs, x, name=name or f"{backbone}_os{output_stride}")


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
        x = _norm(f"aspp_rate{rate}_norm", synchronized)(x)
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
              name=None):
    """A semantic segmenter: dilated ResNet → context head → per-pixel logits at input size.

    Args:
        backbone: a key of ``BACKBONES``.
        output_stride: 8 or 16.
        context: ``"aspp"`` (DeepLabV3 head) or any
            :func:`kctx.layers.context_block` name (``"ham_nmf"`` default,
            ``"ham_cd"``, ``"ham_vq"``, ``"self_attention"``, ``"kao_kv"``,
            ``"none"``...), which sits between the head's two 3×3 convs.
        num_classes: logits per pixel.
        input_shape: (H, W, 3); H and W may be None (multi-scale evaluation).
        context_kwargs: extra arguments of the context block (for hams the
            defaults are r = 64, K = 6 and seed 0; d is the head width).
        head_channels: width of the head's first conv, the context block's d
            (512 in the paper); the ASPP branches get half of it (DeepLabV3's 256).
        dropout_rate: before the classifier (0.1 in the paper).
        synchronized_batch_norm: all-reduce batch statistics across replicas.
        backbone_weights: a ``.weights.h5`` file of the backbone (e.g.
            ImageNet-pretrained), loaded into the ``backbone`` sub-model.

    Returns:
        A functional ``keras.Model`` mapping (B, H, W, 3) images to float32
        (B, H, W, num_classes) logits.

    Reference:
        Geng et al., "Is Attention Better Than Matrix Decomposition?", ICLR
        2021, Appendix E.3.
    """
    check_context_block(context, also=HEADS)
    check_positive_int("num_classes", num_classes)
    check_positive_int("head_channels", head_channels)
    features_model = dilated_resnet(backbone, output_stride, input_shape,
                                    synchronized_batch_norm, name="backbone")
    if backbone_weights:
        features_model.load_weights(backbone_weights)
    inputs = keras.Input(input_shape, name="images")
    features = features_model(inputs)
    if context == "aspp":  # 256 branches for the paper's 512-wide Ham head: half its width
        x = _aspp_head(features, output_stride, synchronized_batch_norm, head_channels // 2)
    else:
        x = _ham_head(features, context, context_kwargs, head_channels, synchronized_batch_norm)
    x = keras.layers.Dropout(dropout_rate, name="head_dropout")(x)
    x = keras.layers.Conv2D(num_classes, 1, name="classifier")(x)
    logits = ResizeToMatch(name="upsample", dtype="float32")([x, inputs])
    return keras.Model(inputs, logits, name=name or f"{backbone}_os{output_stride}_{context}")
