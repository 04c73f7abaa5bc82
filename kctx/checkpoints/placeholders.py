"""The stand-ins a checkpoint's pickle builds instead of real objects.

Nothing here imports the classes a pickle names: tensors and storages are recorded
(:class:`_LazyTensor`, :class:`_StorageRef`) and cut from the file's bytes later
(:mod:`kctx.checkpoints.tensors`), NumPy values are rebuilt from their bytes, and
allow-listed data classes become inert :class:`OpaqueObject` instances. None of them
accepts state or attributes from the pickle beyond what it documents.
"""

import collections
import re

import numpy as np

from kctx.checkpoints.errors import (
    CheckpointError,
    UnsafeCheckpointError,
    describe,
    describe_name,
)


class _OpaqueMeta(type):
    """Metaclass of the opaque classes: a pickle cannot set attributes on them."""

    def __setattr__(cls, key, value):
        raise UnsafeCheckpointError(
            f"The checkpoint tries to set the attribute {describe(key)} on the placeholder "
            f"class for '{describe_name(cls.name)}'.", describe_name(cls.name))

    def __delattr__(cls, key):
        raise UnsafeCheckpointError(
            f"The checkpoint tries to delete the attribute {describe(key)} of the placeholder "
            f"class for '{describe_name(cls.name)}'.", describe_name(cls.name))

    def __repr__(cls):
        return f"<OpaqueObject class '{describe_name(cls.name)}'>"


class OpaqueObject(metaclass=_OpaqueMeta):
    """Inert stand-in for an allow-listed object of a class kctx does not rebuild.

    The real class is never imported and none of its code runs; the object
    only keeps what the pickle gave it. Each allow-listed name gets its own
    subclass (``type(obj).name == obj.name``).

    Attributes:
        name: the dotted global the pickle named, e.g.
            ``"mmengine.logging.history_buffer.HistoryBuffer"``.
        args: the positional arguments the pickle called the class with.
        kwargs: keyword arguments (protocol 4 ``NEWOBJ_EX`` only), else ``{}``.
        state: what the pickle passed to ``__setstate__`` (usually the instance
            ``__dict__``), or None. Tensors and NumPy values inside it are
            ``numpy`` objects like everywhere else.
        listitems: items appended by the pickle (list subclasses), else ``[]``.
        dictitems: items set by the pickle (dict subclasses), else ``{}``.
    """

    name = "OpaqueObject"
    __slots__ = ("args", "kwargs", "state", "listitems", "dictitems")

    def __new__(cls, *args, **kwargs):
        self = object.__new__(cls)
        self.args = args
        self.kwargs = kwargs
        self.state = None
        self.listitems = []
        self.dictitems = {}
        return self

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        self.state = state

    def append(self, item):
        self.listitems.append(item)

    def extend(self, items):
        self.listitems.extend(items)

    def __setitem__(self, key, value):
        self.dictitems[key] = value

    def __repr__(self):
        state = self.state
        if isinstance(state, dict):
            keys = [describe_name(k) if isinstance(k, str) else type(k).__name__
                    for k in list(state)[:8]] + (["..."] if len(state) > 8 else [])
            state = f"dict[{', '.join(keys)}]"
        else:
            state = type(state).__name__
        return (f"<OpaqueObject '{describe_name(self.name)}' args={len(self.args)} "
                f"state={state}>")


class _Frozen:
    """Base of kctx's internal stand-ins: a pickle can neither set state nor attributes."""

    __slots__ = ("name",)

    def __init__(self, name):
        object.__setattr__(self, "name", name)

    def __setattr__(self, key, value):
        raise UnsafeCheckpointError(
            f"The checkpoint tries to set the attribute {describe(key)} on '{self.name}'.",
            self.name)

    def __setstate__(self, state):
        raise UnsafeCheckpointError(
            f"The checkpoint tries to set the state of '{self.name}'.", self.name)

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"


class _Marker(_Frozen):
    """A name that is only ever an argument (``numpy.ndarray``, ``torch.Tensor``)."""

    __slots__ = ()


class _SafeCallable(_Frozen):
    """An allow-listed global that the pickle may call: kctx's own function."""

    __slots__ = ("_func",)

    def __init__(self, name, func):
        super().__init__(name)
        object.__setattr__(self, "_func", func)

    def __call__(self, *args, **kwargs):
        return self._func(*args, **kwargs)


class _TorchDtype(_Frozen):
    """``torch.<dtype>``: ``code`` is the little-endian NumPy code (None: unsupported)."""

    __slots__ = ("code",)

    def __init__(self, name, code):
        super().__init__(name)
        object.__setattr__(self, "code", code)

    @property
    def itemsize(self):
        return 2 if self.code == "bf16" else np.dtype(self.code).itemsize


class _TorchStorageType(_Frozen):
    """``torch.FloatStorage`` ... (``dtype`` set) or ``torch.storage.UntypedStorage``."""

    __slots__ = ("dtype",)

    def __init__(self, name, dtype):
        super().__init__(name)
        object.__setattr__(self, "dtype", dtype)


# Code of each torch dtype in NumPy terms; None: no NumPy equivalent (refused with a
# clear message when a tensor uses it). bfloat16 is read as uint16 and widened.
_TORCH_DTYPE_CODES = {
    "float32": "f4", "float64": "f8", "float16": "f2", "bfloat16": "bf16",
    "int64": "i8", "int32": "i4", "int16": "i2", "int8": "i1", "uint8": "u1",
    "uint16": "u2", "uint32": "u4", "uint64": "u8", "bool": "b1",
    "complex64": "c8", "complex128": "c16",
    "complex32": None, "float8_e4m3fn": None, "float8_e5m2": None,
    "float8_e4m3fnuz": None, "float8_e5m2fnuz": None, "float8_e8m0fnu": None,
    "qint8": None, "quint8": None, "qint32": None, "quint4x2": None, "quint2x4": None,
}
_TORCH_DTYPES = {name: _TorchDtype(f"torch.{name}", code)
                 for name, code in _TORCH_DTYPE_CODES.items()}
_UINT8 = _TORCH_DTYPES["uint8"]

_STORAGE_DTYPES = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128", "QInt8Storage": "qint8",
    "QUInt8Storage": "quint8", "QInt32Storage": "qint32", "QUInt4x2Storage": "quint4x2",
    "QUInt2x4Storage": "quint2x4",
}


class _StorageRef:
    """One storage of the file (or a legacy view of one): its key, dtype and element
    count; its bytes are read later, once, and shared by every tensor that uses it."""

    __slots__ = ("key", "dtype", "numel", "base", "offset")

    def __init__(self, key, dtype, numel, base=None, offset=0):
        self.key, self.dtype, self.numel = key, dtype, numel
        self.base, self.offset = base, offset  # legacy views: elements into base

    def __setstate__(self, state):
        raise UnsafeCheckpointError("The checkpoint tries to set the state of a storage.")

    @property
    def nbytes(self):
        return self.numel * self.dtype.itemsize


class _LazyTensor:
    """A tensor as the pickle describes it; cut from its storage once the bytes are read."""

    __slots__ = ("storage", "offset", "size", "stride", "dtype", "metadata")

    def __init__(self, storage, offset, size, stride, dtype, metadata):
        if not isinstance(storage, _StorageRef):
            raise CheckpointError(f"A tensor's storage must come from the file. Received: "
                             f"{describe(storage)}")
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride
        self.dtype, self.metadata = dtype, metadata

    def __setstate__(self, state):
        raise UnsafeCheckpointError("The checkpoint tries to set the state of a tensor.")


class _NumpyDtype:
    """``numpy.dtype(spec, align, copy)`` plus the state its pickle sets."""

    __slots__ = ("args", "state")
    _SPEC = re.compile(r"([biufcOUSV])(\d{1,6})\Z")

    def __init__(self, args):
        self.args, self.state = args, None

    def __setstate__(self, state):
        self.state = state

    def to_numpy(self):
        """The ``numpy.dtype``, or None where kctx does not rebuild it (structured,
        sub-array, datetime, with metadata)."""
        spec = self.args[0] if self.args else None
        match = self._SPEC.match(spec) if isinstance(spec, str) else None
        if match is None:
            return None
        byteorder = "|"
        if self.state is not None:
            state = self.state
            if (not isinstance(state, tuple) or len(state) not in (8, 9)
                    or state[0] not in (3, 4) or state[1] not in ("<", ">", "|", "=")
                    or any(part is not None for part in state[2:5])
                    or (len(state) == 9 and state[8] is not None)):
                return None
            byteorder = state[1]
        if match.group(1) == "O":
            return np.dtype(object)
        try:
            dtype = np.dtype(spec)
        except TypeError:
            return None
        if byteorder in "<>" and dtype.kind in "iufcU" and dtype.itemsize > 1:
            dtype = dtype.newbyteorder(byteorder)
        return dtype


class _NumpyArray:
    """``numpy.core.multiarray._reconstruct(ndarray, ...)``: an array once its state is set."""

    __slots__ = ("args", "state")

    def __init__(self, args):
        self.args, self.state = args, None

    def __setstate__(self, state):
        self.state = state


class _OrderedDictState(collections.OrderedDict):
    """``collections.OrderedDict`` as a checkpoint builds it: its pickled state may only
    set ``_metadata`` (what ``Module.state_dict()`` keeps there), so a pickle cannot
    shadow ``items`` / ``keys`` with attributes. Returned as a plain ``OrderedDict``."""

    def __setstate__(self, state):
        if not isinstance(state, dict) or set(state) - {"_metadata"}:
            names = (", ".join(describe(k) for k in list(state)[:4])
                     if isinstance(state, dict) else describe(state))
            raise UnsafeCheckpointError(
                "An OrderedDict's pickled state may only hold `_metadata` (a state dict's "
                f"version records). Received: {names}", "collections.OrderedDict")
        self.__dict__["_metadata"] = state.get("_metadata")

    def __setattr__(self, key, value):
        raise UnsafeCheckpointError(
            f"The checkpoint tries to set the attribute {describe(key)} on an OrderedDict.",
            "collections.OrderedDict")
