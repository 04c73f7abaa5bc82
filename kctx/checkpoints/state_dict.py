"""``torch_state_dict``: the flat ``{name: array}`` weights of a checkpoint."""

import collections.abc
import os

import numpy as np

from kctx.checkpoints.errors import CheckpointError, describe
from kctx.checkpoints.reader import read_torch

STATE_DICT_KEYS = ("state_dict", "model", "model_state", "model_state_dict", "module",
                   "net", "network", "weights", "params")
"""Keys :func:`torch_state_dict` looks under, in this order."""


def _is_state_dict(obj):
    return (isinstance(obj, collections.abc.Mapping) and len(obj) > 0
            and all(isinstance(k, str) and isinstance(v, np.ndarray) for k, v in obj.items()))


def _describe(value):
    if isinstance(value, collections.abc.Mapping):
        bad = [k for k, v in value.items() if not isinstance(v, np.ndarray)][:3]
        if not value:
            return "an empty mapping"
        return f"a mapping whose {', '.join(describe(k) for k in bad)} are not arrays"
    return f"a {type(value).__name__}"


def torch_state_dict(path_or_object, allowed_objects=(), max_bytes=None):
    """The model weights of a checkpoint as a flat ``{name: ndarray}`` dict.

    The checkpoint itself when it is a mapping of arrays (``torch.save(model.state_dict())``),
    else the first of its :data:`STATE_DICT_KEYS` entries (``"state_dict"``
    (mmengine / OpenMMLab, Lightning), ``"model"``, ``"model_state"``,
    ``"model_state_dict"``, ``"module"``, ``"net"``, ``"network"``, ``"weights"``,
    ``"params"``) that is one, looked for one level further down too
    (``{"model": {"state_dict": ...}}``). Nothing is dropped: a candidate with a
    non-array value is rejected, not filtered. A leading ``"module."``
    (``DataParallel``) is stripped when every name has it.

    Args:
        path_or_object: a checkpoint file (read with :func:`read_torch`) or an
            object :func:`read_torch` returned.
        allowed_objects: passed to :func:`read_torch` when reading a file.
        max_bytes: passed to :func:`read_torch` when reading a file.

    Returns:
        dict: parameter / buffer name → ``numpy.ndarray``, in the file's order.

    Raises:
        ValueError: no state dict found (the message names the top-level keys
            and why each candidate was rejected); the errors of :func:`read_torch`.

    Examples:
        With a checkpoint file at hand (not run in the doctests):

        >>> weights = torch_state_dict("fcn_r50.pth")  # doctest: +SKIP
        >>> weights["backbone.conv1.weight"].shape  # doctest: +SKIP
        (64, 3, 7, 7)
    """
    if isinstance(path_or_object, (str, bytes, os.PathLike)):
        where = f"path={os.fsdecode(os.fspath(path_or_object))!r}"
        checkpoint = read_torch(path_or_object, allowed_objects=allowed_objects,
                                max_bytes=max_bytes)
    else:
        where = f"object of type {type(path_or_object).__name__}"
        checkpoint = path_or_object
    rejected = []

    def find(obj, depth):
        if _is_state_dict(obj):
            return obj
        if depth == 0 or not isinstance(obj, collections.abc.Mapping):
            return None
        for key in STATE_DICT_KEYS:
            if key in obj:
                found = find(obj[key], depth - 1)
                if found is not None:
                    return found
                rejected.append(f"[{describe(key)}] is {_describe(obj[key])}")
        return None

    weights = find(checkpoint, 2)
    if weights is None:
        if isinstance(checkpoint, collections.abc.Mapping):
            keys = "[" + ", ".join(describe(k) for k in list(checkpoint)[:20]) + "]"
            why = f"; {'; '.join(rejected)}" if rejected else ""
            raise CheckpointError(
                "No state dict (a mapping of parameter names to arrays) in the checkpoint: "
                f"looked at the checkpoint itself and under {STATE_DICT_KEYS}{why}. Top-level "
                f"keys: {keys}. Received: {where}")
        raise CheckpointError("No state dict in the checkpoint: it holds "
                         f"{_describe(checkpoint)}, not a mapping. Received: {where}")
    weights = dict(weights)
    if all(k.startswith("module.") for k in weights):
        weights = {k[len("module."):]: v for k, v in weights.items()}
    return weights
