"""Receptive fields of functional Keras models: theoretical and effective.

:func:`theoretical_receptive_field` walks the layer graph from the input to a layer's
output and counts, along each spatial axis, the input pixels that can reach one output
position (the receptive field, RF) and the input pixels between two neighbouring output
positions (the jump, or effective stride). What counts:

- **Windows**: every layer with ``kernel_size`` / ``strides`` (``dilation_rate``,
  ``padding``) — Conv2D, DepthwiseConv2D, SeparableConv2D and any convolution that
  names its attributes that way — or with ``pool_size`` / ``strides`` — MaxPooling2D,
  AveragePooling2D, kctx's :class:`~kctx.models.PaddedMaxPooling2D` (integer
  ``padding``) — and segmentation's ``AtrousConv2D`` (3×3, dilation ``rate``, which
  computes a 1×1 conv once ``rate`` reaches the map's side: then it adds nothing).
  Each adds RF += (k − 1)·d·jump and multiplies jump by its stride (k the kernel, d the
  dilation). The count ignores the borders: taps that read padding still count, so the
  RF may exceed the image. Conv2DTranspose and 1-D / 3-D windows are refused.
- **Merges** (Add, Multiply, Concatenate on channels, ...; element-wise keras ops): the
  union of the inputs' RF boxes (the max of their RFs when they share a centre).
- **Resizes** back to a finer grid (kctx's ``ResizeToMatch``, SegNeXt's
  ``UpsampleLogits``, UpSampling2D, Resizing): the RF stays the coarse input's; the
  jump becomes the fine grid's and the centre follows the half-pixel mapping. Bilinear
  interpolation reads two coarse neighbours per axis, so a fine position's support can
  be up to one coarse jump wider: not counted.
- **Padding / cropping** layers shift the grid, pointwise layers (activations, batch
  norm in inference, dropout, Dense on channels, LayerScale, ...) change nothing.
- **Nested functional models** (a backbone sub-model) are walked into.
- **Global layers** — anything that mixes all positions: kctx's context blocks
  (:class:`~kctx.layers.Hamburger`, self-attention, non-local, Kronecker attention,
  LatentGNN, Poly-NL, PSF attention, KANet attention modules), GlobalAverage/MaxPooling,
  MultiHeadAttention, Flatten — make every later RF *global* (the whole input); the
  result says so (``is_global``, ``global_layers``) and ``rf`` keeps counting the local
  (convolutional) path. :func:`register_global_layer` adds classes.
- **Normalisation statistics** over positions (GroupNormalization, LayerNormalization
  over spatial axes) are treated as position-wise (they rescale channels, they move no
  content) but listed in ``statistics_layers``: their gradients do reach every pixel.
- **Unknown layers** with a spatial kernel (a weight of shape (kh, kw, ...) with
  kh·kw > 1) raise a ValueError naming the layer; weight-free or 1×1 unknown layers are
  assumed position-wise and listed in ``assumed_pointwise``.
  :func:`register_receptive_field_rule` teaches the walk a layer class.

:func:`effective_receptive_field` measures the effective receptive field (ERF) of Luo
et al. (NeurIPS 2016): the gradient of the channel-summed feature at the centre position
of a layer's output with respect to the input images, in inference mode
(``training=False``), its absolute value summed over the input channels and averaged
over the images, and the radii (discs) and sides (centred squares) holding 50 / 90 / 95 %
of that mass around the centre position's input location.
"""

import dataclasses
import itertools
import math

import keras
import numpy as np

__all__ = ["EffectiveReceptiveField", "ReceptiveField", "Window", "effective_receptive_field",
           "register_global_layer", "register_receptive_field_rule",
           "theoretical_receptive_field"]

ERF_FRACTIONS = (0.5, 0.9, 0.95)
POINTWISE, GLOBAL = "pointwise", "global"


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


_RULES = {}          # class or "module.QualName" -> rule(layer, input_size)
_GLOBAL_CLASSES = []  # classes registered by register_global_layer


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
    if not callable(rule):
        raise TypeError(f"`rule` must be callable. Received: rule={rule!r}")
    _RULES[layer_class] = rule


def register_global_layer(layer_class):
    """Mark a layer class as mixing all positions (a global-context block)."""
    if not isinstance(layer_class, type):
        raise TypeError(f"`layer_class` must be a class. Received: {layer_class!r}")
    if layer_class not in _GLOBAL_CLASSES:
        _GLOBAL_CLASSES.append(layer_class)
    return layer_class


def _atrous_rule(layer, size):
    # segmentation.models.AtrousConv2D: a "same" 3×3 conv with dilation `rate`, computed as
    # the 1×1 centre tap once the rate reaches the (static) map's height and width.
    height, width = size
    if height is not None and width is not None and layer.rate >= max(height, width):
        return Window((1, 1))
    return Window((3, 3), (1, 1), (layer.rate, layer.rate), "same")


register_receptive_field_rule("segmentation.models.AtrousConv2D", _atrous_rule)


def _kctx_classes():
    """(global classes, pointwise classes, resize-to-reference classes, pad-to-multiple)
    of kctx, imported on first use."""
    from kctx.layers import (AttnModule, AttnSkipModule, EfficientNonLocal2D, Hamburger,
                             LatentGNN2D, NonLocal2D, PolyNL, PSFAttention, ResizeToMatch,
                             SelfAttention2D)
    from kctx.layers.attention import GlobalAttention2D
    from kctx.models.segnext import LayerScale, PadToMultiple, UpsampleLogits

    global_classes = (Hamburger, GlobalAttention2D, NonLocal2D, EfficientNonLocal2D,
                      SelfAttention2D, LatentGNN2D, PolyNL, PSFAttention, AttnModule,
                      AttnSkipModule)
    return global_classes, (LayerScale,), (ResizeToMatch, UpsampleLogits), PadToMultiple


_KERAS_GLOBAL = ("GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalAveragePooling3D",
                 "GlobalMaxPooling1D", "GlobalMaxPooling2D", "GlobalMaxPooling3D",
                 "MultiHeadAttention", "GroupQueryAttention", "Attention", "AdditiveAttention",
                 "Flatten")
# (LayerNormalization / UnitNormalization over the channels; over positions they are
# statistics layers, checked first.)
_KERAS_POINTWISE = ("InputLayer", "Activation", "ReLU", "LeakyReLU", "PReLU", "ELU",
                    "BatchNormalization", "LayerNormalization", "UnitNormalization", "Dropout",
                    "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D",
                    "GaussianNoise", "GaussianDropout", "AlphaDropout",
                    "Rescaling", "Normalization", "Dense", "Identity", "Masking",
                    "ActivityRegularization")
_KERAS_MERGES = ("Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum", "Concatenate")
# keras.ops applied to symbolic tensors (x + y, ops.relu(x), ...): element-wise.
_ELEMENTWISE_OPS = {"Add", "Subtract", "Multiply", "Divide", "TrueDivide", "Maximum", "Minimum",
                    "Power", "Negative", "Abs", "Absolute", "Exp", "Log", "Sqrt", "Square",
                    "Reciprocal", "Sign", "Tanh", "Sigmoid", "Relu", "Relu6", "Gelu", "Silu",
                    "Swish", "Softplus", "Softsign", "HardSigmoid", "HardSilu", "LeakyRelu",
                    "Elu", "Selu", "Mish", "Erf", "Cast", "Clip", "Where"}


def _is_global_layer(layer):
    """Whether ``layer`` mixes all positions (a context block, global pooling, ...)."""
    return isinstance(layer, tuple(_GLOBAL_CLASSES) + _kctx_classes()[0]) or \
        _keras_class(layer, _KERAS_GLOBAL)


def _keras_class(layer, names):
    return any(isinstance(layer, getattr(keras.layers, name)) for name in names
               if hasattr(keras.layers, name))


def _qualname(obj):
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _registered_rule(layer):
    for cls in type(layer).__mro__:
        if cls in _RULES:
            return _RULES[cls]
        key = f"{cls.__module__}.{cls.__qualname__}"
        if key in _RULES:
            return _RULES[key]
    return None


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


def _window_of(layer):
    """The Window of a layer with kernel_size / pool_size attributes, or None."""
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


def _spatial_kernel(layer):
    """The shape of a weight of ``layer`` that looks like a spatial kernel, or None."""
    for weight in getattr(layer, "weights", ()):
        shape = tuple(weight.shape)
        if len(shape) >= 4 and shape[0] * shape[1] > 1:
            return shape
    return None


def _statistics_over_positions(layer):
    if _keras_class(layer, ("GroupNormalization",)):
        return True
    if _keras_class(layer, ("LayerNormalization", "UnitNormalization")):
        axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
        return any(a in (1, 2, -2, -3) for a in axes)
    return False


# ---------------------------------------------------------------------------
# The walk.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _State:
    """What reaches one tensor, per axis (height, width)."""

    reach: tuple = ((0, 0), (0, 0))  # input pixels the RF reaches (before, after) the location
    jump: tuple = (1, 1)
    offset: tuple = (0.0, 0.0)  # input coordinate of position 0's location (None: unknown)
    size: tuple = (None, None)
    spatial: bool = True
    global_layers: frozenset = frozenset()
    assumed: frozenset = frozenset()
    statistics: frozenset = frozenset()

    @property
    def rf(self):
        return tuple(before + after + 1 for before, after in self.reach)

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


def _merge_notes(states):
    return {"global_layers": frozenset().union(*(s.global_layers for s in states)),
            "assumed": frozenset().union(*(s.assumed for s in states)),
            "statistics": frozenset().union(*(s.statistics for s in states))}


def _union(states, output_size):
    """Element-wise merge: the union of the inputs' RF boxes, located where the first
    (spatial) input's positions are."""
    notes = _merge_notes(states)
    spatial = [s for s in states if s.spatial]
    if not spatial:
        return states[0].replace(**notes)
    first = spatial[0]
    # Broadcasting: the output's size is the largest input's.
    largest = max(spatial, key=lambda s: tuple(-1 if v is None else v for v in s.size))
    reach = []
    for axis in range(2):
        location = first.offset[axis]
        known = location is not None and all(s.offset[axis] is not None for s in spatial) and \
            all(math.isclose(s.jump[axis], first.jump[axis]) for s in spatial)
        if known:
            reach.append((max(s.reach[axis][0] + location - s.offset[axis] for s in spatial),
                          max(s.reach[axis][1] + s.offset[axis] - location for s in spatial)))
        else:
            reach.append((max(s.reach[axis][0] for s in spatial),
                          max(s.reach[axis][1] for s in spatial)))
    size = tuple(o if o is not None else b for o, b in zip(output_size, largest.size))
    return first.replace(reach=tuple(reach), size=size, **notes)


def _apply_window(state, window, output_size):
    reach, jump, offset, size = [], [], [], []
    for axis in range(2):
        k, s, d = window.kernel[axis], window.strides[axis], window.dilation[axis]
        span = (k - 1) * d
        n = state.size[axis]
        if window.padding == "valid":
            before, out = 0, None if n is None else (n - span - 1) // s + 1
        elif window.padding == "same":
            if n is None:
                before, out = (span // 2 if s == 1 else None), None
            else:
                out = -(-n // s)
                before = max((out - 1) * s + span + 1 - n, 0) // 2
        else:
            before = window.padding
            out = None if n is None else (n + 2 * before - span - 1) // s + 1
        o = state.offset[axis]
        grow = span * state.jump[axis] / 2
        reach.append((state.reach[axis][0] + grow, state.reach[axis][1] + grow))
        jump.append(state.jump[axis] * s)
        offset.append(None if o is None or before is None
                      else o + state.jump[axis] * (span / 2 - before))
        size.append(out if out is not None else output_size[axis])
    return state.replace(reach=tuple(reach), jump=tuple(jump), offset=tuple(offset),
                         size=tuple(size))


def _resize(state, output_size, reference=None, resized_size=None):
    """Bilinear / nearest resize with half-pixel centres: the coarse RF, the fine grid.

    ``resized_size``: the size the input is resized to before a crop to ``output_size``
    (SegNeXt's UpsampleLogits); default ``output_size``."""
    resized_size = resized_size or output_size
    jump, offset, size = [], [], []
    for axis in range(2):
        n_in, n_out = state.size[axis], resized_size[axis]
        if n_in == 1 and reference is not None and reference.spatial:
            # One position (after global pooling) broadcast: the reference's grid.
            jump.append(reference.jump[axis])
            offset.append(reference.offset[axis])
        elif n_in is not None and n_out is not None:
            ratio = n_in / n_out
            jump.append(state.jump[axis] * ratio)
            o = state.offset[axis]
            offset.append(None if o is None else o + state.jump[axis] * (ratio - 1) / 2)
        elif reference is not None and reference.spatial:
            jump.append(reference.jump[axis])
            offset.append(None)
        else:
            raise ValueError("A resize whose input and output sizes are unknown: pass "
                             "`input_size` to theoretical_receptive_field.")
        size.append(output_size[axis] if output_size[axis] is not None
                    else (reference.size[axis] if reference is not None else None))
    notes = _merge_notes([state])
    return state.replace(jump=tuple(jump), offset=tuple(offset), size=tuple(size), **notes)


def _static_size(tensor):
    shape = tuple(tensor.shape)
    if len(shape) != 4:
        return None
    return (shape[1], shape[2])


class _Walker:
    """Receptive-field states of the tensors of a functional graph, computed on demand."""

    def __init__(self):
        self._kctx = _kctx_classes()

    def states(self, graph, input_states, targets, prefix=""):
        memo = {id(t): s for t, s in zip(graph.inputs, input_states)}
        for target in targets:
            self._fill(graph, target, memo, prefix)
        return [memo[id(t)] for t in targets], memo

    def _fill(self, graph, target, memo, prefix):
        stack = [target]
        while stack:
            tensor = stack[-1]
            if id(tensor) in memo:
                stack.pop()
                continue
            operation, node_index, _ = tensor._keras_history
            node = operation._inbound_nodes[node_index]
            if node.is_input:
                raise ValueError(f"{prefix}{operation.name}: an input of a graph that is not "
                                 "the model's input (is the model built?)")
            missing = [t for t in node.input_tensors if id(t) not in memo]
            if missing:
                stack.extend(missing)
                continue
            inputs = [memo[id(t)] for t in node.input_tensors]
            outputs = self._operation(operation, node, inputs, prefix)
            for output_tensor, state in zip(node.outputs, outputs):
                size = _static_size(output_tensor)
                if size is None and len(tuple(output_tensor.shape)) != 4:
                    state = state.replace(spatial=False, size=(None, None))
                elif size is not None:
                    state = state.replace(size=tuple(
                        v if v is not None else s for v, s in zip(state.size, size)))
                memo[id(output_tensor)] = state
            stack.pop()

    def _operation(self, op, node, inputs, prefix):
        outputs = node.outputs
        name = f"{prefix}{op.name}"
        graph = _graph_of(op)
        if graph is not None:
            states, _ = self.states(graph, inputs, graph.outputs, prefix=f"{name}/")
            return states
        _, pointwise_classes, resizes, pad_to_multiple = self._kctx
        first = inputs[0] if inputs else _State()
        out_size = _static_size(outputs[0]) or (None, None)
        if not isinstance(op, keras.layers.Layer):
            kind = type(op).__name__
            if type(op).__module__.startswith("keras.") and kind in _ELEMENTWISE_OPS:
                return [_union(inputs, out_size)]
            raise ValueError(f"Operation {name!r} ({_qualname(op)}) is not a layer the "
                             "receptive-field walk knows; wrap it in a layer and "
                             "register_receptive_field_rule it.")
        rule = _registered_rule(op)
        if rule is not None:
            return [self._from_rule(rule(op, first.size), first, inputs, name, out_size)]
        if _is_global_layer(op):
            return [self._global(first, inputs, name, out_size)]
        if _keras_class(op, ("Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose")):
            raise ValueError(f"Layer {name!r} ({type(op).__name__}): transposed convolutions "
                             "are not handled by the receptive-field walk.")
        if _keras_class(op, _KERAS_MERGES):
            axis = getattr(op, "axis", -1)
            if axis not in (-1, 3):
                raise ValueError(f"Layer {name!r} concatenates along axis {axis}: only the "
                                 "channel axis is handled.")
            return [_union(inputs, out_size)]
        if isinstance(op, resizes):
            x, reference = inputs
            resized = None
            if isinstance(op, resizes[1]) and all(v is not None for v in reference.size):
                divisor = op.size_divisor
                resized = tuple(-(-v // divisor) * divisor for v in reference.size)
            size = tuple(o if o is not None else r for o, r in zip(out_size, reference.size))
            return [_resize(x, size, reference, resized)]
        if _keras_class(op, ("UpSampling2D",)):
            factor = _pair(op.size, "size", op)
            size = tuple(o if o is not None else (None if n is None else n * f)
                         for o, n, f in zip(out_size, first.size, factor))
            if any(v is None for v in size):  # the grid from the factor alone
                return [first.replace(jump=tuple(j / f for j, f in zip(first.jump, factor)),
                                      offset=(None, None), size=size)]
            return [_resize(first, size)]
        if _keras_class(op, ("Resizing",)):
            if getattr(op, "crop_to_aspect_ratio", False) or \
                    getattr(op, "pad_to_aspect_ratio", False):
                raise ValueError(f"Layer {name!r} (Resizing) crops or pads to an aspect ratio: "
                                 "not handled by the receptive-field walk.")
            return [_resize(first, (op.height, op.width))]
        if _keras_class(op, ("ZeroPadding2D", "Cropping2D")):
            pads = op.padding if _keras_class(op, ("ZeroPadding2D",)) else op.cropping
            sign = 1 if _keras_class(op, ("ZeroPadding2D",)) else -1
            offset = tuple(None if o is None else o - sign * p[0] * j
                           for o, p, j in zip(first.offset, pads, first.jump))
            size = tuple(None if n is None else n + sign * (p[0] + p[1])
                         for n, p in zip(first.size, pads))
            return [first.replace(offset=offset, size=size)]
        if isinstance(op, pad_to_multiple):  # bottom / right padding: the grid stays
            divisor = op.size_divisor
            return [first.replace(size=tuple(None if n is None else -(-n // divisor) * divisor
                                             for n in first.size))]
        if _keras_class(op, ("Reshape", "Permute", "Cropping1D", "Cropping3D", "ZeroPadding1D",
                             "ZeroPadding3D", "UpSampling1D", "UpSampling3D", "Dot")):
            raise ValueError(f"Layer {name!r} ({type(op).__name__}) changes the spatial "
                             "layout: not handled by the receptive-field walk.")
        window = _window_of(op)
        if window is not None:
            return [self._from_rule(window, first, inputs, name, out_size)]
        if _keras_class(op, ("Softmax",)) and op.axis not in (-1, 3):
            return [self._global(first, inputs, name, out_size)]
        if _statistics_over_positions(op):
            return [first.replace(statistics=first.statistics | {name})]
        if _keras_class(op, _KERAS_POINTWISE + ("Softmax",)) or \
                isinstance(op, pointwise_classes):
            return [_union(inputs, out_size) if len(inputs) > 1 else first]
        kernel = _spatial_kernel(op)
        if kernel is not None:
            raise ValueError(
                f"Layer {name!r} ({_qualname(op)}) has a spatial kernel of shape {kernel} that "
                "the receptive-field walk does not know how to count: register it with "
                "kctx.profile.register_receptive_field_rule (a Window, 'pointwise' or "
                "'global') or register_global_layer.")
        state = _union(inputs, out_size) if len(inputs) > 1 else first
        return [state.replace(assumed=state.assumed | {f"{name} ({type(op).__name__})"})]

    def _global(self, first, inputs, name, out_size):
        # The output's static size where known (global pooling: 1 × 1), else the input's.
        state = _union(inputs, out_size) if len(inputs) > 1 else first
        size = tuple(o if o is not None else n for o, n in zip(out_size, state.size))
        return state.replace(global_layers=state.global_layers | {name}, size=size)

    def _from_rule(self, result, first, inputs, name, out_size):
        if isinstance(result, Window):
            return _apply_window(first, result, out_size)
        if result == POINTWISE:
            return _union(inputs, out_size) if len(inputs) > 1 else first
        if result == GLOBAL:
            return self._global(first, inputs, name, out_size)
        raise ValueError(f"The receptive-field rule of {name!r} returned {result!r}: expected a "
                         "Window, 'pointwise' or 'global'.")


def _graph_of(layer):
    """The functional graph of a functional or built Sequential model, else None."""
    from keras.src.models.functional import Functional

    if isinstance(layer, Functional):
        return layer
    if isinstance(layer, keras.Sequential):
        graph = getattr(layer, "_functional", None)
        if graph is None:
            raise ValueError(f"Sequential model {layer.name!r} is not built: build it on an "
                             "Input first.")
        return graph
    return None


def _node_key(layer, index):
    return f"{id(layer)}_ib-{index}"


def _call_node(graph, layer):
    """The node of ``layer`` inside ``graph`` (its single call there)."""
    nodes = [node for index, node in enumerate(layer._inbound_nodes)
             if _node_key(layer, index) in graph._nodes]
    if len(nodes) != 1:
        raise ValueError(f"Layer {layer.name!r} is called {len(nodes)} times in "
                         f"{graph.name!r}: the receptive field needs a layer called once.")
    return nodes[0]


def _find(model, name):
    """All (path of models, layer) whose layer is called ``name``, searched recursively."""
    found = []
    for layer in model.layers:
        if layer.name == name:
            found.append(([model], layer))
        inner = _graph_of(layer)
        if inner is not None:
            found += [([model] + path, hit) for path, hit in _find(layer, name)]
    return found


def _locate(model, layer_name):
    """``(models, layer)``: the chain of (nested) models from ``model`` to the one holding
    ``layer_name`` (a name searched recursively, or a path ``"backbone/norm4"``)."""
    if _graph_of(model) is None:
        raise ValueError(f"{model.name!r} is not a functional model: the receptive field is "
                         "read from the layer graph.")
    if layer_name is None:
        return [model], None
    if "/" in layer_name:
        path, current = [model], model
        parts = layer_name.split("/")
        for index, part in enumerate(parts):
            try:
                layer = current.get_layer(part)
            except ValueError:
                raise ValueError(f"No layer {part!r} in {current.name!r} (looking for "
                                 f"{layer_name!r}).") from None
            if index == len(parts) - 1:
                return path, layer
            if _graph_of(layer) is None:
                raise ValueError(f"{part!r} in {layer_name!r} is not a functional model.")
            path.append(layer)
            current = layer
    found = _find(model, layer_name)
    if not found:
        raise ValueError(f"No layer named {layer_name!r} in {model.name!r} or its nested "
                         "models.")
    if len(found) > 1:
        paths = ["/".join(m.name for m in path[1:]) + ("/" if len(path) > 1 else "") +
                 layer_name for path, _ in found]
        raise ValueError(f"Several layers are named {layer_name!r}: {paths}; pass a path.")
    return found[0]


def _target_tensor(models, layer):
    """The output tensor (the last, for several) of ``layer`` in the innermost model."""
    graph = _graph_of(models[-1])
    if layer is None:
        return graph.outputs[-1]
    return _call_node(graph, layer).outputs[-1]


def _path_name(models, layer):
    names = [m.name for m in models[1:]]
    if layer is None:
        return "/".join(names) or models[0].name
    return "/".join(names + [layer.name])


# ---------------------------------------------------------------------------
# Public results.
# ---------------------------------------------------------------------------


def _number(value):
    if value is None:
        return None
    value = float(value)
    return round(value) if math.isclose(value, round(value), abs_tol=1e-9) else value


def _numbers(values):
    return None if values is None or any(v is None for v in values) else \
        tuple(_number(v) for v in values)


@dataclasses.dataclass(frozen=True)
class ReceptiveField:
    """The theoretical receptive field at a layer's output.

    Attributes:
        layer: the layer (``"backbone/norm4"`` inside a nested model).
        rf: (height, width) input pixels that can reach one output position through
            windows (a local count: see ``is_global``).
        jump: (height, width) input pixels between neighbouring output positions.
        is_global: a layer upstream mixes all positions: every output position sees the
            whole input (``rf`` then counts the windows alone).
        global_layers: those layers.
        offset: (row, column) input coordinate of output position (0, 0): where its
            windows' centre taps lead (pixel centres at integers; None where the padding
            depends on an unknown size). Position (i, j) lies at ``offset + (i, j) · jump``.
        reach: ((up, down), (left, right)) input pixels the RF extends from that location
            (rf = up + down + 1; unequal after merging inputs located apart).
        size: (height, width) of the layer's output at ``input_size`` (None unknown).
        input_size: the (height, width) walked.
        assumed_pointwise: layers of unknown kind without a spatial kernel, taken as
            position-wise.
        statistics_layers: normalisations whose statistics span all positions (taken as
            position-wise).
    """

    layer: str
    rf: tuple
    jump: tuple
    is_global: bool
    global_layers: tuple = ()
    offset: tuple | None = None
    reach: tuple | None = None
    size: tuple | None = None
    input_size: tuple | None = None
    assumed_pointwise: tuple = ()
    statistics_layers: tuple = ()

    @property
    def side(self):
        """The RF's larger side."""
        return max(self.rf)

    @property
    def positions(self):
        """Output positions (H·W) at ``input_size``, or None."""
        return None if self.size is None else int(self.size[0] * self.size[1])

    def location(self, position):
        """Input (row, column) where output ``position`` (i, j) lies, or None."""
        if self.offset is None:
            return None
        return tuple(o + p * j for o, p, j in zip(self.offset, position, self.jump))

    def to_dict(self):
        return {"layer": self.layer, "rf": list(self.rf), "jump": list(self.jump),
                "global": self.is_global, "global_layers": list(self.global_layers),
                "offset": None if self.offset is None else list(self.offset),
                "reach": None if self.reach is None else [list(r) for r in self.reach],
                "size": None if self.size is None else list(self.size),
                "positions": self.positions,
                "input_size": None if self.input_size is None else list(self.input_size),
                "assumed_pointwise": list(self.assumed_pointwise),
                "statistics_layers": list(self.statistics_layers)}


def theoretical_receptive_field(model, layer_name=None, input_size=None):
    """The theoretical receptive field and jump at a layer's output (see the module).

    Args:
        model: a functional Keras model (nested functional models are walked into).
        layer_name: a layer's name, searched in ``model`` and its nested models (an
            ambiguous name raises), or a path ``"backbone/res5_block0_out"``; a nested
            model's name gives its output as called in ``model`` (its last output when it
            has several). None: the model's (last) output.
        input_size: (height, width) of the input; default the model's static input shape
            (sizes and offsets of "same"-padded strided layers need it).

    Returns:
        A :class:`ReceptiveField`.

    Raises:
        ValueError: a layer with a spatial kernel, or a layout change, that the walk does
            not know (named), or an unknown / ambiguous ``layer_name``.

    Examples:
        >>> inputs = keras.Input((32, 32, 3))
        >>> x = keras.layers.Conv2D(8, 3, padding="same")(inputs)
        >>> x = keras.layers.Conv2D(8, 3, strides=2, padding="same")(x)
        >>> field = theoretical_receptive_field(keras.Model(inputs, x))
        >>> field.rf, field.jump, field.is_global
        ((5, 5), (2, 2), False)

    Reference:
        Araujo, Norris, Sim, "Computing Receptive Fields of Convolutional Neural Networks",
        Distill 2019 (r₀ = Σ_l (k_l − 1) Π_{i<l} s_i + 1).
    """
    models, layer = _locate(model, layer_name)
    graph = _graph_of(models[0])
    if input_size is None:
        shapes = [tuple(t.shape) for t in graph.inputs]
        input_size = (shapes[0][1], shapes[0][2]) if len(shapes[0]) == 4 else (None, None)
    input_size = tuple(None if v is None else int(v) for v in input_size)
    walker = _Walker()
    states = [_State(size=input_size) for _ in graph.inputs]
    prefix = ""
    for outer, inner in itertools.pairwise(models):
        outer_graph = _graph_of(outer)
        node = _call_node(outer_graph, inner)
        states, _ = walker.states(outer_graph, states, node.input_tensors, prefix)
        prefix += f"{inner.name}/"
    target = _target_tensor(models, layer)
    (state,), _ = walker.states(_graph_of(models[-1]), states, [target], prefix)
    return ReceptiveField(
        layer=_path_name(models, layer), rf=_numbers(state.rf), jump=_numbers(state.jump),
        is_global=bool(state.global_layers), global_layers=tuple(sorted(state.global_layers)),
        offset=_numbers(state.offset), reach=tuple(_numbers(r) for r in state.reach),
        size=_numbers(state.size) if state.spatial else None,
        input_size=_numbers(input_size), assumed_pointwise=tuple(sorted(state.assumed)),
        statistics_layers=tuple(sorted(state.statistics)))


# ---------------------------------------------------------------------------
# The effective receptive field.
# ---------------------------------------------------------------------------


def feature_function(model, layer_name=None):
    """``f(images) -> features`` of a layer's output (inside nested models too), in
    inference mode: the chain of sub-models from the input to the layer."""
    models, layer = _locate(model, layer_name)
    pieces = []
    for outer, inner in itertools.pairwise(models):
        graph = _graph_of(outer)
        node = _call_node(graph, inner)
        pieces.append(keras.Model(graph.inputs, list(node.input_tensors)))
    graph = _graph_of(models[-1])
    pieces.append(keras.Model(graph.inputs, _target_tensor(models, layer)))

    def features(images):
        values = images
        for piece in pieces:
            values = piece(values, training=False)
        return values

    return features


def _input_gradients(features, images, position):
    """d Σ_channels features[:, i, j, :] / d images, per image (numpy)."""
    i, j = position
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        x = tf.convert_to_tensor(images)
        with tf.GradientTape() as tape:
            tape.watch(x)
            centre = keras.ops.cast(features(x)[:, i, j, :], "float32")
            total = keras.ops.sum(centre)
        gradient = tape.gradient(total, x)
    elif backend == "jax":
        import jax

        def total(x):
            return keras.ops.sum(keras.ops.cast(features(x)[:, i, j, :], "float32"))

        gradient = jax.grad(total)(keras.ops.convert_to_tensor(images))
    else:
        raise ValueError(f"The effective receptive field needs gradients: backend {backend!r} "
                         "is not supported (tensorflow, jax).")
    return np.asarray(keras.ops.convert_to_numpy(gradient), np.float64)


def _mass_extent(gradient_map, centre, fractions):
    """Disc radii and centred-square sides holding each fraction of the map's mass."""
    height, width = gradient_map.shape
    rows, cols = np.meshgrid(np.arange(height) - centre[0], np.arange(width) - centre[1],
                             indexing="ij")
    mass = gradient_map.ravel()
    total = mass.sum()
    result = {}
    for name, distance in (("radii", np.hypot(rows, cols)),
                           ("half_sides", np.maximum(np.abs(rows), np.abs(cols)))):
        distance = distance.ravel()
        order = np.argsort(distance, kind="stable")
        cumulative = np.cumsum(mass[order])
        values = {}
        for fraction in fractions:
            if total <= 0:
                values[fraction] = None
                continue
            index = int(np.searchsorted(cumulative, fraction * total * (1 - 1e-9)))
            values[fraction] = float(distance[order][min(index, len(order) - 1)])
        result[name] = values
    return result


@dataclasses.dataclass(frozen=True)
class EffectiveReceptiveField:
    """The effective receptive field (Luo et al., 2016) at a layer's centre position.

    Attributes:
        layer: the layer.
        map: (H, W) float64: |∂ Σ_k f_k(centre) / ∂x| summed over the input channels,
            averaged over the images.
        position: the output position (i, j) measured: (h // 2, w // 2) of the output.
        centre: its input location (row, column): the theoretical centre
            (:meth:`ReceptiveField.location`), or the map's centroid where the walk could
            not place it (``centre_source``).
        centre_source: ``"theoretical"`` or ``"centroid"``.
        radii: {fraction: radius of the disc around ``centre`` holding that fraction of
            the mass}, in input pixels (pixel-centre distances).
        sides: {fraction: side of the centred square holding it} (2·r + 1, r the
            largest |Δrow| or |Δcolumn| inside; a square side in pixels).
        support: (height, width) of the bounding box of the pixels whose gradient exceeds
            ``support_threshold`` × the map's maximum.
        reaches_border: {fraction: whether that square reaches the image's border (the
            image, not the network, then bounds it)}.
        images: images averaged.
        theoretical: the :class:`ReceptiveField` at the images' size.
    """

    layer: str
    map: np.ndarray
    position: tuple
    centre: tuple
    centre_source: str
    radii: dict
    sides: dict
    support: tuple
    reaches_border: dict
    images: int
    theoretical: ReceptiveField

    def to_dict(self, include_map=False):
        result = {"layer": self.layer, "position": list(self.position),
                  "centre": [_number(v) for v in self.centre],
                  "centre_source": self.centre_source,
                  "radii": {f"{f:g}": _number(v) for f, v in self.radii.items()},
                  "sides": {f"{f:g}": _number(v) for f, v in self.sides.items()},
                  "support": list(self.support),
                  "reaches_border": {f"{f:g}": v for f, v in self.reaches_border.items()},
                  "images": self.images, "input_size": list(self.map.shape)}
        if include_map:
            result["map"] = self.map.tolist()
        return result


def effective_receptive_field(model, images, layer_name=None, position=None,
                              fractions=ERF_FRACTIONS, batch_size=8, support_threshold=0.0):
    """The effective receptive field of a layer's centre position over ``images``.

    For each image x, the gradient g = ∂ (Σ_k f_k[i, j]) / ∂x of the channel-summed
    feature at output position (i, j) (the centre, (h // 2, w // 2), by default) with
    respect to the image, in inference mode (``training=False``: batch norm uses its
    moving statistics, dropout is off), on the Keras backend in use (TensorFlow's
    GradientTape or jax.grad); the map is Σ_c |g_c| averaged over the
    images. The ERF is then the disc radius and centred-square side around the centre
    position's input location that hold each fraction of the map's mass (gradient
    mass outside the image does not exist: with ``reaches_border`` the image bounds it).

    Args:
        model: a functional Keras model.
        images: (N, H, W, C) array.
        layer_name: as :func:`theoretical_receptive_field` (None: the model's output).
        position: the output position (i, j); default the centre.
        fractions: the mass fractions reported.
        batch_size: images per gradient call.
        support_threshold: the support is where the map exceeds this × its maximum.

    Returns:
        An :class:`EffectiveReceptiveField`.

    Examples:
        >>> inputs = keras.Input((None, None, 1))
        >>> conv = keras.layers.Conv2D(1, 3, padding="same", use_bias=False,
        ...                            kernel_initializer="ones")
        >>> erf = effective_receptive_field(keras.Model(inputs, conv(inputs)), np.ones((1, 9, 9, 1)))
        >>> erf.sides[0.95], erf.support
        (3, (3, 3))

    Reference:
        Luo, Li, Urtasun, Zemel, "Understanding the Effective Receptive Field in Deep
        Convolutional Neural Networks", NeurIPS 2016, Sec. 2 and 4.
    """
    images = np.asarray(images, np.float32)
    if images.ndim != 4:
        raise ValueError(f"`images` must be (N, H, W, C). Received shape {images.shape}")
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be positive. Received: {batch_size}")
    height, width = images.shape[1:3]
    theory = theoretical_receptive_field(model, layer_name, input_size=(height, width))
    features = feature_function(model, layer_name)
    size = theory.size
    if size is None or any(v is None for v in size):
        output = features(images[:1])
        if len(output.shape) != 4:
            raise ValueError(f"{theory.layer!r} gives {tuple(output.shape)} features: the ERF "
                             "needs a (B, H, W, C) output.")
        size = tuple(int(v) for v in output.shape[1:3])
    if position is None:
        position = (size[0] // 2, size[1] // 2)
    position = tuple(int(v) for v in position)
    if not (0 <= position[0] < size[0] and 0 <= position[1] < size[1]):
        raise ValueError(f"`position` {position} is outside the {size} output.")
    total = np.zeros((height, width), np.float64)
    for start in range(0, len(images), batch_size):
        gradient = _input_gradients(features, images[start:start + batch_size], position)
        total += np.abs(gradient).sum(axis=-1).sum(axis=0)
    gradient_map = total / len(images)
    centre = theory.location(position)
    source = "theoretical"
    if centre is None:
        mass = gradient_map.sum()
        rows, cols = np.indices(gradient_map.shape)
        centre = ((rows * gradient_map).sum() / mass, (cols * gradient_map).sum() / mass) \
            if mass > 0 else ((height - 1) / 2, (width - 1) / 2)
        source = "centroid"
    extent = _mass_extent(gradient_map, centre, fractions)
    sides = {f: None if r is None else _number(2 * r + 1)
             for f, r in extent["half_sides"].items()}
    reaches = {}
    for fraction, half in extent["half_sides"].items():
        reaches[fraction] = half is not None and (
            centre[0] - half <= 0 or centre[1] - half <= 0 or
            centre[0] + half >= height - 1 or centre[1] + half >= width - 1)
    peak = gradient_map.max()
    inside = np.argwhere(gradient_map > support_threshold * peak) if peak > 0 else \
        np.zeros((0, 2), int)
    support = tuple(int(v) for v in (inside.max(0) - inside.min(0) + 1)) if len(inside) \
        else (0, 0)
    return EffectiveReceptiveField(
        layer=theory.layer, map=gradient_map, position=position,
        centre=tuple(float(v) for v in centre), centre_source=source,
        radii=extent["radii"], sides=sides, support=support, reaches_border=reaches,
        images=len(images), theoretical=theory)
