"""``read_torch``: one ``torch.save`` file into NumPy, safely, within bounds.

The errors of every part (:mod:`~kctx.checkpoints.allow_list`,
:mod:`~kctx.checkpoints.prescan`, :mod:`~kctx.checkpoints.formats`,
:mod:`~kctx.checkpoints.tensors`) get the file's path here, in one place.
"""

import os
import re
import stat

from kctx.checkpoints.allow_list import DEFAULT_OPAQUE_OBJECTS, RestrictedLoader
from kctx.checkpoints.errors import CheckpointError, UnsafeCheckpointError, describe
from kctx.checkpoints.formats import LegacyCheckpoint, ZipCheckpoint
from kctx.checkpoints.tensors import Materializer

_IDENTIFIER_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+\Z")
MIN_MAX_BYTES = 256 << 20


def default_max_bytes(file_size):
    """``max_bytes`` when none is given: 4 × the file's size, at least 256 MiB (a
    checkpoint's tensors are about its size; their copies double it).

    Example:
        >>> default_max_bytes(100 << 20) == 400 << 20, default_max_bytes(1000) == 256 << 20
        (True, True)
    """
    return max(4 * int(file_size), MIN_MAX_BYTES)


def _check_path(path):
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"`path` must be a str or os.PathLike. Received: path={path!r}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No such checkpoint file. Received: path={path!r}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"A checkpoint must be a file, not a directory. "
                                f"Received: path={path!r}")
    if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or device would block or never end
        raise CheckpointError(f"A checkpoint must be a regular file, not a pipe or device. "
                              f"Received: path={path!r}")
    return path


def _check_allowed_objects(allowed_objects):
    if isinstance(allowed_objects, (str, bytes)):
        raise CheckpointError("`allowed_objects` must be an iterable of 'module.Name' strings, not "
                         f"one string. Received: allowed_objects={allowed_objects!r}")
    names = tuple(allowed_objects or ())
    for name in names:
        if not isinstance(name, str) or not _IDENTIFIER_PATH.match(name):
            raise CheckpointError("`allowed_objects` entries must be dotted names such as "
                             "'mmengine.logging.history_buffer.HistoryBuffer'. "
                             f"Received: allowed_objects={allowed_objects!r}")
    return names


def _with_path(error, path):
    """``error`` with the file named at the end of its message (once)."""
    message = str(error.args[0]) if error.args else str(error)
    if "Received: path=" not in message:
        error.args = (f"{message} Received: path={path!r}", *error.args[1:])
    if isinstance(error, UnsafeCheckpointError):
        error.path = path
    return error


def read_torch(path, allowed_objects=(), max_bytes=None, copy=True):
    """Read a ``torch.save`` file into NumPy without running its pickle's code.

    Reads the zip format (torch >= 1.6: ``<folder>/data.pkl``, ``<folder>/data/<key>``
    storages, ``<folder>/byteorder``) and the legacy format
    (``torch.save(..., _use_new_zipfile_serialization=False)``); not TorchScript
    archives nor the tar format of torch < 0.4. Every tensor and ``nn.Parameter``
    becomes a C-contiguous ``numpy.ndarray`` copy in native byte order (``copy=False``:
    a read-only view of its storage's bytes where no conversion is needed), with its
    storage offset and strides honoured (views, transposes, tensors sharing a
    storage). NumPy has no bfloat16: bfloat16 tensors come back as float32 (exact).
    Conjugate / negative views are applied. Dicts, ``OrderedDict`` (with their
    ``_metadata``), lists and tuples are kept. NumPy arrays, scalars and plain
    dtypes in the metadata come back as NumPy values; torch dtypes as their name
    (``"torch.float16"``); allow-listed data classes as :class:`OpaqueObject`.
    A tensor's ``requires_grad`` and a Parameter's Python attributes are dropped.

    Bounded: the pickle is checked before anything is built from it
    (:mod:`kctx.checkpoints.prescan`), each storage's bytes are read once and only as
    far as its tensors need, and the bytes read and produced may not exceed
    ``max_bytes``: a hostile file of a few kilobytes gets an error in well under a second,
    not gigabytes of memory or an endless message.

    Args:
        path: the checkpoint file (str or ``os.PathLike``; a regular file).
        allowed_objects: extra dotted global names (``"package.module.Class"``)
            to accept, besides :data:`DEFAULT_OPAQUE_OBJECTS`, as inert
            :class:`OpaqueObject` placeholders. The class is never imported;
            only list names of data classes from a source you trust.
        max_bytes: the most bytes the load may read from storages and produce as
            arrays; ``None``: :func:`default_max_bytes` of the file's size
            (4 × the size, at least 256 MiB).
        copy: ``True`` (default): every tensor its own writeable contiguous array;
            ``False``: tensors that need no conversion are read-only views sharing
            their storage's bytes (memory ≈ the file's storages).

    Returns:
        The unpickled object, tensors replaced by arrays.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        UnsafeCheckpointError: the pickle names a global outside the allow-list
            (the message names it, e.g. ``posix.system``, and the file), or uses an
            extension-registry opcode; raised before the pickle calls anything.
        CheckpointLimitError: the file asks for more than ``max_bytes``, nests
            deeper than :data:`~kctx.checkpoints.prescan.MAX_DEPTH`, or declares an
            oversized memo (``limit`` names which).
        CheckpointError: not a PyTorch checkpoint, a truncated or corrupt one, a
            path that is not a regular file, or a tensor dtype NumPy lacks (float8,
            quantized). All of these are ``ValueError``.
        MemoryError: the machine ran out of memory below ``max_bytes`` (said as such).

    Examples:
        With an mmsegmentation checkpoint at hand (not run in the doctests: no
        checkpoint file ships with kctx; ``tests/test_checkpoints.py`` writes them):

        >>> checkpoint = read_torch("fcn_r50.pth")  # doctest: +SKIP
        >>> checkpoint["state_dict"]["decode_head.conv_seg.weight"].shape  # doctest: +SKIP
        (21, 512, 1, 1)
        >>> history = checkpoint["message_hub"]["log_scalars"]["train/loss"]  # doctest: +SKIP
        >>> history.state["_log_history"]  # doctest: +SKIP
        array([0.93, 0.71])
    """
    path = _check_path(path)
    names = _check_allowed_objects(allowed_objects)
    size = os.path.getsize(path)
    if max_bytes is None:
        max_bytes = default_max_bytes(size)
    elif isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"`max_bytes` must be a positive integer. Received: "
                         f"max_bytes={max_bytes!r}")
    loader = RestrictedLoader(DEFAULT_OPAQUE_OBJECTS + names)
    source = None
    try:
        with open(path, "rb") as file:
            head = file.read(512)
            if not head:
                raise CheckpointError("Not a PyTorch checkpoint: the file is empty.")
            if head[:4] == b"PK\x03\x04":
                source = ZipCheckpoint(path, loader, max_bytes)
            elif head[257:262] == b"ustar":
                raise CheckpointError("A tar checkpoint (PyTorch < 0.4); kctx does not read "
                                      "this format (re-save it with a recent torch).")
            else:
                file.seek(0)
                source = LegacyCheckpoint(file, size, loader)
            result = source.load()
            materializer = Materializer(source.read_storage, source.byteorder, max_bytes,
                                        copy, loader.opaque_class)
            materializer.declare(loader.storages.values())
            return materializer.resolve(result)
    except CheckpointError as error:
        raise _with_path(error, path)
    except MemoryError:
        raise MemoryError(f"Ran out of memory reading the checkpoint, below max_bytes="
                          f"{max_bytes}: pass a smaller max_bytes to refuse such files "
                          f"earlier. Received: path={path!r}") from None
    except OSError:  # permissions, I/O: as they are
        raise
    except Exception as error:  # whatever a malformed pickle or archive makes fail
        raise CheckpointError(f"Corrupt or truncated PyTorch checkpoint "
                              f"({type(error).__name__}: {describe(str(error))}). "
                              f"Received: path={path!r}") from error
    finally:
        if source is not None:
            source.close()
