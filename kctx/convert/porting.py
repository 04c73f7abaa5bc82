"""One strict way to port a checkpoint's tensors into a Keras model's variables.

A converter (one small module per model family) says which checkpoint key fills which
Keras variable and how the tensor is laid out differently (:func:`torch_layer_targets`
knows PyTorch's conventions for the standard layers); :func:`port_weights` then checks
everything before assigning anything: every tensor must find its variable (apart from
the keys the converter names as skipped), every variable its tensor, with the same
shape after the layout change. Otherwise :class:`CheckpointMismatchError` lists the
names, and the model is left as it was.

Converters sit below the models: they receive a built model and read its layers by
name, so a model module can call its converter without a cycle.
"""

import keras
import numpy as np

__all__ = ["CheckpointMismatchError", "keras_name", "module_path", "port_weights",
           "torch_layer_targets"]

# PyTorch's modules refuse "." in a name, and so does Keras on the torch backend (a layer's
# variables become parameters of a torch module): a PyTorch module path becomes a Keras
# layer name with "-" for ".", which module paths never hold, so the mapping is reversible.
MODULE_SEPARATOR = "-"


def keras_name(path):
    """The Keras layer name of the PyTorch module ``path``: its "." become "-".

    Example:
        >>> keras_name("block1.0.attn.proj_1")
        'block1-0-attn-proj_1'
    """
    return path.replace(".", MODULE_SEPARATOR)


def module_path(name):
    """The PyTorch module path of a layer named by :func:`keras_name` (a name that already
    holds the path, as models saved before names lost their dots do, is returned as it is).

    Example:
        >>> module_path("block1-0-attn-proj_1"), module_path("block1.0.attn.proj_1")
        ('block1.0.attn.proj_1', 'block1.0.attn.proj_1')
    """
    return name.replace(MODULE_SEPARATOR, ".")


class CheckpointMismatchError(ValueError):
    """A checkpoint does not fit the model: tensors left unused, Keras weights left
    unfilled, or shapes that differ (the message lists their names)."""


def conv_kernel(weight):
    """PyTorch's (out, in, kh, kw) convolution weight → Keras' (kh, kw, in, out)."""
    return np.transpose(weight, (2, 3, 1, 0))


def depthwise_kernel(weight):
    """PyTorch's (C, 1, kh, kw) depthwise weight → Keras' (kh, kw, C, 1)."""
    return np.transpose(weight, (2, 3, 0, 1))


def dense_kernel(weight):
    """PyTorch's (out, in) linear weight → Keras' (in, out)."""
    return np.transpose(weight)


_BATCH_NORM = {"weight": "gamma", "bias": "beta", "running_mean": "moving_mean",
               "running_var": "moving_variance"}


def torch_layer_targets(layer, prefix):
    """``{checkpoint key: (variable, layout change)}`` for a standard Keras layer whose
    PyTorch counterpart is the module at ``prefix``.

    Conv2D / DepthwiseConv2D (``weight``, ``bias``), batch normalisation (``weight``,
    ``bias``, ``running_mean``, ``running_var``), group / layer normalisation
    (``weight``, ``bias``) and any layer with a 2-D ``kernel`` and optional ``bias``
    (``nn.Linear``: the weight is transposed).

    Raises:
        ValueError: a layer with weights that none of these conventions covers.
    """
    if isinstance(layer, keras.layers.DepthwiseConv2D):
        targets = {"weight": (layer.kernel, depthwise_kernel)}
    elif isinstance(layer, keras.layers.Conv2D):
        targets = {"weight": (layer.kernel, conv_kernel)}
    elif isinstance(layer, keras.layers.BatchNormalization):
        return {f"{prefix}.{torch_name}": (getattr(layer, keras_name), None)
                for torch_name, keras_name in _BATCH_NORM.items()}
    elif isinstance(layer, (keras.layers.GroupNormalization, keras.layers.LayerNormalization)):
        return {f"{prefix}.weight": (layer.gamma, None), f"{prefix}.bias": (layer.beta, None)}
    elif getattr(layer, "kernel", None) is not None and len(layer.kernel.shape) == 2:
        targets = {"weight": (layer.kernel, dense_kernel)}
    else:
        raise ValueError(f"Layer {layer.name!r} ({type(layer).__name__}) has weights that no "
                         "PyTorch convention maps to.")
    if getattr(layer, "bias", None) is not None:
        targets["bias"] = (layer.bias, None)
    return {f"{prefix}.{name}": target for name, target in targets.items()}


def _limited(names, limit=12):
    names = sorted(names)
    shown = ", ".join(names[:limit])
    return shown + (f" ... ({len(names) - limit} more)" if len(names) > limit else "")


def mismatch_error(model_name, description, mismatched, unused, unfilled, hint=""):
    """The :class:`CheckpointMismatchError` listing (at most a dozen of) each kind of misfit:
    shapes that differ, checkpoint tensors without a Keras weight, Keras weights without a
    tensor; ``hint``, a sentence, ends the message (e.g. which variant the checkpoint is)."""
    problems = []
    if mismatched:
        problems.append(f"{len(mismatched)} shapes differ: {_limited(mismatched, 6)}")
    if unused:
        problems.append(f"{len(unused)} checkpoint tensors have no Keras weight: "
                        f"{_limited(unused)}")
    if unfilled:
        problems.append(f"{len(unfilled)} Keras weights have no checkpoint tensor: "
                        f"{_limited(unfilled)}")
    what = f" ({description})" if description else ""
    return CheckpointMismatchError(f"The checkpoint does not fit {model_name!r}{what}: "
                                   + "; ".join(problems) + "." + (f" {hint}" if hint else ""))


def port_weights(model, state, targets, skipped=(), assign=True, description=None, hint=""):
    """Assign ``state``'s tensors to ``model``'s variables through ``targets``, strictly.

    Args:
        model: the Keras model being filled (every one of its variables must be a
            target, so that nothing keeps its initialisation by accident).
        state: ``{checkpoint key: array}``.
        targets: ``{checkpoint key: (variable, layout change or None)}``.
        skipped: checkpoint keys deliberately left unused (e.g. BatchNorm's
            ``num_batches_tracked``); they are returned.
        assign: ``False`` checks that the checkpoint fits without assigning.
        description: how the message names the checkpoint (e.g. its layout).
        hint: a sentence the message ends with (e.g. which variant the checkpoint is).

    Returns:
        ``{"loaded": number of tensors assigned, "skipped": sorted skipped keys}``.

    Raises:
        CheckpointMismatchError: listing the checkpoint tensors without a variable,
            the variables without a tensor and the shapes that differ; nothing is
            assigned then.

    Example:
        >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="fc")])
        >>> state = {"fc.weight": np.ones((2, 3)), "fc.bias": np.zeros(2)}
        >>> port_weights(model, state, torch_layer_targets(model.get_layer("fc"), "fc"))
        {'loaded': 2, 'skipped': []}
    """
    skipped = sorted(set(skipped) & set(state))
    wanted = {key: value for key, value in state.items() if key not in set(skipped)}
    unused = set(wanted) - set(targets)
    targeted = {id(variable) for variable, _ in targets.values()}
    unfilled = [key for key in targets if key not in wanted]
    unfilled += [variable.path for variable in model.weights if id(variable) not in targeted]
    mismatched, values = [], {}
    for key in sorted(set(wanted) & set(targets)):
        variable, transform = targets[key]
        value = np.asarray(wanted[key])
        value = transform(value) if transform is not None else value
        if tuple(value.shape) != tuple(variable.shape):
            converted = "" if transform is None else f" as {tuple(value.shape)}"
            mismatched.append(f"{key}: checkpoint {tuple(np.shape(wanted[key]))}{converted}, "
                              f"model {tuple(variable.shape)}")
        values[key] = value
    if unused or unfilled or mismatched:
        raise mismatch_error(model.name, description, mismatched, unused, unfilled, hint)
    for key, value in values.items() if assign else ():
        variable = targets[key][0]
        variable.assign(value.astype(keras.backend.standardize_dtype(variable.dtype)))
    return {"loaded": len(values), "skipped": skipped}
