"""pytorch-fid's and torch-fidelity's FID Inception state dicts → :func:`kctx.models.fid_inception_v3`.

Both files hold the 2015-12-05 graph's weights under torchvision's module names
(``Mixed_5b.branch_pool.conv.weight``, ``Mixed_5b.branch_pool.bn.running_var``, ...,
``fc.weight``, ``fc.bias``); the Keras model names each layer by its PyTorch module
path with dots replaced by underscores. BatchNorm's ``num_batches_tracked`` has no
Keras counterpart and is skipped.

Where to get the files (about 91 MB each; their release pages, downloaded once by hand
where the machine is offline):

* pytorch-fid: ``pt_inception-2015-12-05-6726825d.pth``, from the ``fid_weights``
  release of github.com/mseitzer/pytorch-fid;
* torch-fidelity: ``weights-inception-2015-12-05-6726825d.pth``, from the ``v0.2.0``
  release of github.com/toshas/torch-fidelity.
"""

import hashlib
import os

from kctx.checkpoints import torch_state_dict
from kctx.convert.porting import CheckpointMismatchError, port_weights, torch_layer_targets

WEIGHT_FILES = {
    "pytorch-fid": ("pt_inception-2015-12-05-6726825d.pth",
                    "https://github.com/mseitzer/pytorch-fid/releases/download/fid_weights/"
                    "pt_inception-2015-12-05-6726825d.pth"),
    "torch-fidelity": ("weights-inception-2015-12-05-6726825d.pth",
                       "https://github.com/toshas/torch-fidelity/releases/download/v0.2.0/"
                       "weights-inception-2015-12-05-6726825d.pth"),
}
"""The two published files of the FID Inception's weights: name and release address."""


def where_to_get_weights():
    """One sentence naming both files and where they are published."""
    return ("Download pytorch-fid's " + " or torch-fidelity's ".join(
        f"{name} ({url})" for name, url in WEIGHT_FILES.values()) + " and pass its path.")


def file_sha256(path, chunk=1 << 20):
    """The SHA-256 of a file, hex: two FIDs are comparable only when it is equal."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def fid_inception_targets(model, state):
    """``{checkpoint key: (variable, layout change)}`` for the keys of ``state`` whose
    module has a layer in ``model`` (module path with "." → "_")."""
    targets, layers = {}, {layer.name: layer for layer in model.layers}
    for path in sorted({key.rsplit(".", 1)[0] for key in state if "." in key}):
        layer = layers.get(path.replace(".", "_"))
        if layer is not None and layer.weights:
            targets.update(torch_layer_targets(layer, path))
    return targets


def load_fid_inception_weights(model, weights, assign=True):
    """Fill a :func:`kctx.models.fid_inception_v3` model from pytorch-fid's or
    torch-fidelity's state dict, strictly.

    Args:
        model: the model.
        weights: a ``.pth`` path (read by :func:`kctx.checkpoints.torch_state_dict`:
            no PyTorch, no pickled code run) or a ``{name: array}`` state dict.
        assign: ``False`` only checks.

    Returns:
        ``{"loaded": n, "skipped": [...], "sha256": hex or None}`` (the file's SHA-256).

    Raises:
        CheckpointMismatchError: a tensor without a Keras weight, a weight without a
            tensor, or a shape that differs, each named.
        FileNotFoundError: no such file (the message says where to get one).
    """
    sha256 = None
    if not isinstance(weights, dict):
        if not os.path.isfile(weights):
            raise FileNotFoundError(f"No FID Inception weights at {os.fspath(weights)!r}. "
                                    + where_to_get_weights())
        sha256 = file_sha256(weights)
        weights = torch_state_dict(weights)
    skipped = [key for key in weights if key.endswith(".num_batches_tracked")]
    result = port_weights(model, weights, fid_inception_targets(model, weights),
                          skipped=skipped, assign=assign,
                          description="the FID Inception's torchvision-style keys")
    return {**result, "sha256": sha256}


__all__ = ["CheckpointMismatchError", "WEIGHT_FILES", "file_sha256",
           "fid_inception_targets", "load_fid_inception_weights", "where_to_get_weights"]
