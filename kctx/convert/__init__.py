"""Checkpoint conversion: other frameworks' weights into kctx's Keras models.

One strict porting helper (:func:`port_weights`, :class:`CheckpointMismatchError`) and
one small module of key mappings per model family: the FID Inception
(:mod:`kctx.convert.fid_inception`), SegNeXt (:mod:`kctx.convert.segnext`) and
torchvision's ResNets (:mod:`kctx.convert.torchvision_resnet`). The ``.pth`` files are
read by :mod:`kctx.checkpoints` (no PyTorch, no pickled code run). Keras files of kctx
models saved before their layer names lost their dots load on every backend through
:func:`kctx.convert.load_model` (:mod:`kctx.convert.keras_files`).
"""

from kctx.convert.fid_inception import (WEIGHT_FILES, file_sha256, load_fid_inception_weights,
                                        where_to_get_weights)
from kctx.convert.keras_files import load_model
from kctx.convert.porting import (CheckpointMismatchError, keras_name, module_path, port_weights,
                                  torch_layer_targets)
from kctx.convert.segnext import load_segnext_weights
from kctx.convert.torchvision_resnet import load_torchvision_resnet_weights

__all__ = ["CheckpointMismatchError", "WEIGHT_FILES", "file_sha256", "keras_name",
           "load_fid_inception_weights", "load_model", "load_segnext_weights",
           "load_torchvision_resnet_weights", "module_path", "port_weights",
           "torch_layer_targets", "where_to_get_weights"]
