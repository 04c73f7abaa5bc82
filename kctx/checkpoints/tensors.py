"""Storages and tensors: the file's bytes read once per storage, tensors cut from them.

:class:`Materializer` turns what the unpickler recorded into NumPy values:

* each storage's bytes are read once, only as many as its declarations need (a zip
  member is streamed, never inflated whole), and shared by every tensor cut from it;
* a tensor is a NumPy view of those bytes (offset, size and strides honoured, bounds
  checked); with ``copy=True`` (the default) it is returned as its own C-contiguous,
  writeable copy in native byte order, as before; with ``copy=False`` views that need
  no conversion stay read-only views of the shared bytes;
* every byte read or produced is charged against ``max_bytes``: a file that asks for
  more (2,000 copies of one storage, a zero-stride tensor of gigabytes) raises
  :class:`~kctx.checkpoints.CheckpointLimitError` naming ``max_bytes`` before the memory
  is taken;
* :meth:`Materializer.resolve` walks the unpickled object once (shared objects once) and
  replaces every stand-in, in dicts (keys too), lists, tuples, sets, frozensets,
  slices, ``OrderedDict`` (with its ``_metadata``) and opaque objects: no placeholder
  escapes.
"""

import collections
import math

import numpy as np

from kctx.checkpoints.errors import (
    CheckpointError,
    CheckpointLimitError,
    UnsafeCheckpointError,
    check_int,
    check_int_tuple,
    describe,
)
from kctx.checkpoints.numpy_values import _build_numpy_array
from kctx.checkpoints.placeholders import (
    OpaqueObject,
    _Frozen,
    _LazyTensor,
    _NumpyArray,
    _NumpyDtype,
    _OrderedDictState,
    _StorageRef,
    _TorchDtype,
)


class Materializer:
    """Storage bytes, tensors and the final walk of one file.

    Args:
        read_storage: ``read_storage(key, nbytes)`` → exactly ``nbytes`` bytes of the
            storage ``key`` (the file format's).
        byteorder: ``"<"`` or ``">"``, the file's.
        max_bytes: the most bytes the load may read and produce.
        copy: whether tensors come back as their own contiguous copies.
        opaque_class: ``opaque_class(name)`` → the file's opaque class of that name.
    """

    def __init__(self, read_storage, byteorder, max_bytes, copy, opaque_class):
        self.read_storage, self.byteorder = read_storage, byteorder
        self.max_bytes, self.copy, self.opaque_class = max_bytes, copy, opaque_class
        self.charged = 0
        self.needed = {}  # storage key -> bytes its declarations need
        self.raw = {}  # storage key -> bytes read

    def charge(self, nbytes, what):
        """Count ``nbytes`` more against ``max_bytes``, or refuse."""
        self.charged += nbytes
        if self.charged > self.max_bytes:
            raise CheckpointLimitError(
                f"Reading the checkpoint needs more than max_bytes={self.max_bytes} bytes "
                f"({what} brings it to {self.charged}). Pass a larger max_bytes to "
                "read_torch if the file is trusted and that much memory is meant.",
                "max_bytes")

    def declare(self, storages):
        """The bytes each storage key needs: its longest declaration."""
        for storage in storages:
            root = storage.base or storage
            self.needed[root.key] = max(self.needed.get(root.key, 0), root.nbytes)

    def storage_bytes(self, storage):
        """The bytes of ``storage`` (file byte order), exactly ``storage.nbytes`` long."""
        if storage.base is not None:  # a legacy view: elements into its base
            start = storage.offset * storage.dtype.itemsize
            return self.storage_bytes(storage.base)[start:start + storage.nbytes]
        raw = self.raw.get(storage.key)
        if raw is None:
            nbytes = self.needed.get(storage.key, storage.nbytes)
            self.charge(nbytes, f"storage {describe(storage.key)}")
            raw = self.raw[storage.key] = memoryview(self.read_storage(storage.key, nbytes))
        return raw[:storage.nbytes]

    def storage_array(self, storage):
        return self.tensor_array(_LazyTensor(storage, 0, (storage.numel,), (1,),
                                             storage.dtype, None))

    def tensor_array(self, tensor):
        dtype = tensor.dtype
        if not isinstance(dtype, _TorchDtype):
            raise CheckpointError(f"A tensor needs a torch dtype. Received: {describe(dtype)}.")
        if dtype.code is None:
            raise CheckpointError(f"{dtype.name} tensors are not supported: NumPy has no such "
                             "dtype.")
        offset, size, stride = tensor.offset, tensor.size, tensor.stride
        check_int("storage_offset", offset)
        size, stride = check_int_tuple("size", size), check_int_tuple("stride", stride)
        if len(size) != len(stride):
            raise CheckpointError(f"A tensor's size ({len(size)} dimensions) and stride "
                             f"({len(stride)}) differ in length.")
        raw = self.storage_bytes(tensor.storage)
        itemsize = dtype.itemsize
        capacity = len(raw) // itemsize
        code = "u2" if dtype.code == "bf16" else dtype.code
        file_dtype = np.dtype(self.byteorder + code)
        count = math.prod(size)
        if count == 0:
            return np.empty(size, dtype=_native(dtype, file_dtype))
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= capacity:
            raise CheckpointError(
                f"A tensor of size {describe(size)}, stride {describe(stride)} and offset "
                f"{offset} reads past its storage of {capacity} {dtype.name} elements: "
                "corrupt checkpoint.")
        base = np.frombuffer(raw, dtype=file_dtype, count=capacity)
        view = np.lib.stride_tricks.as_strided(
            base[offset:], shape=size, strides=tuple(s * itemsize for s in stride),
            writeable=False)
        converted = (dtype.code in ("bf16", "b1") or not file_dtype.isnative
                     or _conjugated_or_negated(tensor.metadata))
        if converted or self.copy:
            out_itemsize = 4 if dtype.code == "bf16" else file_dtype.itemsize
            self.charge(count * out_itemsize, f"a tensor of {count} elements")
        if dtype.code == "bf16":
            # NumPy has no bfloat16: its 16 bits are the high half of a float32.
            values = (view.astype(np.uint32) << 16).view(np.float32)
        elif dtype.code == "b1":
            values = view.view(np.uint8) != 0
        elif not file_dtype.isnative:
            values = view.astype(file_dtype.newbyteorder("="))
        else:
            values = view.copy() if self.copy else view
        metadata = tensor.metadata
        if isinstance(metadata, dict):
            if metadata.get("conj"):
                values = np.conj(values)
            if metadata.get("neg"):
                values = np.negative(values)
        if self.copy and not values.flags.c_contiguous:
            # (np.ascontiguousarray would turn a 0-d array into a 1-d one.)
            values = values.copy()
        return values

    # ---- the walk

    def resolve(self, obj):
        """``obj`` with every stand-in replaced, each shared object resolved once."""
        try:
            return self._resolve(obj)
        except RecursionError:
            raise CheckpointLimitError(
                "The checkpoint nests lists or dicts deeper than Python's recursion limit "
                "allows to walk.", "max_depth") from None

    def _resolve(self, obj):
        memo = {}

        def key_of(item):
            value = walk(item)
            try:
                hash(value)
            except TypeError:
                raise CheckpointError(f"The checkpoint uses a {type(value).__name__} (a tensor?) "
                                 "as a dict key or set element, which cannot hold it.") from None
            return value

        def walk(item):
            key = id(item)
            if key in memo:
                return memo[key][1]
            if isinstance(item, _LazyTensor):
                out = self.tensor_array(item)
            elif isinstance(item, _StorageRef):
                out = self.storage_array(item)
            elif isinstance(item, _NumpyArray):
                out = _build_numpy_array(item, walk)
                if out is None:
                    args = tuple(walk(a) for a in item.args)
                    out = self.opaque_class("numpy.ndarray")(*args)
                    out.state = walk(item.state)
            elif isinstance(item, _NumpyDtype):
                out = item.to_numpy()
                if out is None:
                    out = self.opaque_class("numpy.dtype")(*item.args)
                    out.state = walk(item.state)
            elif isinstance(item, _Frozen):
                out = item.name
            elif isinstance(item, _OrderedDictState):
                out = collections.OrderedDict()
                memo[key] = (item, out)
                for k, v in list(dict.items(item)):
                    out[key_of(k)] = walk(v)
                if "_metadata" in item.__dict__:
                    out._metadata = walk(item.__dict__["_metadata"])
                return out
            elif type(item) is dict:
                memo[key] = (item, item)
                entries = list(item.items())
                item.clear()
                for k, v in entries:
                    item[key_of(k)] = walk(v)
                return item
            elif type(item) is list:
                memo[key] = (item, item)
                item[:] = [walk(v) for v in item]
                return item
            elif type(item) in (set, frozenset):
                out = type(item)(key_of(v) for v in item)
            elif type(item) is slice:
                out = slice(walk(item.start), walk(item.stop), walk(item.step))
            elif isinstance(item, OpaqueObject):
                memo[key] = (item, item)
                item.args = walk(item.args)
                item.kwargs = walk(item.kwargs)
                item.state = walk(item.state)
                item.listitems = walk(item.listitems)
                item.dictitems = walk(item.dictitems)
                return item
            elif type(item) is tuple:
                values = tuple(walk(v) for v in item)
                out = item if all(a is b for a, b in zip(values, item)) else values
            elif isinstance(item, (str, bytes, bytearray, int, float, complex, bool,
                                   type(None), np.ndarray, np.generic, type)):
                out = item
            else:
                raise UnsafeCheckpointError(
                    f"The checkpoint built an object kctx does not return: {describe(item)}.",
                    type(item).__name__)
            memo[key] = (item, out)
            return out

        return walk(obj)


def _conjugated_or_negated(metadata):
    return isinstance(metadata, dict) and bool(metadata.get("conj") or metadata.get("neg"))


def _native(dtype, file_dtype):
    if dtype.code == "bf16":
        return np.float32
    if dtype.code == "b1":
        return np.bool_
    return file_dtype.newbyteorder("=")
