"""A dilated ResNet (v1.5 bottlenecks) that computes what torchvision's computes.

:func:`dilated_resnet` builds torchvision's ``resnet50`` / ``resnet101`` up to
``layer4`` (no average pooling, no classifier) with
``replace_stride_with_dilation=[False, True, True]`` (output stride 8) or
``[False, False, True]`` (16), DeepLab style, channels-last.
:func:`kctx.convert.load_torchvision_resnet_weights` fills it from a torchvision
ImageNet checkpoint (``resnet50-11ad3fa6.pth``, ``resnet101-cd907fc2.pth``, ...), read
without PyTorch by :mod:`kctx.checkpoints`: the standard initialisation of
DeepLab's and HamNet's backbones.

Equal computation, not only equal layout:

- Strided convolutions pad like PyTorch, ``padding`` rows and columns on every
  side (an explicit ``ZeroPadding2D`` and a ``"valid"`` convolution), not with
  TensorFlow's ``"same"``, which pads one more at the bottom and right than at
  the top and left for even sizes. Stride-1 convolutions use ``"same"``, which
  is symmetric there (d·(k − 1) in total for dilation d)
  (:func:`kctx.layers.pytorch_style.padded_conv2d`).
- The stem's max-pooling ignores its padding, as ``torch.nn.MaxPool2d(3, 2,
  padding=1)``, which pads with −∞ (:class:`PaddedMaxPooling2D`).
- Dilations follow torchvision's ``_make_layer``: a dilated stage's first block
  keeps the previous dilation, its other blocks use the new one.
- Batch normalisation with ε = 1e-5 (and momentum 0.1 in PyTorch's convention:
  :func:`kctx.layers.pytorch_style.batch_norm`).

Inputs are what torchvision's ImageNet models take: RGB in [0, 1] minus the
ImageNet mean (0.485, 0.456, 0.406), divided by the std (0.229, 0.224, 0.225)
(:data:`IMAGENET_MEAN`, :data:`IMAGENET_STD`); :func:`torchvision_normalization`
is a layer that does it for images in any value range.
"""

import os

import keras
from keras import ops

from kctx.convert.torchvision_resnet import load_torchvision_resnet_weights
from kctx.layers.pytorch_style import batch_norm, padded_conv2d
from kctx.layers.rescaling import ChannelRescaling
from kctx.validation import check_choice, check_positive_int

# Bottleneck blocks per stage (layer1..layer4) for each depth: torchvision's ResNet-50 and
# -101, and a one-block-per-stage ResNet-14 (for small from-scratch models).
RESNET_BLOCKS = {14: (1, 1, 1, 1), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}
OUTPUT_STRIDES = (8, 16)
BOTTLENECK_EXPANSION = 4
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@keras.saving.register_keras_serializable(package="kctx")
class PaddedMaxPooling2D(keras.layers.Layer):
    """Max-pooling with ``padding`` rows and columns on every side that never win the max.

    Equal to ``torch.nn.MaxPool2d(pool_size, strides, padding)`` (which pads
    with −∞, ``ceil_mode=False``) on channels-last inputs: the output has
    ⌊(H + 2·padding − pool_size) / strides⌋ + 1 rows. Keras' ``"same"`` pooling
    also ignores its padding but puts it at the bottom and right only for even
    sizes. The padding here repeats the edge rows and columns, which gives the
    same maxima as −∞ (every window that holds a padded value holds the edge
    value it copies, as ``padding <= pool_size // 2``) and keeps every value
    finite, so quantised and exported models see the input's own range.

    Args:
        pool_size: the window's side k.
        strides: the step between windows.
        padding: rows and columns added on every side, at most ``pool_size // 2``.
        **kwargs: base layer arguments (``name``, ``dtype``).

    Call arguments:
        inputs: (B, H, W, C); H and W may be unknown until run time.

    Examples:
        >>> x = keras.ops.reshape(keras.ops.arange(16.0), (1, 4, 4, 1))
        >>> keras.ops.convert_to_numpy(PaddedMaxPooling2D(3, 2, 1)(x))[0, :, :, 0]
        array([[ 5.,  7.],
               [13., 15.]], dtype=float32)

    Reference:
        He et al., "Deep Residual Learning for Image Recognition", CVPR 2016
        (the 3×3/2 max-pooling of the stem); torchvision's
        ``torchvision/models/resnet.py`` (``nn.MaxPool2d(3, 2, padding=1)``).
    """

    def __init__(self, pool_size=3, strides=2, padding=1, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("pool_size", pool_size)
        check_positive_int("strides", strides)
        if isinstance(padding, bool) or not isinstance(padding, int) or not \
                0 <= padding <= pool_size // 2:
            raise ValueError(f"`padding` must be an integer in [0, pool_size // 2] "
                             f"(pool_size={pool_size}). Received: padding={padding!r}")
        self.pool_size, self.strides, self.padding = pool_size, strides, padding

    def call(self, inputs):
        x, p = inputs, self.padding
        if p:
            x = ops.concatenate([x[:, :1]] * p + [x] + [x[:, -1:]] * p, axis=1)
            x = ops.concatenate([x[:, :, :1]] * p + [x] + [x[:, :, -1:]] * p, axis=2)
        return ops.max_pool(x, self.pool_size, self.strides, padding="valid")

    def _size(self, size):
        if size is None:
            return None
        return (size + 2 * self.padding - self.pool_size) // self.strides + 1

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self._size(input_shape[1]), self._size(input_shape[2]),
                input_shape[3])

    def get_config(self):
        config = super().get_config()
        config.update({"pool_size": self.pool_size, "strides": self.strides,
                       "padding": self.padding})
        return config


def torchvision_normalization(value_range=(0.0, 1.0), name="torchvision_normalization"):
    """A layer mapping RGB images in ``value_range`` to torchvision's ImageNet input.

    (x − low) / (high − low) is RGB in [0, 1]; the layer returns
    ((x − low) / (high − low) − mean) / std with the ImageNet mean and std, as
    one per-channel ``kctx.layers.ChannelRescaling`` (a ``keras.layers.Rescaling``,
    x · scale + offset: no weights, serialisable, exported as constants).

    Args:
        value_range: (low, high) of the images, e.g. (-1, 1) for the
            segmentation workflow's images or (0, 255).
        name: the layer's name.

    Returns:
        A ``ChannelRescaling`` (``keras.layers.Rescaling``) with a scale and an offset per channel
        (3 channels, last axis).

    Examples:
        >>> layer = torchvision_normalization((0.0, 255.0))
        >>> x = keras.ops.convert_to_tensor([[[[123.675, 116.28, 103.53]]]])
        >>> [round(float(v), 4) for v in keras.ops.ravel(layer(x))]
        [0.0, 0.0, 0.0]

    Reference:
        torchvision's ImageNet weights ("transforms": ``Normalize(mean=[0.485,
        0.456, 0.406], std=[0.229, 0.224, 0.225])`` after scaling to [0, 1]).
    """
    low, high = (float(v) for v in value_range)
    if not high > low:
        raise ValueError(f"`value_range` must be (low, high) with high > low. "
                         f"Received: value_range={value_range!r}")
    scale = [1.0 / ((high - low) * s) for s in IMAGENET_STD]
    offset = [-(low + (high - low) * m) / ((high - low) * s)
              for m, s in zip(IMAGENET_MEAN, IMAGENET_STD)]
    return ChannelRescaling(scale, offset, name=name)


def _conv(x, filters, kernel_size, strides, dilation, name):
    """A bias-free convolution padded as PyTorch's ``Conv2d(padding=dilation·(k − 1) / 2)``."""
    return padded_conv2d(x, filters, kernel_size, name, name.replace("_conv", "_pad"),
                         strides=strides, dilation_rate=dilation, use_bias=False)


def _bottleneck(x, filters, strides, dilation, name, synchronized):
    """torchvision's ``Bottleneck``: 1×1, 3×3 (stride, dilation), 1×1 ×4, identity or 1×1."""
    out_channels = filters * BOTTLENECK_EXPANSION
    shortcut = x
    if strides > 1 or x.shape[-1] != out_channels:
        shortcut = _conv(x, out_channels, 1, strides, 1, f"{name}_shortcut_conv")
        shortcut = batch_norm(f"{name}_shortcut_norm", synchronized)(shortcut)
    y = _conv(x, filters, 1, 1, 1, f"{name}_1_conv")
    y = keras.layers.ReLU(name=f"{name}_1_relu")(batch_norm(f"{name}_1_norm", synchronized)(y))
    y = _conv(y, filters, 3, strides, dilation, f"{name}_2_conv")
    y = keras.layers.ReLU(name=f"{name}_2_relu")(batch_norm(f"{name}_2_norm", synchronized)(y))
    y = _conv(y, out_channels, 1, 1, 1, f"{name}_3_conv")
    y = batch_norm(f"{name}_3_norm", synchronized)(y)
    y = keras.layers.Add(name=f"{name}_add")([shortcut, y])
    return keras.layers.ReLU(name=f"{name}_out")(y)


def dilated_resnet(depth=50, output_stride=8, weights=None, input_shape=(None, None, 3),
                   synchronized_batch_norm=False, name=None, width=64):
    """torchvision's ResNet-50 / -101 up to ``layer4``, with its last stages dilated.

    Stem: 7×7/2 conv-BN-ReLU and 3×3/2 max-pooling (stride 4). Stages res2–res5
    (torchvision's ``layer1``–``layer4``) of bottleneck blocks with the stride
    on the 3×3 conv (ResNet v1.5) and a 1×1 conv-BN shortcut where the shape
    changes. At output stride 16, res5 runs at stride 1 with dilation 2; at 8,
    res4 and res5 run at stride 1 with dilations 2 and 4, where each dilated
    stage's first block keeps the previous dilation. This is
    ``torchvision.models.resnet50(replace_stride_with_dilation=[False, True,
    True])`` (8) or ``[False, False, True]`` (16) without ``avgpool`` and ``fc``:
    with the same weights it gives the same features (up to float32 rounding)
    on the same input, padding included (see the module's docstring).

    Args:
        depth: 50 or 101 (torchvision's (3, 4, 6, 3) and (3, 4, 23, 3) blocks
            per stage), or 14 (one block per stage, for small models trained
            from scratch).
        output_stride: 8 or 16, the input's size over the features'.
        weights: None (random initialisation), a torchvision checkpoint
            (``.pth`` / ``.pt``, e.g. torchvision's ImageNet
            ``resnet50-11ad3fa6.pth``, or a state dict already read, a mapping
            of names to arrays; see :func:`kctx.convert.load_torchvision_resnet_weights`)
            or a Keras ``.weights.h5`` file of this model.
        input_shape: (H, W, 3) of the normalised images; H and W may be None.
        synchronized_batch_norm: all-reduce batch statistics across replicas.
        name: the model's name (default ``resnet{depth}_os{output_stride}``).
        width: channels of the stem and of res2's bottlenecks, doubled at
            each later stage (64 for torchvision's models; the outputs have
            8 × 4 × width channels). ``depth=14, width=16`` is the segmentation
            workflow's ``resnet_tiny``.

    Returns:
        A functional ``keras.Model`` from (B, H, W, 3) ImageNet-normalised RGB
        images (RGB in [0, 1], minus :data:`IMAGENET_MEAN`, over
        :data:`IMAGENET_STD`; :func:`torchvision_normalization`) to res5
        features (B, ⌈H / os⌉, ⌈W / os⌉, 32 × width), i.e. 2048 channels.

    Examples:
        >>> model = dilated_resnet(50, output_stride=16, input_shape=(64, 64, 3))
        >>> model.output_shape
        (None, 4, 4, 2048)

        With torchvision's ImageNet weights, on images in [-1, 1]::

            backbone = dilated_resnet(101, 8, weights="resnet101-63fe2227.pth")
            images = keras.Input((None, None, 3))
            features = backbone(torchvision_normalization((-1, 1))(images))

    Reference:
        He et al., "Deep Residual Learning for Image Recognition", CVPR 2016;
        Chen et al., "Rethinking Atrous Convolution for Semantic Image
        Segmentation" (DeepLabV3), 2017, Sec. 3.2 (output stride 16 / 8 by
        dilating the last blocks); Geng et al., "Is Attention Better Than
        Matrix Decomposition?", ICLR 2021, Appendix E.3 (an ImageNet-pretrained
        dilated ResNet as the segmentation backbone).
    """
    check_choice("depth", depth, tuple(RESNET_BLOCKS))
    check_choice("output_stride", output_stride, OUTPUT_STRIDES)
    check_positive_int("width", width)
    blocks = RESNET_BLOCKS[depth]
    inputs = keras.Input(input_shape, name="images")
    x = _conv(inputs, width, 7, 2, 1, "stem_conv")
    x = keras.layers.ReLU(name="stem_relu")(batch_norm("stem_norm", synchronized_batch_norm)(x))
    x = PaddedMaxPooling2D(3, 2, 1, name="stem_pool")(x)
    stride, dilation = 4, 1
    for stage, count in enumerate(blocks, start=2):
        filters = width * 2 ** (stage - 2)
        strides = 1 if stage == 2 else 2
        previous = dilation
        if strides == 2 and stride >= output_stride:  # replace the stride with dilation
            strides, dilation = 1, dilation * 2
        stride *= strides
        for block in range(count):
            x = _bottleneck(x, filters, strides if block == 0 else 1,
                            previous if block == 0 else dilation, f"res{stage}_block{block}",
                            synchronized_batch_norm)
    model = keras.Model(inputs, x, name=name or f"resnet{depth}_os{output_stride}")
    if weights is not None:
        _load_weights(model, weights)
    return model


def _load_weights(model, weights):
    """``model.load_weights`` for a ``.weights.h5`` path, else a torchvision checkpoint."""
    if isinstance(weights, (str, os.PathLike)):
        path = os.fspath(weights)
        if path.endswith(".weights.h5"):
            model.load_weights(path)
            return
        if not path.endswith((".pth", ".pt")):
            raise ValueError("`weights` must be None, a torchvision checkpoint (.pth, .pt), a "
                             f"Keras .weights.h5 file or a state dict. Received: weights={path!r}")
    load_torchvision_resnet_weights(model, weights)
