"""The theoretical receptive field: a walk over a functional model's layer graph.

:func:`theoretical_receptive_field` walks the layer graph from the input to a layer's
output and counts, along each spatial axis, the input pixels that can reach one output
position (the receptive field, RF) and the input pixels between two neighbouring output
positions (the jump, or effective stride). Each layer's rule, looked up in the registry
of :mod:`kctx.profile.receptive_field.rules` by its class (walking the MRO), says what it
does: a window, a merge, a resize, padding, nothing (position-wise) or a mix of all
positions (global). Besides:

- **Nested functional models** (a backbone sub-model) are walked into.
- **Global layers** make every later RF global (the whole input); the result says so
  (``is_global``, ``global_layers``) and ``rf`` keeps counting the local
  (convolutional) path.
- **Normalisation statistics** over positions are listed in ``statistics_layers``.
- **Unknown layers** (no rule for their class or a base class) with ``kernel_size`` /
  ``pool_size`` and ``strides`` attributes count as that window; with a spatial kernel
  (a weight of shape (kh, kw, ...) with kh·kw > 1) they raise a ValueError naming the
  layer; weight-free or 1×1 unknown layers are assumed position-wise and listed in
  ``assumed_pointwise``. :func:`~kctx.profile.register_receptive_field_rule` teaches the
  walk a layer class.
"""

import dataclasses
import itertools
import math

import keras

from kctx.profile.receptive_field.graph import (call_node, graph_of, locate, path_name,
                                                static_size, target_tensor)
from kctx.profile.receptive_field.rules import (ELEMENTWISE_OPS, GLOBAL, POINTWISE, STATISTICS,
                                                Pad, PadToMultipleOf, Resize, ResizeLike,
                                                Unsupported, Upsample, Window,
                                                receptive_field_rule, spatial_kernel, window_of)

__all__ = ["ReceptiveField", "clean_number", "theoretical_receptive_field"]


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


def _pointwise(inputs, output_size):
    """A position-wise layer: its input's state (the union of several inputs')."""
    return _union(inputs, output_size) if len(inputs) > 1 else inputs[0]


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


def _resize_like(resize, inputs, output_size):
    """``inputs[0]`` resized to the reference ``inputs[1]``'s size (padded to a multiple of
    ``resize.size_divisor`` and cropped back, where given)."""
    x, reference = inputs
    resized = None
    if resize.size_divisor is not None and all(v is not None for v in reference.size):
        divisor = resize.size_divisor
        resized = tuple(-(-v // divisor) * divisor for v in reference.size)
    size = tuple(o if o is not None else r for o, r in zip(output_size, reference.size))
    return _resize(x, size, reference, resized)


def _upsample(state, factor, output_size):
    size = tuple(o if o is not None else (None if n is None else n * f)
                 for o, n, f in zip(output_size, state.size, factor))
    if any(v is None for v in size):  # the grid from the factor alone
        return state.replace(jump=tuple(j / f for j, f in zip(state.jump, factor)),
                             offset=(None, None), size=size)
    return _resize(state, size)


def _pad(state, padding):
    """Rows / columns added before and after (negative: cropped): the grid shifts."""
    offset = tuple(None if o is None else o - p[0] * j
                   for o, p, j in zip(state.offset, padding, state.jump))
    size = tuple(None if n is None else n + p[0] + p[1] for n, p in zip(state.size, padding))
    return state.replace(offset=offset, size=size)


def _pad_to_multiple(state, divisor):
    """Bottom / right padding to a multiple of ``divisor``: the grid stays."""
    return state.replace(size=tuple(None if n is None else -(-n // divisor) * divisor
                                    for n in state.size))


def _global(inputs, name, output_size):
    # The output's static size where known (global pooling: 1 × 1), else the input's.
    state = _pointwise(inputs, output_size)
    size = tuple(o if o is not None else n for o, n in zip(output_size, state.size))
    return state.replace(global_layers=state.global_layers | {name}, size=size)


def _qualname(obj):
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


class _Walker:
    """Receptive-field states of the tensors of a functional graph, computed on demand."""

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
                size = static_size(output_tensor)
                if size is None and len(tuple(output_tensor.shape)) != 4:
                    state = state.replace(spatial=False, size=(None, None))
                elif size is not None:
                    state = state.replace(size=tuple(
                        v if v is not None else s for v, s in zip(state.size, size)))
                memo[id(output_tensor)] = state
            stack.pop()

    def _operation(self, op, node, inputs, prefix):
        name = f"{prefix}{op.name}"
        graph = graph_of(op)
        if graph is not None:
            states, _ = self.states(graph, inputs, graph.outputs, prefix=f"{name}/")
            return states
        inputs = inputs or [_State()]
        out_size = static_size(node.outputs[0]) or (None, None)
        if not isinstance(op, keras.layers.Layer):
            kind = type(op).__name__
            if type(op).__module__.startswith("keras.") and kind in ELEMENTWISE_OPS:
                return [_union(inputs, out_size)]
            raise ValueError(f"Operation {name!r} ({_qualname(op)}) is not a layer the "
                             "receptive-field walk knows; wrap it in a layer and "
                             "register_receptive_field_rule it.")
        rule = receptive_field_rule(op)
        if rule is None:
            return [self._unknown(op, name, inputs, out_size)]
        return [self._apply(rule(op, inputs[0].size), op, name, inputs, out_size)]

    def _apply(self, result, op, name, inputs, out_size):
        """The state after a layer whose rule returned ``result``."""
        first = inputs[0]
        if isinstance(result, Window):
            return _apply_window(first, result, out_size)
        if isinstance(result, Resize):
            return _resize(first, result.size)
        if isinstance(result, ResizeLike):
            return _resize_like(result, inputs, out_size)
        if isinstance(result, Upsample):
            return _upsample(first, result.factor, out_size)
        if isinstance(result, Pad):
            return _pad(first, result.padding)
        if isinstance(result, PadToMultipleOf):
            return _pad_to_multiple(first, result.size_divisor)
        if isinstance(result, Unsupported):
            raise ValueError(f"Layer {name!r} ({type(op).__name__}) {result.reason}")
        if result == POINTWISE:
            return _pointwise(inputs, out_size)
        if result == GLOBAL:
            return _global(inputs, name, out_size)
        if result == STATISTICS:
            return first.replace(statistics=first.statistics | {name})
        raise ValueError(f"The receptive-field rule of {name!r} returned {result!r}: expected a "
                         "Window, 'pointwise' or 'global'.")

    def _unknown(self, op, name, inputs, out_size):
        """A layer of a class without a rule: a window by its attributes, an error for a
        spatial kernel, else assumed position-wise."""
        window = window_of(op)
        if window is not None:
            return _apply_window(inputs[0], window, out_size)
        kernel = spatial_kernel(op)
        if kernel is not None:
            raise ValueError(
                f"Layer {name!r} ({_qualname(op)}) has a spatial kernel of shape {kernel} that "
                "the receptive-field walk does not know how to count: register it with "
                "kctx.profile.register_receptive_field_rule (a Window, 'pointwise' or "
                "'global') or register_global_layer.")
        state = _pointwise(inputs, out_size)
        return state.replace(assumed=state.assumed | {f"{name} ({type(op).__name__})"})


# ---------------------------------------------------------------------------
# The result.
# ---------------------------------------------------------------------------


def clean_number(value):
    """``value`` as an int when it is one (within 1e-9), else a float; None stays None."""
    if value is None:
        return None
    value = float(value)
    return round(value) if math.isclose(value, round(value), abs_tol=1e-9) else value


def _numbers(values):
    return None if values is None or any(v is None for v in values) else \
        tuple(clean_number(v) for v in values)


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
    """The theoretical receptive field and jump at a layer's output.

    What each layer counts for: :mod:`kctx.profile.receptive_field.rules` (windows,
    merges, resizes, padding, position-wise and global layers) and
    :mod:`kctx.profile.receptive_field.theoretical` (nested models, unknown layers).

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
    models, layer = locate(model, layer_name)
    graph = graph_of(models[0])
    if input_size is None:
        shapes = [tuple(t.shape) for t in graph.inputs]
        input_size = (shapes[0][1], shapes[0][2]) if len(shapes[0]) == 4 else (None, None)
    input_size = tuple(None if v is None else int(v) for v in input_size)
    walker = _Walker()
    states = [_State(size=input_size) for _ in graph.inputs]
    prefix = ""
    for outer, inner in itertools.pairwise(models):
        outer_graph = graph_of(outer)
        node = call_node(outer_graph, inner)
        states, _ = walker.states(outer_graph, states, node.input_tensors, prefix)
        prefix += f"{inner.name}/"
    target = target_tensor(models, layer)
    (state,), _ = walker.states(graph_of(models[-1]), states, [target], prefix)
    return ReceptiveField(
        layer=path_name(models, layer), rf=_numbers(state.rf), jump=_numbers(state.jump),
        is_global=bool(state.global_layers), global_layers=tuple(sorted(state.global_layers)),
        offset=_numbers(state.offset), reach=tuple(_numbers(r) for r in state.reach),
        size=_numbers(state.size) if state.spatial else None,
        input_size=_numbers(input_size), assumed_pointwise=tuple(sorted(state.assumed)),
        statistics_layers=tuple(sorted(state.statistics)))
