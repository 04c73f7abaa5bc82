"""A dilated ResNet (v1.5 bottlenecks) that computes what torchvision's computes, and its weights.

:func:`dilated_resnet` builds torchvision's ``resnet50`` / ``resnet101`` up to
``layer4`` (no average pooling, no classifier) with
``replace_stride_with_dilation=[False, True, True]`` (output stride 8) or
``[False, False, True]`` (16), DeepLab style, channels-last.
:func:`load_torchvision_weights` fills it from a torchvision ImageNet
checkpoint (``resnet50-11ad3fa6.pth``, ``resnet101-cd907fc2.pth``, ...), read
without PyTorch by :mod:`kctx.checkpoints`: the standard initialisation of
DeepLab's and HamNet's backbones.

Equal computation, not only equal layout:

- Strided convolutions pad like PyTorch, ``padding`` rows and columns on every
  side (an explicit ``ZeroPadding2D`` and a ``"valid"`` convolution), not with
  TensorFlow's ``"same"``, which pads one more at the bottom and right than at
  the top and left for even sizes. Stride-1 convolutions use ``"same"``, which
  is symmetric there (d·(k − 1) in total for dilation d).
- The stem's max-pooling ignores its padding, as ``torch.nn.MaxPool2d(3, 2,
  padding=1)``, which pads with −∞ (:class:`PaddedMaxPooling2D`).
- Dilations follow torchvision's ``_make_layer``: a dilated stage's first block
  keeps the previous dilation, its other blocks use the new one.
- Batch normalisation with ε = 1e-5 (and momentum 0.1 in PyTorch's convention).

Inputs are what torchvision's ImageNet models take: RGB in [0, 1] minus the
ImageNet mean (0.485, 0.456, 0.406), divided by the std (0.229, 0.224, 0.225)
(:data:`IMAGENET_MEAN`, :data:`IMAGENET_STD`); :func:`torchvision_normalization`
is a layer that does it for images in any value range.
"""

import os
import re

import keras
import numpy as np
from keras import ops

from kctx.ops.replicas import synchronized_batch_norm
from kctx.validation import check_choice, check_positive_int

# Bottleneck blocks per stage (layer1..layer4) for each depth: torchvision's ResNet-50 and
# -101, and a one-block-per-stage ResNet-14 (for small from-scratch models).
RESNET_BLOCKS = {14: (1, 1, 1, 1), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}
OUTPUT_STRIDES = (8, 16)
BOTTLENECK_EXPANSION = 4
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
BATCH_NORM_EPSILON = 1e-5
# Checkpoint tensors that have no counterpart in the backbone: the ImageNet classifier
# (``fc.weight``, ``fc.bias``) and batch norm's step counters.
SKIPPED_TORCH_KEYS = re.compile(r"^fc\.(weight|bias)$|\.num_batches_tracked$")


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
    one per-channel ``keras.layers.Rescaling`` (x · scale + offset: no weights,
    serialisable, exported as constants).

    Args:
        value_range: (low, high) of the images, e.g. (-1, 1) for the
            segmentation workflow's images or (0, 255).
        name: the layer's name.

    Returns:
        A ``keras.layers.Rescaling`` with a scale and an offset per channel
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
    return keras.layers.Rescaling(scale, offset, name=name)


def _norm(name, synchronized):
    # PyTorch's momentum 0.1 (new = 0.9·old + 0.1·batch) is Keras' momentum 0.9.
    return keras.layers.BatchNormalization(momentum=0.9, epsilon=BATCH_NORM_EPSILON,
                                           synchronized=synchronized_batch_norm(synchronized),
                                           name=name)


def _conv(x, filters, kernel_size, strides, dilation, name):
    """A bias-free convolution padded as PyTorch's ``Conv2d(padding=dilation·(k − 1) / 2)``."""
    padding = dilation * (kernel_size - 1) // 2
    if strides > 1 and padding:  # "same" would pad asymmetrically for even sizes
        x = keras.layers.ZeroPadding2D(padding, name=name.replace("_conv", "_pad"))(x)
    return keras.layers.Conv2D(filters, kernel_size, strides=strides,
                               padding="same" if strides == 1 else "valid",
                               dilation_rate=dilation, use_bias=False, name=name)(x)


def _bottleneck(x, filters, strides, dilation, name, synchronized):
    """torchvision's ``Bottleneck``: 1×1, 3×3 (stride, dilation), 1×1 ×4, identity or 1×1."""
    out_channels = filters * BOTTLENECK_EXPANSION
    shortcut = x
    if strides > 1 or x.shape[-1] != out_channels:
        shortcut = _conv(x, out_channels, 1, strides, 1, f"{name}_shortcut_conv")
        shortcut = _norm(f"{name}_shortcut_norm", synchronized)(shortcut)
    y = _conv(x, filters, 1, 1, 1, f"{name}_1_conv")
    y = keras.layers.ReLU(name=f"{name}_1_relu")(_norm(f"{name}_1_norm", synchronized)(y))
    y = _conv(y, filters, 3, strides, dilation, f"{name}_2_conv")
    y = keras.layers.ReLU(name=f"{name}_2_relu")(_norm(f"{name}_2_norm", synchronized)(y))
    y = _conv(y, out_channels, 1, 1, 1, f"{name}_3_conv")
    y = _norm(f"{name}_3_norm", synchronized)(y)
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
            of names to arrays; see :func:`load_torchvision_weights`) or a
            Keras ``.weights.h5`` file of this model.
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
    x = keras.layers.ReLU(name="stem_relu")(_norm("stem_norm", synchronized_batch_norm)(x))
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
        load_weights(model, weights)
    return model


def load_weights(model, weights):
    """Fill a :func:`dilated_resnet` from a torchvision checkpoint or a ``.weights.h5`` file.

    Args:
        model: a model built by :func:`dilated_resnet`.
        weights: a path ending in ``.weights.h5`` (``model.load_weights``),
            ``.pth`` or ``.pt`` (a torchvision state dict), or a mapping of
            checkpoint names to arrays (:func:`load_torchvision_weights`).

    Returns:
        ``model``.
    """
    if isinstance(weights, (str, os.PathLike)):
        path = os.fspath(weights)
        if path.endswith(".weights.h5"):
            model.load_weights(path)
            return model
        if not path.endswith((".pth", ".pt")):
            raise ValueError("`weights` must be None, a torchvision checkpoint (.pth, .pt), a "
                             f"Keras .weights.h5 file or a state dict. Received: weights={path!r}")
    load_torchvision_weights(model, weights)
    return model


_CONV = re.compile(r"^res(\d)_block(\d+)_(\d)_(conv|norm)$")
_SHORTCUT = re.compile(r"^res(\d)_block(\d+)_shortcut_(conv|norm)$")
_TORCH_BLOCK = re.compile(r"^layer(\d)\.(\d+)\.")


def _torch_prefix(layer_name):
    """torchvision's module name of one of :func:`dilated_resnet`'s layers (None: no weights)."""
    if layer_name in ("stem_conv", "stem_norm"):
        return {"stem_conv": "conv1", "stem_norm": "bn1"}[layer_name]
    match = _CONV.match(layer_name)
    if match:
        stage, block, index, kind = match.groups()
        return f"layer{int(stage) - 1}.{block}.{'conv' if kind == 'conv' else 'bn'}{index}"
    match = _SHORTCUT.match(layer_name)
    if match:
        stage, block, kind = match.groups()
        return f"layer{int(stage) - 1}.{block}.downsample.{0 if kind == 'conv' else 1}"
    return None


def _blocks_per_stage(names, pattern, stage_offset):
    counts = {}
    for name in names:
        match = pattern.match(name)
        if match:
            stage, block = int(match.group(1)) + stage_offset, int(match.group(2))
            counts[stage] = max(counts.get(stage, 0), block + 1)
    return tuple(counts.get(stage, 0) for stage in range(1, 5))


def _depth_name(blocks):
    return f"ResNet-{3 * sum(blocks) + 2}"


def torchvision_weight_map(model):
    """Where each weight of a :func:`dilated_resnet` comes from in a torchvision state dict.

    Args:
        model: a model built by :func:`dilated_resnet`.

    Returns:
        A dict from checkpoint names (``"conv1.weight"``,
        ``"layer3.5.bn2.running_var"``, ...) to the model's variables.
        Conv kernels are ``.weight`` (OIHW there, HWIO here); batch norm's
        γ, β, moving mean and moving variance are ``.weight``, ``.bias``,
        ``.running_mean`` and ``.running_var``.

    Raises:
        ValueError: a layer with weights that torchvision's ResNet has no
            counterpart of (names listed).
    """
    mapping, unknown = {}, []
    for layer in model.layers:
        if not layer.weights:
            continue
        prefix = _torch_prefix(layer.name)
        if prefix is None:
            unknown.append(layer.name)
        elif isinstance(layer, keras.layers.Conv2D) and not layer.use_bias:
            mapping[f"{prefix}.weight"] = layer.kernel
        elif isinstance(layer, keras.layers.BatchNormalization) and layer.scale and layer.center:
            mapping.update({f"{prefix}.weight": layer.gamma, f"{prefix}.bias": layer.beta,
                            f"{prefix}.running_mean": layer.moving_mean,
                            f"{prefix}.running_var": layer.moving_variance})
        else:
            unknown.append(layer.name)
    if unknown:
        raise ValueError(f"Layers with no torchvision ResNet counterpart: {unknown}")
    return mapping


def load_torchvision_weights(model, checkpoint):
    """Copy a torchvision ResNet state dict into a :func:`dilated_resnet`, checking every name.

    Conv kernels are transposed from OIHW to HWIO; batch norm's ``weight``,
    ``bias``, ``running_mean`` and ``running_var`` become γ, β, the moving mean
    and the moving variance. ``fc.weight`` and ``fc.bias`` (the ImageNet
    classifier, which the backbone does not have) and the ``num_batches_tracked``
    counters are skipped. Nothing is assigned unless everything matches.

    Args:
        model: a model built by :func:`dilated_resnet` (any output stride:
            dilation changes no weight).
        checkpoint: a torchvision ``.pth`` path (read without PyTorch by
            :func:`kctx.checkpoints.torch_state_dict`) or a state dict
            (a mapping of names to arrays).

    Returns:
        ``{"loaded": [...], "skipped": [...]}``: the checkpoint's names that
        were copied and those skipped, in the checkpoint's order.

    Raises:
        ValueError: the checkpoint's blocks per stage are not the model's
            (e.g. ResNet-50 weights for a ResNet-101); or, listing the names,
            checkpoint tensors left unused, model weights left unfilled, or
            shapes that differ.

    Example::

        model = dilated_resnet(50, 8)
        load_torchvision_weights(model, "resnet50-11ad3fa6.pth")
    """
    from kctx.checkpoints import torch_state_dict

    state = torch_state_dict(checkpoint)
    mapping = torchvision_weight_map(model)
    expected_blocks = _blocks_per_stage((layer.name for layer in model.layers), _CONV, -1)
    found_blocks = _blocks_per_stage(state, _TORCH_BLOCK, 0)
    if any(found_blocks) and found_blocks != expected_blocks:
        raise ValueError(
            f"The checkpoint is a {_depth_name(found_blocks)} (blocks per stage {found_blocks}) "
            f"but the model {model.name!r} is a {_depth_name(expected_blocks)} (blocks per "
            f"stage {expected_blocks}): build the model with the checkpoint's depth.")
    skipped = [key for key in state if SKIPPED_TORCH_KEYS.search(key)]
    unused = [key for key in state if key not in mapping and key not in skipped]
    missing = [key for key in mapping if key not in state]
    values, mismatched = {}, []
    for key, variable in mapping.items():
        if key not in state:
            continue
        value = np.asarray(state[key])
        if value.ndim == 4:  # OIHW -> HWIO
            value = value.transpose(2, 3, 1, 0)
        if tuple(value.shape) != tuple(variable.shape):
            mismatched.append(f"{key}: checkpoint {tuple(np.shape(state[key]))} -> "
                              f"{tuple(value.shape)}, model {tuple(variable.shape)} "
                              f"({variable.path})")
        values[key] = value
    problems = []
    if unused:
        problems.append(f"checkpoint tensors not used by the model: {unused}")
    if missing:
        problems.append(f"model weights missing from the checkpoint: {missing}")
    if mismatched:
        problems.append(f"shapes that differ: {mismatched}")
    if problems:
        raise ValueError(f"Cannot load the torchvision checkpoint into {model.name!r}: "
                         + "; ".join(problems))
    for key, variable in mapping.items():
        variable.assign(np.ascontiguousarray(values[key], dtype=variable.dtype))
    return {"loaded": [key for key in state if key in mapping], "skipped": skipped}
