"""Read PyTorch ``.pth`` checkpoints into NumPy, safely and without PyTorch.

The threat. A file written by ``torch.save`` is a Python pickle (plus raw tensor
bytes). A pickle is a small program: its ``GLOBAL`` instructions name any
importable callable (``os.system``, ``builtins.eval``, ``subprocess.Popen``) and
its ``REDUCE`` instruction calls it with arguments from the file. Loading an
untrusted checkpoint with ``pickle.load`` or ``torch.load(weights_only=False)``
therefore runs whatever its author wrote. ``torch.load(weights_only=True)`` is
safe but refuses the metadata that real training checkpoints carry (OpenMMLab /
mmengine checkpoints hold ``HistoryBuffer`` objects, NumPy arrays and scalars
and ``builtins.getattr``; see open-mmlab/mmengine#1655).

What this module does. :func:`read_torch` unpickles with a restricted
``pickle.Unpickler`` whose ``find_class`` never imports the module a global
names: it looks the name up in a fixed allow-list and returns kctx's own
stand-in, and any other name raises :class:`UnsafeCheckpointError` before the
pickle can call anything. The allow-list (:data:`SAFE_GLOBALS`):

* tensors: ``torch._utils._rebuild_tensor`` / ``_rebuild_tensor_v2`` /
  ``_rebuild_tensor_v3`` / ``_rebuild_parameter`` /
  ``_rebuild_parameter_with_state`` and ``torch._tensor._rebuild_from_type_v2``
  (with ``torch.Tensor`` / ``torch.nn.parameter.Parameter`` as its type), the
  typed storage classes (``torch.FloatStorage`` ... ``torch.BoolStorage``),
  ``torch.storage.UntypedStorage`` and the dtype globals (``torch.float32`` ...).
  They record where a tensor's elements lie in its storage; the arrays are cut
  from the raw bytes by this module once the file is read.
* containers and plain values: ``collections.OrderedDict``, ``builtins.set``,
  ``frozenset``, ``complex``, ``slice``, ``bytes`` and ``bytearray`` (not from
  a size), ``_codecs.encode`` (how protocol-2 pickles store ``bytes``; latin-1,
  UTF-8 or ASCII only).
* NumPy values, rebuilt here from their pickled bytes (NumPy's own unpickling
  helpers are never called): ``numpy.core.multiarray._reconstruct`` /
  ``numpy._core.multiarray._reconstruct`` with ``numpy.ndarray`` (arrays),
  ``numpy.dtype`` (plain dtypes), ``numpy.core.multiarray.scalar`` /
  ``numpy._core.multiarray.scalar`` (scalars). Structured, datetime and other
  exotic dtypes come back as :class:`OpaqueObject`.
* ``builtins.getattr``, only on an :class:`OpaqueObject` class: a protocol-2
  pickle stores a method such as ``HistoryBuffer.min`` as
  ``getattr(HistoryBuffer, "min")`` (protocol 4 as the global
  ``HistoryBuffer.min``); the result is another opaque class named
  ``"...HistoryBuffer.min"``, the real attribute is never looked up.
* data classes in :data:`DEFAULT_OPAQUE_OBJECTS` (mmengine's ``HistoryBuffer``),
  plus those the caller names with ``allowed_objects=``: they become inert
  :class:`OpaqueObject` instances that keep the pickled arguments and state.

Tensors come back as ``numpy.ndarray`` (contiguous copies, native byte order, or
read-only views of the file's bytes with ``copy=False``), bfloat16 as float32.
Nothing here imports torch.

What the reader guarantees on any file, including one made to harm: no code of the
file runs and no module it names is imported; time and memory are bounded by the
file's real size and ``max_bytes`` (the pickle is checked before anything is built
from it: no extension-registry opcodes, memo indices within the pickle's size,
nesting at most :data:`MAX_DEPTH`; storages are read once, only as far as their
tensors need, never inflated whole; every byte read or produced counts against
``max_bytes``); every error is a ``ValueError`` (:class:`CheckpointError`,
:class:`UnsafeCheckpointError`, :class:`CheckpointLimitError`) whose message is
bounded and escaped, with the path added once; nothing is dropped silently (no
internal placeholder reaches the result: sets, dict keys and slices are rebuilt,
``OrderedDict`` state holds only ``_metadata``). What it does not: check that the
weights are what their names say, or bound the memory of the arrays a legitimate
large checkpoint holds (raise ``max_bytes`` for those).

The parts, one idea per module: :mod:`~kctx.checkpoints.errors` (errors, bounded
descriptions), :mod:`~kctx.checkpoints.placeholders` (what the pickle builds instead
of real objects), :mod:`~kctx.checkpoints.allow_list` (the restricted unpickler),
:mod:`~kctx.checkpoints.prescan` (the opcode pass), :mod:`~kctx.checkpoints.numpy_values`,
:mod:`~kctx.checkpoints.tensors` (storages, tensors, the final walk),
:mod:`~kctx.checkpoints.formats` (zip and legacy), :mod:`~kctx.checkpoints.reader`
(:func:`read_torch`), :mod:`~kctx.checkpoints.state_dict` (:func:`torch_state_dict`).
"""

from kctx.checkpoints.allow_list import DEFAULT_OPAQUE_OBJECTS, SAFE_GLOBALS
from kctx.checkpoints.errors import (
    CheckpointError,
    CheckpointLimitError,
    UnsafeCheckpointError,
)
from kctx.checkpoints.placeholders import OpaqueObject
from kctx.checkpoints.prescan import MAX_DEPTH
from kctx.checkpoints.reader import default_max_bytes, read_torch
from kctx.checkpoints.state_dict import STATE_DICT_KEYS, torch_state_dict

__all__ = [
    "DEFAULT_OPAQUE_OBJECTS",
    "MAX_DEPTH",
    "SAFE_GLOBALS",
    "STATE_DICT_KEYS",
    "CheckpointError",
    "CheckpointLimitError",
    "OpaqueObject",
    "UnsafeCheckpointError",
    "default_max_bytes",
    "read_torch",
    "torch_state_dict",
]
