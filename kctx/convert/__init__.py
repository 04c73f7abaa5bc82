"""Checkpoint conversion: other frameworks' weights into kctx's Keras models.

One strict porting helper (:func:`port_weights`, :class:`CheckpointMismatchError`) and
one small module of key mappings per model family. The ``.pth`` files are read by
:mod:`kctx.checkpoints` (no PyTorch, no pickled code run).
"""

from kctx.convert.fid_inception import (WEIGHT_FILES, file_sha256, load_fid_inception_weights,
                                        where_to_get_weights)
from kctx.convert.porting import CheckpointMismatchError, port_weights, torch_layer_targets

__all__ = ["CheckpointMismatchError", "WEIGHT_FILES", "file_sha256",
           "load_fid_inception_weights", "port_weights", "torch_layer_targets",
           "where_to_get_weights"]
