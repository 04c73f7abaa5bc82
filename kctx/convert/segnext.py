"""Official SegNeXt checkpoints → :func:`kctx.models.segnext` and :func:`kctx.models.mscan`.

The Keras layers carry the official module paths as names, "." written "-" (PyTorch's
modules, and Keras on the torch backend, refuse dots: ``block1-0-attn-proj_1`` for
``block1.0.attn.proj_1``; :func:`kctx.convert.porting.keras_name`), so a tensor's key is
its layer's module path and PyTorch's parameter name
(:func:`kctx.convert.torch_layer_targets`), with two exceptions: a LayerScale's γ is the
key itself (``block1.0.layer_scale_1``), and the Hamburger keeps
as matrices the 1×1 convs of its breads (``decode_head.hamburger.ham_in.conv.weight``,
``.ham_out.conv.weight``) and its GroupNorm (``.ham_out.gn.weight``, ``.bias``).

Three kinds of ``.pth`` files fit (read by :func:`kctx.checkpoints.torch_state_dict`: no
PyTorch, no pickled code run):

* mmsegmentation 1.x's SegNeXt checkpoints (``backbone.*`` and ``decode_head.*``;
  ADE20K, Cityscapes or any number of classes matching the model's);
* the original repository's (Visual-Attention-Network/SegNeXt): the same, except that
  its MLP wraps the depthwise conv in a module (``.mlp.dwconv.dwconv.*``, the
  ``"original"`` :func:`checkpoint_layout`; mmseg PR #2653 removed the wrapper);
* an MSCAN ImageNet checkpoint, or any checkpoint of the backbone alone, with or without
  the ``backbone.`` prefix: only the backbone is filled; an ImageNet classifier
  (``head.weight``, ``head.bias``) fills a :func:`kctx.models.mscan_classifier`'s ``head``
  and is skipped by the other models.

Keras files fit too: a ``.weights.h5`` of the same model, and a ``.keras`` model holding an
MSCAN backbone (a :func:`kctx.models.mscan_classifier` pretrained by
``classification.train --backbone mscan_t``, a SegNeXt model, an :func:`kctx.models.mscan`
model), whose backbone's weights fill this model's backbone, shape by shape.

BatchNorm's ``num_batches_tracked`` has no Keras counterpart and is skipped.
"""

import os

import keras
import numpy as np

from kctx.checkpoints import torch_state_dict
from kctx.convert.keras_files import load_model
from kctx.convert.porting import (CheckpointMismatchError, dense_kernel, module_path,
                                  port_weights, torch_layer_targets)
from kctx.layers.hamburger import Hamburger
from kctx.layers.layer_scale import LayerScale

# The only key difference between the two layouts.
_ORIGINAL_DWCONV, _MMSEG_DWCONV = ".mlp.dwconv.dwconv.", ".mlp.dwconv."
_IMAGENET_CLASSIFIER = ("head.weight", "head.bias")
_STAGES = range(1, 5)


def checkpoint_layout(state):
    """``"original"`` for the SegNeXt repository's key layout (``.mlp.dwconv.dwconv.``),
    ``"mmseg"`` otherwise."""
    return "original" if any(_ORIGINAL_DWCONV in key for key in state) else "mmseg"


def is_keras_weights(weights):
    """Whether ``weights`` names a Keras file (``.weights.h5``, ``.keras``) rather than a
    checkpoint."""
    return isinstance(weights, (str, os.PathLike)) and \
        os.fspath(weights).endswith((".h5", ".keras"))


def read_checkpoint(weights):
    """The state dict of ``weights``: a dict as it is, a ``.pth`` file read (safely); a Keras
    ``.h5`` path is returned unread (:func:`load_segnext_weights` takes all three)."""
    if isinstance(weights, dict) or is_keras_weights(weights):
        return weights
    return torch_state_dict(weights)


def backbone_shape(state):
    """``(embed_dims, depths)`` of the MSCAN backbone whose keys (without the ``backbone.``
    prefix) ``state`` holds, or None: channels from ``norm<stage>.weight``, blocks from
    ``block<stage>.<index>.*``."""
    if any(f"norm{stage}.weight" not in state for stage in _STAGES):
        return None
    dims = tuple(int(np.shape(state[f"norm{stage}.weight"])[0]) for stage in _STAGES)
    depths = tuple(len({key.split(".")[1] for key in state if key.startswith(f"block{stage}.")})
                   for stage in _STAGES)
    return dims, depths


def _matrix_of_1x1_conv(weight):
    return dense_kernel(weight[:, :, 0, 0])  # (out, in, 1, 1) → (in, out)


def _hamburger_targets(layer):
    name = module_path(layer.name)
    return {f"{name}.ham_in.conv.weight": (layer.lower_bread_kernel, _matrix_of_1x1_conv),
            f"{name}.ham_in.conv.bias": (layer.lower_bread_bias, None),
            f"{name}.ham_out.conv.weight": (layer.upper_bread_kernel, _matrix_of_1x1_conv),
            f"{name}.ham_out.gn.weight": (layer.norm.gamma, None),
            f"{name}.ham_out.gn.bias": (layer.norm.beta, None)}


def segnext_targets(model):
    """``{official key: (variable, layout change)}`` for every weight of a
    :func:`kctx.models.segnext` model (its backbone's keys prefixed ``backbone.``, as
    mmseg names them) or of a :func:`kctx.models.mscan` model (no prefix).

    Raises:
        ValueError: a layer with weights that no official key maps to (a context block
            in the Hamburger's place).
    """
    targets = {}
    for layer in model.layers:
        if isinstance(layer, keras.Model):  # segnext()'s backbone
            targets.update({f"{module_path(layer.name)}.{key}": target
                            for key, target in segnext_targets(layer).items()})
        elif isinstance(layer, Hamburger):
            targets.update(_hamburger_targets(layer))
        elif isinstance(layer, LayerScale):
            targets[module_path(layer.name)] = (layer.scale, None)
        elif layer.weights:
            targets.update(torch_layer_targets(layer, module_path(layer.name)))
    return targets


def _backbone_of(model):
    """A segnext() or mscan_classifier() model's mscan() sub-model (an mscan() model
    itself)."""
    try:
        return model.get_layer("backbone")
    except ValueError:
        return model


def _classifier_head_of(model):
    """An mscan_classifier() model's linear ``head`` (None for the other models)."""
    try:
        head = model.get_layer("head")
    except ValueError:
        return None
    return head if isinstance(head, keras.layers.Dense) else None


def _load_backbone_of_keras_model(model, path, assign):
    """Fill ``model``'s backbone from the backbone of the ``.keras`` model at ``path``: the
    same variables in the same order with the same shapes, or
    :class:`CheckpointMismatchError` naming the first that differ."""
    source = _backbone_of(load_model(path, compile=False))
    target = _backbone_of(model)
    given = [(variable.path, tuple(variable.shape)) for variable in source.weights]
    wanted = [(variable.path, tuple(variable.shape)) for variable in target.weights]
    if [shape for _, shape in given] != [shape for _, shape in wanted]:
        differing = [f"{w[0]} {w[1]} ← {g[0]} {g[1]}" for w, g in zip(wanted, given)
                     if w[1] != g[1]][:5]
        raise CheckpointMismatchError(
            f"The backbone of {os.fspath(path)} ({len(given)} weights) does not fit "
            f"{target.name!r} ({len(wanted)} weights)" +
            (f": {'; '.join(differing)}." if differing else ".") +
            _variant_hint_of_keras(source))
    if assign:
        target.set_weights(source.get_weights())
    return {"layout": "keras", "part": "backbone", "loaded": len(wanted), "skipped": []}


def _variant_hint_of_keras(backbone):
    stages = [layer for layer in backbone.layers if layer.name in {f"norm{stage}"
                                                                  for stage in _STAGES}]
    if len(stages) != len(_STAGES):
        return ""
    return (" Its backbone's stages have " +
            ", ".join(str(layer.gamma.shape[0]) for layer in stages) + " channels.")


def _variant_hint(state, variants):
    shape = backbone_shape(state)
    if shape is None:
        return ""
    for name, settings in (variants or {}).items():
        if (tuple(settings["embed_dims"]), tuple(settings["depths"])) == shape:
            return (f"The checkpoint's backbone is MSCAN-{name.upper()}: build the model with "
                    f"variant={name!r}.")
    return f"The checkpoint's backbone has embed_dims={shape[0]} and depths={shape[1]}."


def load_segnext_weights(model, weights, assign=True, variants=None):
    """Fill a :func:`kctx.models.segnext` or :func:`kctx.models.mscan` model from a
    checkpoint, strictly.

    Every tensor must find its Keras weight and every Keras weight of the part loaded its
    tensor, with the same shape (the skipped keys apart: see the module's docstring);
    otherwise :class:`CheckpointMismatchError` lists the names and nothing is assigned. A
    checkpoint of the backbone alone fills the backbone (a segnext() model's head keeps
    its initialisation); a segmentor's into an mscan() model fills the backbone and skips
    the head.

    Args:
        model: a model built by :func:`kctx.models.segnext` or :func:`kctx.models.mscan`.
        weights: a Keras ``.weights.h5`` file of the same model (``model.load_weights``),
            a ``.keras`` model whose backbone fills this model's (e.g. a pretrained
            :func:`kctx.models.mscan_classifier`), a ``.pth`` file or a state dict already
            read ({name: array}).
        assign: ``False`` checks that the checkpoint fits without assigning anything.
        variants: ``{name: {"embed_dims": ..., "depths": ...}}``, the official variants
            (:data:`kctx.models.MSCAN_VARIANTS`), for the message to name the
            checkpoint's when it does not fit.

    Returns:
        ``{"layout", "part", "loaded", "skipped"}``: ``"mmseg"`` / ``"original"`` /
        ``"keras"``, ``"segmentor"`` / ``"backbone"`` / ``"classifier"`` / ``"keras"``, the
        number of tensors assigned and the checkpoint keys deliberately left unused.

    Raises:
        CheckpointMismatchError: the checkpoint does not fit the model.
        kctx.checkpoints.UnsafeCheckpointError: the file's pickle names a global
            outside the allow-list (e.g. one that would run code).

    Examples:
        >>> from kctx.models import mscan
        >>> model = mscan(None, embed_dims=(8, 16, 24, 32), depths=(1, 1, 1, 1),
        ...               mlp_ratios=(2, 2, 2, 2), drop_path_rate=0.0, input_shape=(32, 32, 3))
        >>> list(segnext_targets(model))[:2]
        ['patch_embed1.proj.0.weight', 'patch_embed1.proj.0.bias']
        >>> state = {"patch_embed1.proj.0.weight": np.zeros((4, 3, 3, 3), "float32")}
        >>> load_segnext_weights(model, state, assign=False)
        Traceback (most recent call last):
        ...
        kctx.convert.porting.CheckpointMismatchError: The checkpoint does not fit ...
        (backbone weights, mmseg layout): 181 Keras weights have no checkpoint tensor: ...
        >>> # with the official file: segnext("t") and "segnext_mscan-t_20230227-4bfa3e6a.pth"
    """
    weights = read_checkpoint(weights)
    if is_keras_weights(weights) and os.fspath(weights).endswith(".keras"):
        return _load_backbone_of_keras_model(model, weights, assign)
    if is_keras_weights(weights):
        model.load_weights(weights)
        return {"layout": "keras", "part": "keras", "loaded": len(model.weights),
                "skipped": []}
    layout = checkpoint_layout(weights)
    if layout == "original" and any(_MMSEG_DWCONV + "weight" in key for key in weights):
        raise CheckpointMismatchError("The checkpoint mixes the original (.mlp.dwconv.dwconv.) "
                                      "and the mmseg (.mlp.dwconv.) key layouts.")
    state = {key.replace(_ORIGINAL_DWCONV, _MMSEG_DWCONV): value
             for key, value in weights.items()}
    # The backbone's keys as the file names them: with or without "backbone.".
    prefix = "backbone." if any(key.startswith("backbone.") for key in state) else ""
    head = sorted(key for key in state if key.startswith("decode_head."))
    part = "segmentor" if head else "backbone"
    skipped = [key for key in state if key.endswith(".num_batches_tracked")]
    backbone = filled = _backbone_of(model)
    classifier = _classifier_head_of(model)
    if not prefix and classifier is not None and all(key in state
                                                     for key in _IMAGENET_CLASSIFIER):
        part, filled = "classifier", model
    elif not prefix:
        skipped += [key for key in _IMAGENET_CLASSIFIER if key in state]
    targets = {prefix + key: target for key, target in segnext_targets(backbone).items()}
    if part == "classifier":
        targets.update(torch_layer_targets(classifier, "head"))
    if head and backbone is not model and classifier is None:
        filled = model
        targets.update({key: target for key, target in segnext_targets(model).items()
                        if key.startswith("decode_head.")})
    else:  # no head in the file, or none in the model (mscan(), a classifier): the backbone
        skipped += head
    hint = _variant_hint({key[len(prefix):]: value for key, value in state.items()
                          if key.startswith(prefix)}, variants)
    result = port_weights(filled, state, targets, skipped=skipped, assign=assign,
                          description=f"{part} weights, {layout} layout", hint=hint)
    return {"layout": layout, "part": part, **result}


__all__ = ["CheckpointMismatchError", "backbone_shape", "checkpoint_layout", "is_keras_weights",
           "load_segnext_weights", "read_checkpoint", "segnext_targets"]
