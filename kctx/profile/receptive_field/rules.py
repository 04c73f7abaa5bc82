"""What each layer does to a receptive field: the rule registry and the Keras / kctx rules.

A rule is ``rule(layer, input_size) -> result``: ``input_size`` is the (height, width) of
the layer's (first) input, entries None when unknown. :func:`register_receptive_field_rule`
files it under a layer class, and :func:`receptive_field_rule` finds the rule of a layer
by walking its class's MRO (the most specific registered class wins, so subclasses follow
their base's rule until they register their own). A rule returns a :class:`Window`,
``"pointwise"`` or ``"global"``; kctx's own rules also return :data:`STATISTICS`,
:class:`Resize`, :class:`Upsample`, :class:`ResizeLike`, :class:`Pad`,
:class:`PadToMultipleOf` or :class:`Unsupported`. The rules registered here:

- **Windows**: Conv2D, DepthwiseConv2D, SeparableConv2D, MaxPooling2D, AveragePooling2D
  and kctx's :class:`~kctx.models.PaddedMaxPooling2D` (integer ``padding``), read from
  their ``kernel_size`` / ``pool_size``, ``strides``, ``dilation_rate`` and ``padding``
  (:func:`window_of`; layers of unknown class that name their attributes that way get
  the same Window). Each adds RF += (k − 1)·d·jump and multiplies jump by its stride (k
  the kernel, d the dilation). The count ignores the borders: taps that read padding
  still count, so the RF may exceed the image. Conv2DTranspose and 1-D / 3-D windows are
  refused.
- **Merges** (Add, Multiply, Concatenate on channels, ...): the union of the inputs' RF
  boxes (the max of their RFs when they share a centre); element-wise keras ops applied
  to symbolic tensors (:data:`ELEMENTWISE_OPS`) too.
- **Resizes** back to a finer grid (kctx's ``ResizeToMatch``, SegNeXt's
  ``UpsampleLogits``, UpSampling2D, Resizing): the RF stays the coarse input's; the
  jump becomes the fine grid's and the centre follows the half-pixel mapping. Bilinear
  interpolation reads two coarse neighbours per axis, so a fine position's support can
  be up to one coarse jump wider: not counted.
- **Padding / cropping** layers shift the grid, pointwise layers (activations, batch
  norm in inference, dropout, Dense on channels, LayerScale, ...) change nothing.
- **Global layers** — anything that mixes all positions: kctx's context blocks
  (:class:`~kctx.layers.Hamburger`, self-attention, non-local, Kronecker attention,
  LatentGNN, Poly-NL, PSF attention, KANet attention modules), GlobalAverage/MaxPooling,
  MultiHeadAttention, Flatten, Softmax over positions — make every later RF *global*
  (the whole input). :func:`register_global_layer` adds classes.
- **Normalisation statistics** over positions (GroupNormalization, LayerNormalization
  over spatial axes) are treated as position-wise (they rescale channels, they move no
  content) but listed: their gradients do reach every pixel.
- **Layout changes** (Reshape, Permute, 1-D / 3-D padding, cropping and upsampling, Dot)
  are refused.

Layers of a class without a rule are the walk's business
(:func:`~kctx.profile.theoretical_receptive_field`): a Window read from their
attributes, else an error for a spatial kernel, else position-wise.

Reference:
    Araujo, Norris, Sim, "Computing Receptive Fields of Convolutional Neural Networks",
    Distill 2019 (the per-layer kernel, stride, dilation and padding of the recurrence).
"""

import dataclasses

import keras

from kctx.layers import (AttnModule, AttnSkipModule, EfficientNonLocal2D, Hamburger,
                         LatentGNN2D, LayerScale, NonLocal2D, PolyNL, PSFAttention,
                         ResizeToMatch, SelfAttention2D)
from kctx.layers.attention import GlobalAttention2D
from kctx.models import PaddedMaxPooling2D
from kctx.models.segnext import PadToMultiple, UpsampleLogits

__all__ = ["ELEMENTWISE_OPS", "GLOBAL", "POINTWISE", "STATISTICS", "Pad", "PadToMultipleOf",
           "Resize", "ResizeLike", "Unsupported", "Upsample", "Window", "is_global_layer",
           "receptive_field_rule", "register_global_layer", "register_receptive_field_rule",
           "spatial_kernel", "window_of"]

POINTWISE, GLOBAL = "pointwise", "global"
# Position-wise, but with statistics over all positions (listed in the result).
STATISTICS = "statistics"


@dataclasses.dataclass(frozen=True)
class Window:
    """A sliding window along (height, width): what a conv or pooling layer does to the RF.

    Attributes:
        kernel: (kh, kw) taps.
        strides: (sh, sw).
        dilation: (dh, dw).
        padding: ``"same"`` / ``"valid"`` (TensorFlow's conventions: "same" puts the odd
            row of padding at the bottom / right) or an int, rows and columns on every side.
    """

    kernel: tuple
    strides: tuple = (1, 1)
    dilation: tuple = (1, 1)
    padding: object = "valid"


@dataclasses.dataclass(frozen=True)
class Resize:
    """A resize of the (first) input to ``size`` (height, width) with half-pixel centres
    (bilinear or nearest): the coarse RF on the fine grid."""

    size: tuple


@dataclasses.dataclass(frozen=True)
class Upsample:
    """An upsampling by integer ``factor`` (fh, fw) with half-pixel centres."""

    factor: tuple


@dataclasses.dataclass(frozen=True)
class ResizeLike:
    """A resize of ``inputs[0]`` to the size of ``inputs[1]`` (the reference).

    Attributes:
        size_divisor: None, or resize to the reference's size padded to a multiple of this,
            then crop the padding (SegNeXt's ``UpsampleLogits``).
    """

    size_divisor: int | None = None


@dataclasses.dataclass(frozen=True)
class Pad:
    """Rows and columns added ((top, bottom), (left, right)); negative ones cropped."""

    padding: tuple


@dataclasses.dataclass(frozen=True)
class PadToMultipleOf:
    """Padding at the bottom and right to a multiple of ``size_divisor``: the grid stays."""

    size_divisor: int


@dataclasses.dataclass(frozen=True)
class Unsupported:
    """A layer the walk refuses, and why: ``reason`` completes "Layer NAME (Class) ...",
    e.g. "changes the spatial layout: not handled by the receptive-field walk."."""

    reason: str


_RULES = {}  # class or "module.QualName" -> rule(layer, input_size)


def register_receptive_field_rule(layer_class, rule):
    """Teach :func:`theoretical_receptive_field` a layer class.

    Args:
        layer_class: a layer class (instances of subclasses match too), or its
            ``"module.QualName"`` string (no import of the defining module needed).
        rule: ``rule(layer, input_size) -> Window | "pointwise" | "global"``, where
            ``input_size`` is the (height, width) of the layer's input (entries None when
            unknown).

    Examples:
        >>> register_receptive_field_rule(MyConv, lambda layer, size: Window((5, 5)))  # doctest: +SKIP
    """
    if not isinstance(layer_class, (type, str)):
        raise TypeError(f"`layer_class` must be a class or a \"module.QualName\" string. "
                        f"Received: layer_class={layer_class!r}")
    if not callable(rule):
        raise TypeError(f"`rule` must be callable. Received: rule={rule!r}")
    _RULES[layer_class] = rule


def receptive_field_rule(layer):
    """The rule registered for ``type(layer)`` or its nearest registered base class (by
    class, then by ``"module.QualName"``, along the MRO), or None."""
    for cls in type(layer).__mro__:
        if cls in _RULES:
            return _RULES[cls]
        key = f"{cls.__module__}.{cls.__qualname__}"
        if key in _RULES:
            return _RULES[key]
    return None


def _pointwise(layer, input_size):
    return POINTWISE


def _global(layer, input_size):
    return GLOBAL


def register_global_layer(layer_class):
    """Mark a layer class as mixing all positions (a global-context block)."""
    if not isinstance(layer_class, type):
        raise TypeError(f"`layer_class` must be a class. Received: {layer_class!r}")
    register_receptive_field_rule(layer_class, _global)
    return layer_class


def is_global_layer(layer):
    """Whether ``layer``'s class is registered as mixing all positions (a context block,
    global pooling, ...)."""
    return receptive_field_rule(layer) is _global


# ---------------------------------------------------------------------------
# Windows.
# ---------------------------------------------------------------------------


def _pair(value, name, layer):
    if isinstance(value, int):
        return (value, value)
    value = tuple(value)
    if len(value) == 1:
        return (value[0], value[0])
    if len(value) != 2:
        raise ValueError(f"Layer {layer.name!r} ({type(layer).__name__}): the receptive-field "
                         f"walk handles 2-D windows only; its `{name}` is {value!r}.")
    return value


def window_of(layer):
    """The :class:`Window` of a layer with ``kernel_size`` (or ``pool_size``) and
    ``strides`` attributes (``dilation_rate``, ``padding``: "same", "valid" or an int on
    every side), or None without them."""
    if getattr(layer, "data_format", "channels_last") == "channels_first":
        raise ValueError(f"Layer {layer.name!r} ({type(layer).__name__}) is channels_first: the "
                         "receptive-field walk handles channels_last models.")
    if hasattr(layer, "kernel_size") and hasattr(layer, "strides"):
        kernel = layer.kernel_size
    elif hasattr(layer, "pool_size") and hasattr(layer, "strides"):
        kernel = layer.pool_size
    else:
        return None
    strides = layer.strides if layer.strides is not None else kernel
    padding = getattr(layer, "padding", "valid")
    if isinstance(padding, str):
        padding = padding.lower()
        if padding not in ("same", "valid"):
            raise ValueError(f"Layer {layer.name!r} ({type(layer).__name__}): padding "
                             f"{padding!r} is not handled (same, valid or an int).")
    elif not isinstance(padding, int):
        raise ValueError(f"Layer {layer.name!r} ({type(layer).__name__}): padding "
                         f"{padding!r} is not handled (same, valid or an int).")
    return Window(_pair(kernel, "kernel_size", layer), _pair(strides, "strides", layer),
                  _pair(getattr(layer, "dilation_rate", 1), "dilation_rate", layer), padding)


def spatial_kernel(layer):
    """The shape of a weight of ``layer`` that looks like a spatial kernel ((kh, kw, ...)
    with kh·kw > 1), or None."""
    for weight in getattr(layer, "weights", ()):
        shape = tuple(weight.shape)
        if len(shape) >= 4 and shape[0] * shape[1] > 1:
            return shape
    return None


def _window(layer, input_size):
    # Keras's conv and pooling layers; PaddedMaxPooling2D as torch.nn.MaxPool2d(k, s, p).
    return window_of(layer)


def _transposed(layer, input_size):
    return Unsupported("is a transposed convolution: not handled by the receptive-field "
                       "walk.")


# ---------------------------------------------------------------------------
# Merges, resizes, padding and layout changes.
# ---------------------------------------------------------------------------


def _merge(layer, input_size):
    axis = getattr(layer, "axis", -1)
    if axis not in (-1, 3):
        return Unsupported(f"concatenates along axis {axis}: only the channel axis is "
                           "handled.")
    return POINTWISE


def _resize_to_match(layer, input_size):
    return ResizeLike()


def _upsample_logits(layer, input_size):
    # Resized to the padded reference size, then cropped (mmseg EncoderDecoder.predict).
    return ResizeLike(layer.size_divisor)


def _upsampling(layer, input_size):
    return Upsample(_pair(layer.size, "size", layer))


def _resizing(layer, input_size):
    if getattr(layer, "crop_to_aspect_ratio", False) or \
            getattr(layer, "pad_to_aspect_ratio", False):
        return Unsupported("crops or pads to an aspect ratio: not handled by the "
                           "receptive-field walk.")
    return Resize((layer.height, layer.width))


def _zero_padding(layer, input_size):
    return Pad(tuple(tuple(p) for p in layer.padding))


def _cropping(layer, input_size):
    return Pad(tuple((-top, -bottom) for top, bottom in layer.cropping))


def _pad_to_multiple(layer, input_size):
    return PadToMultipleOf(layer.size_divisor)


def _layout_change(layer, input_size):
    return Unsupported("changes the spatial layout: not handled by the receptive-field walk.")


# ---------------------------------------------------------------------------
# Position-wise layers, statistics and softmax.
# ---------------------------------------------------------------------------


def _group_normalization(layer, input_size):
    return STATISTICS


def _normalization(layer, input_size):
    # LayerNormalization / UnitNormalization: over the channels position-wise, over
    # spatial axes statistics of all positions.
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    return STATISTICS if any(a in (1, 2, -2, -3) for a in axes) else POINTWISE


def _softmax(layer, input_size):
    return POINTWISE if layer.axis in (-1, 3) else GLOBAL


# keras.ops applied to symbolic tensors (x + y, ops.relu(x), ...): element-wise.
ELEMENTWISE_OPS = frozenset({
    "Add", "Subtract", "Multiply", "Divide", "TrueDivide", "Maximum", "Minimum", "Power",
    "Negative", "Abs", "Absolute", "Exp", "Log", "Sqrt", "Square", "Reciprocal", "Sign",
    "Tanh", "Sigmoid", "Relu", "Relu6", "Gelu", "Silu", "Swish", "Softplus", "Softsign",
    "HardSigmoid", "HardSilu", "LeakyRelu", "Elu", "Selu", "Mish", "Erf", "Cast", "Clip",
    "Where"})

_KERAS_RULES = (
    (("Conv2D", "DepthwiseConv2D", "SeparableConv2D", "MaxPooling2D", "AveragePooling2D"),
     _window),
    (("Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose"), _transposed),
    (("Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum", "Concatenate"), _merge),
    (("UpSampling2D",), _upsampling),
    (("Resizing",), _resizing),
    (("ZeroPadding2D",), _zero_padding),
    (("Cropping2D",), _cropping),
    (("Reshape", "Permute", "Cropping1D", "Cropping3D", "ZeroPadding1D", "ZeroPadding3D",
      "UpSampling1D", "UpSampling3D", "Dot"), _layout_change),
    (("GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalAveragePooling3D",
      "GlobalMaxPooling1D", "GlobalMaxPooling2D", "GlobalMaxPooling3D", "MultiHeadAttention",
      "GroupQueryAttention", "Attention", "AdditiveAttention", "Flatten"), _global),
    (("InputLayer", "Activation", "ReLU", "LeakyReLU", "PReLU", "ELU", "BatchNormalization",
      "Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "GaussianNoise",
      "GaussianDropout", "AlphaDropout", "Rescaling", "Normalization", "Dense", "Identity",
      "Masking", "ActivityRegularization"), _pointwise),
    (("LayerNormalization", "UnitNormalization"), _normalization),
    (("GroupNormalization",), _group_normalization),
    (("Softmax",), _softmax),
)
_KCTX_RULES = (
    ((PaddedMaxPooling2D,), _window),
    ((Hamburger, GlobalAttention2D, NonLocal2D, EfficientNonLocal2D, SelfAttention2D,
      LatentGNN2D, PolyNL, PSFAttention, AttnModule, AttnSkipModule), _global),
    ((LayerScale,), _pointwise),
    ((ResizeToMatch,), _resize_to_match),
    ((UpsampleLogits,), _upsample_logits),
    ((PadToMultiple,), _pad_to_multiple),
)

for _names, _rule in _KERAS_RULES:
    for _name in _names:
        if hasattr(keras.layers, _name):  # (some exist only in newer Keras versions)
            register_receptive_field_rule(getattr(keras.layers, _name), _rule)
for _classes, _rule in _KCTX_RULES:
    for _class in _classes:
        register_receptive_field_rule(_class, _rule)
del _names, _name, _classes, _class, _rule
