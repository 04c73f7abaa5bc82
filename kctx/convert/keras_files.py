"""``.keras`` files saved by earlier kctx versions, loaded on every backend.

Until 2026-11-26 the SegNeXt and MSCAN layers were named by their PyTorch module paths
as they are (``block1.0.attn.proj_1``). PyTorch refuses "." in a module's name, and so
does Keras on the torch backend, where a layer's variables become a torch module's
parameters; the layers are now named with "-" for "." (:func:`kctx.convert.porting.keras_name`).
A ``.keras`` file keeps its layers' names in its config only: the weights are stored by
position. :func:`load_model` renames the dotted names in the config and loads the file,
so a model saved before loads on TensorFlow, JAX and PyTorch alike, with its weights.
"""

import json
import os
import tempfile
import zipfile

import keras

from kctx.convert.porting import keras_name

__all__ = ["dotted_layer_names", "load_model", "rename_layers"]

_CONFIG = "config.json"


def dotted_layer_names(config):
    """The names holding "." of the layers in a Keras model config (nested models too)."""
    names = set()
    if isinstance(config, dict):
        for key, value in config.items():
            if key == "layers" and isinstance(value, list):
                names.update(layer["config"]["name"] for layer in value
                             if isinstance(layer, dict) and "." in
                             layer.get("config", {}).get("name", ""))
            names.update(dotted_layer_names(value))
    elif isinstance(config, list):
        for value in config:
            names.update(dotted_layer_names(value))
    return names


def rename_layers(config, names):
    """``config`` with every string equal to one of ``names`` (a layer's name, the
    references to it in other layers' inbound nodes and in the model's inputs and
    outputs) replaced by its :func:`~kctx.convert.porting.keras_name`.

    Example:
        >>> config = {"layers": [{"config": {"name": "block1.0.norm1"}, "inbound_nodes": []},
        ...                      {"config": {"name": "head"}, "inbound_nodes": [
        ...                          {"args": [{"config": {"keras_history": [
        ...                              "block1.0.norm1", 0, 0]}}]}]}]}
        >>> renamed = rename_layers(config, dotted_layer_names(config))
        >>> renamed["layers"][0]["config"]["name"]
        'block1-0-norm1'
        >>> renamed["layers"][1]["inbound_nodes"][0]["args"][0]["config"]["keras_history"]
        ['block1-0-norm1', 0, 0]
    """
    if isinstance(config, dict):
        return {key: rename_layers(value, names) for key, value in config.items()}
    if isinstance(config, list):
        return [rename_layers(value, names) for value in config]
    if isinstance(config, str) and config in names:
        return keras_name(config)
    return config


def load_model(path, **kwargs):
    """``keras.saving.load_model(path, **kwargs)`` that also reads the ``.keras`` files of
    kctx models whose layer names hold dots (saved before 2026-11-26), on every backend.

    Args:
        path: a ``.keras`` file.
        **kwargs: ``keras.saving.load_model``'s (``custom_objects``, ``compile``, ...).

    Returns:
        The model; layers that were named ``block1.0.attn.proj_1`` are named
        ``block1-0-attn-proj_1``, and the weights are the file's.

    Example:
        >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="fc")])
        >>> model.save("dense.keras")
        >>> load_model("dense.keras").get_layer("fc").units
        2
    """
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read(_CONFIG))
        names = dotted_layer_names(config)
        if not names:
            return keras.saving.load_model(path, **kwargs)
        with tempfile.TemporaryDirectory() as directory:
            renamed = os.path.join(directory, os.path.basename(os.fspath(path)))
            with zipfile.ZipFile(renamed, "w") as copy:
                for member in archive.infolist():
                    data = archive.read(member)
                    if member.filename == _CONFIG:
                        data = json.dumps(rename_layers(config, names)).encode()
                    copy.writestr(member, data)
            return keras.saving.load_model(renamed, **kwargs)
