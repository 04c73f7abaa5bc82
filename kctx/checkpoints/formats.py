"""The two file formats of ``torch.save``: the zip archive and the legacy pickle stream.

Both hand the pickle to :func:`~kctx.checkpoints.prescan.scan_pickle` before the
restricted unpickler sees it, and give :class:`~kctx.checkpoints.tensors.Materializer` a
``read_storage(key, nbytes)`` that reads exactly the bytes a storage needs:

* zip (torch >= 1.6): ``<folder>/data.pkl``, ``<folder>/data/<key>``,
  ``<folder>/byteorder``. Members must be stored or deflated (PyTorch reads no other
  method); a member's declared size must cover what its tensors need, and only those
  bytes are inflated (a deflate bomb is never expanded whole). The pickle is at most
  ``max_bytes`` long.
* legacy (``_use_new_zipfile_serialization=False``): five pickles (magic number,
  protocol, system info, the object, the storage keys) and then each storage as an
  int64 count and its elements.
"""

import io
import zipfile

from kctx.checkpoints.errors import (
    CheckpointError,
    CheckpointLimitError,
    UnsafeCheckpointError,
    check_int,
    describe,
)
from kctx.checkpoints.prescan import BoundedReader, scan_pickle

# torch.serialization.MAGIC_NUMBER and PROTOCOL_VERSION (the legacy, non-zip format).
TORCH_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
TORCH_PROTOCOL_VERSION = 1001
_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}


def _load(loader, stream, persistent=True):
    """Scan one pickle from ``stream`` (seekable), then unpickle it from the same place."""
    start = stream.tell()
    scan_pickle(stream)
    stream.seek(start)
    return loader.unpickler(stream, persistent).load()


class ZipCheckpoint:
    """A zip-format checkpoint: :meth:`load` returns the unpickled object."""

    def __init__(self, path, loader, max_bytes):
        self.path, self.loader, self.max_bytes = path, loader, max_bytes
        self.byteorder = "<"
        try:
            self.archive = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError) as error:
            raise CheckpointError(f"Corrupt or truncated zip checkpoint ({error}).") from error

    def close(self):
        self.archive.close()

    def _member(self, name, nbytes=None):
        """``nbytes`` bytes of member ``name`` (all of it when None), checked."""
        try:
            info = self.archive.getinfo(name)
        except KeyError:
            raise CheckpointError(f"The checkpoint has no record {describe(name)}.") from None
        if info.compress_type not in _METHODS:
            raise CheckpointError(f"The record {describe(name)} is compressed with method "
                             f"{info.compress_type}; PyTorch checkpoints are stored or "
                             "deflated only.")
        wanted = info.file_size if nbytes is None else nbytes
        if info.file_size < wanted:
            raise CheckpointError(f"Record {describe(name)} holds {info.file_size} bytes but the "
                             f"checkpoint needs {wanted}: truncated or corrupt file.")
        try:
            with self.archive.open(info) as member:
                data = member.read(wanted)
        except OSError as error:  # a header offset outside the file: seek's EINVAL
            raise CheckpointError(f"Record {describe(name)} cannot be read ({error}): corrupt "
                                  "zip checkpoint.") from error
        if len(data) != wanted:
            raise CheckpointError(f"Record {describe(name)} gives {len(data)} of its {wanted} "
                             "bytes: truncated or corrupt file.")
        return data

    def load(self):
        names = self.archive.namelist()
        pickles = [n for n in names
                   if n == "data.pkl" or (n.endswith("/data.pkl") and n.count("/") == 1)]
        if len(pickles) != 1:
            hint = " (a NumPy .npz?)" if any(n.endswith(".npy") for n in names) else ""
            raise CheckpointError("Not a PyTorch checkpoint: a zip archive without (exactly one) "
                             f"'<folder>/data.pkl' record{hint}.")
        self.prefix = pickles[0][:-len("data.pkl")]
        if f"{self.prefix}constants.pkl" in names:
            raise CheckpointError("This is a TorchScript archive (torch.jit.save), which holds "
                             "code; kctx reads torch.save checkpoints only.")
        if f"{self.prefix}byteorder" in names:
            order = self._member(f"{self.prefix}byteorder", min(
                self.archive.getinfo(f"{self.prefix}byteorder").file_size, 8))
            if order not in (b"little", b"big"):
                raise CheckpointError(f"Unknown byteorder record {describe(order)}.")
            self.byteorder = "<" if order == b"little" else ">"
        size = self.archive.getinfo(pickles[0]).file_size
        if size > self.max_bytes:
            raise CheckpointLimitError(f"The checkpoint's pickle is {size} bytes, over "
                                       f"max_bytes={self.max_bytes}.", "max_bytes")
        return _load(self.loader, io.BytesIO(self._member(pickles[0])))

    def read_storage(self, key, nbytes):
        return self._member(f"{self.prefix}data/{key}", nbytes)


class LegacyCheckpoint:
    """A legacy-format checkpoint read from an open file of ``size`` bytes."""

    def __init__(self, file, size, loader):
        self.loader = loader
        self.stream = BoundedReader(file, size)
        self.storage_bytes = {}
        self.byteorder = "<"  # legacy storages are always little-endian

    def close(self):
        pass

    def load(self):
        stream, loader = self.stream, self.loader
        try:
            magic = _load(loader, stream, persistent=False)
        except (UnsafeCheckpointError, CheckpointLimitError):
            raise
        except Exception as error:
            raise CheckpointError(
                "Not a PyTorch checkpoint: neither a zip archive written by torch.save nor "
                "the legacy format (which starts with torch's magic number) "
                f"({type(error).__name__}: {describe(str(error))}).") from error
        if magic != TORCH_MAGIC_NUMBER:
            raise CheckpointError("Not a PyTorch checkpoint: a pickle, but not one written by "
                             "torch.save (no torch magic number).")
        protocol = _load(loader, stream, persistent=False)
        if protocol != TORCH_PROTOCOL_VERSION:
            raise CheckpointError(f"Unsupported legacy torch protocol version {describe(protocol)} "
                             f"(expected {TORCH_PROTOCOL_VERSION}).")
        _load(loader, stream, persistent=False)  # sys_info: endianness, type sizes
        result = _load(loader, stream)
        keys = _load(loader, stream, persistent=False)
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise CheckpointError(f"Malformed storage key list: {describe(keys)}.")
        by_key = {}
        for storage in loader.storages.values():
            by_key.setdefault(storage.key, storage)
        for key in keys:
            storage = by_key.get(key)
            if storage is None:
                raise CheckpointError(f"Storage {describe(key)} is listed but no tensor uses it.")
            header = stream.read(8)
            if len(header) != 8:
                raise CheckpointError(f"Truncated checkpoint: storage {describe(key)} is missing.")
            # Legacy storages are always little-endian: an int64 element count, the elements.
            numel = int.from_bytes(header, "little", signed=True)
            check_int("storage numel", numel)
            self.storage_bytes[key] = (stream.tell(), numel * storage.dtype.itemsize)
            stream.seek(numel * storage.dtype.itemsize, io.SEEK_CUR)
        return result

    def read_storage(self, key, nbytes):
        if key not in self.storage_bytes:
            raise CheckpointError(f"The checkpoint has no data for storage {describe(key)}.")
        position, available = self.storage_bytes[key]
        if available < nbytes:
            raise CheckpointError(f"Truncated checkpoint: storage {describe(key)} needs {nbytes} "
                             f"bytes, the file has {available}.")
        self.stream.seek(position)
        data = self.stream.read(nbytes)
        if len(data) != nbytes:
            raise CheckpointError(f"Truncated checkpoint: storage {describe(key)} needs {nbytes} "
                             f"bytes, the file has {len(data)}.")
        return data
