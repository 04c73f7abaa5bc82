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

Tensors come back as ``numpy.ndarray`` (contiguous copies, native byte order),
bfloat16 as float32. Nothing here imports torch. The guard is against running
code, not against exhausting memory: a hostile file can still describe a huge
(e.g. zero-stride) tensor, which is materialised when read.
"""

import _compat_pickle
import collections
import io
import math
import os
import pickle
import re
import zipfile

import numpy as np

__all__ = [
    "DEFAULT_OPAQUE_OBJECTS",
    "SAFE_GLOBALS",
    "STATE_DICT_KEYS",
    "OpaqueObject",
    "UnsafeCheckpointError",
    "read_torch",
    "torch_state_dict",
]

# torch.serialization.MAGIC_NUMBER and PROTOCOL_VERSION (the legacy, non-zip format).
_TORCH_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
_TORCH_PROTOCOL_VERSION = 1001

DEFAULT_OPAQUE_OBJECTS = ("mmengine.logging.history_buffer.HistoryBuffer",)
"""Data classes that load as :class:`OpaqueObject` without being asked for.

mmengine's ``CheckpointHook`` (``Runner.save_checkpoint``) stores
``message_hub.state_dict()``, whose ``log_scalars`` are ``HistoryBuffer``
objects (their ``_log_history`` / ``_count_history`` arrays are in ``.state``).
"""

_IDENTIFIER_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+\Z")


class UnsafeCheckpointError(pickle.UnpicklingError, ValueError):
    """The checkpoint's pickle names a global that is not on the allow-list.

    Raised from ``find_class``, i.e. before the pickle could call it. Both a
    ``pickle.UnpicklingError`` and a ``ValueError``. ``global_name`` is the
    refused name (``"posix.system"`` for ``os.system`` pickled on Linux) and
    ``path`` the file.
    """

    def __init__(self, message, global_name=None, path=None):
        super().__init__(message)
        self.global_name = global_name
        self.path = path


# --------------------------------------------------------------------------- placeholders


class _OpaqueMeta(type):
    """Metaclass of the opaque classes: a pickle cannot set attributes on them."""

    def __setattr__(cls, key, value):
        raise UnsafeCheckpointError(
            f"The checkpoint tries to set the attribute {key!r} on the placeholder class "
            f"for '{cls.name}'.", cls.name)

    def __delattr__(cls, key):
        raise UnsafeCheckpointError(
            f"The checkpoint tries to delete the attribute {key!r} of the placeholder class "
            f"for '{cls.name}'.", cls.name)

    def __repr__(cls):
        return f"<OpaqueObject class {cls.name!r}>"


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
            keys = [str(k) for k in list(state)[:8]] + (["..."] if len(state) > 8 else [])
            state = f"dict[{', '.join(keys)}]"
        else:
            state = type(state).__name__
        return f"<OpaqueObject {self.name!r} args={len(self.args)} state={state}>"


class _Frozen:
    """Base of kctx's internal stand-ins: a pickle can neither set state nor attributes."""

    __slots__ = ("name",)

    def __init__(self, name):
        object.__setattr__(self, "name", name)

    def __setattr__(self, key, value):
        raise UnsafeCheckpointError(
            f"The checkpoint tries to set the attribute {key!r} on '{self.name}'.", self.name)

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
    """One storage of the file (or a legacy view of one); its bytes are read later."""

    __slots__ = ("key", "dtype", "numel", "base", "offset", "_data")

    def __init__(self, key, dtype, numel, base=None, offset=0):
        self.key, self.dtype, self.numel = key, dtype, numel
        self.base, self.offset = base, offset  # legacy views: elements into base
        self._data = None

    def __setstate__(self, state):
        raise UnsafeCheckpointError("The checkpoint tries to set the state of a storage.")

    @property
    def nbytes(self):
        return self.numel * self.dtype.itemsize

    def data(self, reader):
        """The storage's raw bytes (file byte order), exactly ``nbytes`` long."""
        if self.base is not None:
            start = self.offset * self.dtype.itemsize
            return self.base.data(reader)[start:start + self.nbytes]
        if self._data is None:
            raw = reader.storage_bytes(self)
            if len(raw) < self.nbytes:
                raise ValueError(
                    f"Storage {self.key!r} holds {len(raw)} bytes but the checkpoint needs "
                    f"{self.nbytes} ({self.numel} x {self.dtype.name}): truncated or corrupt file.")
            self._data = memoryview(raw)[:self.nbytes]
        return self._data


class _LazyTensor:
    """A tensor as the pickle describes it; cut from its storage once the bytes are read."""

    __slots__ = ("storage", "offset", "size", "stride", "dtype", "metadata")

    def __init__(self, storage, offset, size, stride, dtype, metadata):
        if not isinstance(storage, _StorageRef):
            raise ValueError(f"A tensor's storage must come from the file. Received: "
                             f"storage of type {type(storage).__name__}")
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


# --------------------------------------------------------------------------- safe functions


def _check_int(name, value, minimum=0):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}")


def _check_int_tuple(name, value):
    if not isinstance(value, (tuple, list)):
        raise ValueError(f"`{name}` must be a tuple of integers. Received: {name}={value!r}")
    for item in value:
        _check_int(name, item)
    return tuple(value)


def _rebuild_tensor(storage, storage_offset, size, stride):
    return _LazyTensor(storage, storage_offset, size, stride,
                       getattr(storage, "dtype", None), None)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    return _LazyTensor(storage, storage_offset, size, stride,
                       getattr(storage, "dtype", None), metadata)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       dtype, metadata=None):
    if not isinstance(dtype, _TorchDtype):
        raise ValueError(f"_rebuild_tensor_v3 needs a torch dtype. Received: dtype={dtype!r}")
    return _LazyTensor(storage, storage_offset, size, stride, dtype, metadata)


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None, state=None):
    if not isinstance(data, _LazyTensor):
        raise ValueError(f"A Parameter must wrap a tensor. Received: {type(data).__name__}")
    return data


_TENSOR_TYPES = (_Marker("torch.Tensor"), _Marker("torch.nn.parameter.Parameter"))


def _rebuild_from_type_v2(func, new_type, args, state):
    if (not any(func is f for f in _REBUILD_FUNCTIONS)
            or not any(new_type is t for t in _TENSOR_TYPES)):
        raise UnsafeCheckpointError(
            "torch._tensor._rebuild_from_type_v2 is only allowed with a torch._utils rebuild "
            f"function and torch.Tensor / Parameter. Received: func={func!r}, "
            f"new_type={new_type!r}", "torch._tensor._rebuild_from_type_v2")
    return func(*args)


def _codecs_encode(obj, encoding="utf-8", errors="strict"):
    if (not isinstance(obj, str) or errors != "strict"
            or encoding not in ("latin1", "latin-1", "utf-8", "utf8", "ascii")):
        raise UnsafeCheckpointError(
            "_codecs.encode is only allowed on a str with latin-1 / utf-8 / ascii. Received: "
            f"{type(obj).__name__}, encoding={encoding!r}", "_codecs.encode")
    return obj.encode(encoding)


def _bytes(source=b"", encoding=None):
    # Protocol 2 pickles b"" as bytes(); never from a size (bytes(10**12)).
    if isinstance(source, str) and encoding is not None:
        return _codecs_encode(source, encoding)
    if isinstance(source, (bytes, bytearray)) and encoding is None:
        return bytes(source)
    raise ValueError(f"bytes / bytearray are only rebuilt from bytes or an encoded str. "
                     f"Received: {type(source).__name__}")


def _bytearray(source=b"", encoding=None):
    return bytearray(_bytes(source, encoding))


def _numpy_dtype(*args):
    return _NumpyDtype(args)


_NDARRAY = _Marker("numpy.ndarray")


def _numpy_reconstruct(subtype, shape=(0,), dtype_code=b"b"):
    if subtype is not _NDARRAY:
        raise UnsafeCheckpointError(
            f"numpy's _reconstruct is only allowed for numpy.ndarray. Received: {subtype!r}",
            "numpy.core.multiarray._reconstruct")
    return _NumpyArray((shape, dtype_code))


def _as_bytes(name, value):
    # py2-era pickles store bytes as latin-1 str.
    if isinstance(value, str):
        value = value.encode("latin-1")
    if not isinstance(value, (bytes, bytearray)):
        raise ValueError(f"`{name}` must be bytes. Received: {type(value).__name__}")
    return bytes(value)


def _build_numpy_array(array, resolve):
    """The ndarray of a ``_NumpyArray`` (None: a dtype kctx does not rebuild)."""
    state = array.state
    if isinstance(state, tuple) and len(state) == 5:
        state = state[1:]
    if not isinstance(state, tuple) or len(state) != 4:
        raise ValueError("A pickled NumPy array has no (or a malformed) state.")
    shape, dtype, is_fortran, rawdata = state
    shape = _check_int_tuple("shape", shape)
    if not isinstance(dtype, _NumpyDtype):
        raise ValueError(f"A pickled NumPy array's dtype must be a numpy.dtype. Received: "
                         f"{type(dtype).__name__}")
    numpy_dtype = dtype.to_numpy()
    if numpy_dtype is None:
        return None
    order = "F" if is_fortran else "C"
    count = math.prod(shape)
    if numpy_dtype.hasobject:
        if not isinstance(rawdata, list) or len(rawdata) != count:
            raise ValueError(f"A pickled object array of shape {shape} needs a list of {count} "
                             "items.")
        out = np.empty(count, dtype=object)
        for i, item in enumerate(rawdata):
            out[i] = resolve(item)
        return out.reshape(shape, order=order)
    rawdata = _as_bytes("rawdata", rawdata)
    if len(rawdata) != count * numpy_dtype.itemsize:
        raise ValueError(f"A pickled NumPy array of shape {shape} and dtype {numpy_dtype} needs "
                         f"{count * numpy_dtype.itemsize} bytes. Received: {len(rawdata)} bytes")
    out = np.frombuffer(rawdata, dtype=numpy_dtype, count=count).reshape(shape, order=order)
    # A copy in native byte order, as numpy's own unpickling returns (order kept).
    return out.astype(numpy_dtype.newbyteorder("="), order="K")


def _numpy_scalar_value(dtype, obj):
    """The NumPy scalar of ``scalar(dtype, obj)``; None where the dtype is not rebuilt."""
    if not isinstance(dtype, _NumpyDtype):
        raise ValueError(f"numpy's scalar needs a numpy.dtype. Received: {type(dtype).__name__}")
    numpy_dtype = dtype.to_numpy()
    if numpy_dtype is None:
        return None
    if numpy_dtype.hasobject:
        return obj
    raw = _as_bytes("scalar data", obj)
    if len(raw) != numpy_dtype.itemsize:
        raise ValueError(f"A pickled NumPy {numpy_dtype} scalar needs {numpy_dtype.itemsize} "
                         f"bytes. Received: {len(raw)} bytes")
    if numpy_dtype.kind == "b":
        return np.bool_(raw != b"\x00")
    return np.frombuffer(raw, dtype=numpy_dtype, count=1)[0]


_REBUILD_FUNCTIONS = (
    _SafeCallable("torch._utils._rebuild_tensor", _rebuild_tensor),
    _SafeCallable("torch._utils._rebuild_tensor_v2", _rebuild_tensor_v2),
    _SafeCallable("torch._utils._rebuild_tensor_v3", _rebuild_tensor_v3),
    _SafeCallable("torch._utils._rebuild_parameter", _rebuild_parameter),
    _SafeCallable("torch._utils._rebuild_parameter_with_state", _rebuild_parameter),
)


def _static_globals():
    table = {f.name: f for f in _REBUILD_FUNCTIONS}
    table["torch._tensor._rebuild_from_type_v2"] = _SafeCallable(
        "torch._tensor._rebuild_from_type_v2", _rebuild_from_type_v2)
    table["torch.Tensor"] = table["torch._tensor.Tensor"] = _TENSOR_TYPES[0]
    table["torch.nn.parameter.Parameter"] = _TENSOR_TYPES[1]
    for name, dtype in _TORCH_DTYPES.items():
        table[f"torch.{name}"] = dtype
    for storage, dtype in _STORAGE_DTYPES.items():
        storage_type = _TorchStorageType(f"torch.{storage}", _TORCH_DTYPES[dtype])
        table[f"torch.{storage}"] = storage_type
        table[f"torch.cuda.{storage}"] = storage_type
    untyped = _TorchStorageType("torch.storage.UntypedStorage", None)
    table["torch.storage.UntypedStorage"] = table["torch.UntypedStorage"] = untyped
    table["collections.OrderedDict"] = collections.OrderedDict
    for builtin in (set, frozenset, complex, slice):
        table[f"builtins.{builtin.__name__}"] = builtin
    table["builtins.bytes"] = _SafeCallable("builtins.bytes", _bytes)
    table["builtins.bytearray"] = _SafeCallable("builtins.bytearray", _bytearray)
    table["_codecs.encode"] = _SafeCallable("_codecs.encode", _codecs_encode)
    table["numpy.ndarray"] = _NDARRAY
    table["numpy.dtype"] = _SafeCallable("numpy.dtype", _numpy_dtype)
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        table[f"{module}._reconstruct"] = _SafeCallable(f"{module}._reconstruct",
                                                        _numpy_reconstruct)
    # scalar and getattr are bound per file (they build opaque placeholders).
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        table[f"{module}.scalar"] = None
    table["builtins.getattr"] = None
    return table


_STATIC_GLOBALS = _static_globals()

SAFE_GLOBALS = tuple(sorted(_STATIC_GLOBALS))
"""Every global :func:`read_torch` resolves to kctx's own code (see the module docstring)."""


# --------------------------------------------------------------------------- the reader


class _Reader:
    """State of one :func:`read_torch` call: the file, its globals, its storages."""

    def __init__(self, path, opaque_names):
        self.path = path
        self.opaque_names = frozenset(opaque_names)
        self.opaque_classes = {}
        self.storages = {}
        self.byteorder = "<"
        self.zip_file = None
        self.zip_prefix = ""
        self.legacy_bytes = {}
        self.globals = dict(_STATIC_GLOBALS)
        for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
            name = f"{module}.scalar"
            self.globals[name] = _SafeCallable(name, self._numpy_scalar_factory(name))
        self.globals["builtins.getattr"] = _SafeCallable("builtins.getattr", self._getattr)

    # ---- globals

    def received(self):
        return f"Received: path={self.path!r}"

    def opaque_class(self, name):
        cls = self.opaque_classes.get(name)
        if cls is None:
            short = name.rsplit(".", 1)[-1]
            cls = _OpaqueMeta(short, (OpaqueObject,), {
                "__slots__": (), "name": name, "__module__": __name__,
                "__qualname__": f"OpaqueObject[{name}]"})
            self.opaque_classes[name] = cls
        return cls

    def _getattr(self, obj, attribute):
        if (not isinstance(obj, type) or not issubclass(obj, OpaqueObject)
                or not isinstance(attribute, str) or not attribute.isidentifier()):
            raise UnsafeCheckpointError(
                "Refusing builtins.getattr: a checkpoint may only use it to name a method of an "
                f"allow-listed class. Received: getattr({obj!r}, {attribute!r}) in "
                f"path={self.path!r}", "builtins.getattr", self.path)
        return self.opaque_class(f"{obj.name}.{attribute}")

    def _numpy_scalar_factory(self, name):
        def scalar(dtype, obj=None):
            value = _numpy_scalar_value(dtype, obj)
            if value is None:  # a dtype kctx does not rebuild: keep it inert
                return self.opaque_class(name)(dtype, obj)
            return value
        return scalar

    def find_class(self, module, name):
        if not isinstance(module, str) or not isinstance(name, str):
            raise UnsafeCheckpointError(
                f"Refusing a malformed global ({module!r}, {name!r}). {self.received()}",
                repr((module, name)), self.path)
        if (module, name) in _compat_pickle.NAME_MAPPING:  # py2 names, as pickle does
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        full = f"{module}.{name}"
        found = self.globals.get(full)
        if found is not None:
            return found
        if full in self.opaque_names:
            return self.opaque_class(full)
        if "." in name and f"{module}.{name.split('.')[0]}" in self.opaque_names:
            # Protocol 4 names a method as "Class.method" (protocol 2 uses getattr).
            return self.opaque_class(full)
        alias = f" (os.{name})" if module in ("posix", "nt") else ""
        raise UnsafeCheckpointError(
            f"Refusing to load the checkpoint: its pickle references the global '{full}'"
            f"{alias}, which is not on kctx's allow-list of tensor, container and data types. "
            "Nothing was imported or run (unpickling calls such globals; this is how a "
            "checkpoint executes code). If the file comes from a source you trust and "
            f"'{full}' is a data class, pass allowed_objects=['{full}'] to read it as an inert "
            f"OpaqueObject. {self.received()}", full, self.path)

    def persistent_load(self, saved_id):
        if not isinstance(saved_id, tuple) or not saved_id:
            raise ValueError(f"Malformed persistent id {saved_id!r}. {self.received()}")
        typename = saved_id[0]
        if isinstance(typename, bytes):
            typename = typename.decode("ascii")
        if typename != "storage" or len(saved_id) not in (5, 6):
            raise ValueError(f"Unsupported persistent id {typename!r} (kctx reads tensors and "
                             f"storages only). {self.received()}")
        storage_type, key, _location, numel = saved_id[1:5]
        view = saved_id[5] if len(saved_id) == 6 else None
        if not isinstance(storage_type, _TorchStorageType):
            raise ValueError(f"A storage's type must be a torch storage class. Received: "
                             f"{storage_type!r}. {self.received()}")
        if isinstance(key, bytes):
            key = key.decode("ascii")
        if not isinstance(key, str):
            raise ValueError(f"Storage keys must be strings. Received: {key!r}. "
                             f"{self.received()}")
        _check_int("numel", numel)
        dtype = storage_type.dtype or _UINT8
        if dtype.code is None:
            raise ValueError(f"{dtype.name} tensors are not supported: NumPy has no such dtype. "
                             f"{self.received()}")
        storage = self.storages.get(key)
        if storage is None:
            storage = self.storages[key] = _StorageRef(key, dtype, numel)
        if view is not None:  # legacy (view_key, offset, size), in elements
            if not isinstance(view, tuple) or len(view) != 3:
                raise ValueError(f"Malformed storage view {view!r}. {self.received()}")
            view_key, offset, size = view
            _check_int("view offset", offset)
            _check_int("view size", size)
            if offset + size > storage.numel:
                raise ValueError(f"Storage view {view!r} lies outside its storage of "
                                 f"{storage.numel} elements. {self.received()}")
            storage = self.storages.setdefault(
                ("view", view_key), _StorageRef(view_key, storage.dtype, size, storage, offset))
        return storage

    def unpickler(self, file, persistent=True):
        reader = self

        class RestrictedUnpickler(pickle.Unpickler):
            def find_class(self, module, name):
                return reader.find_class(module, name)

            def persistent_load(self, saved_id):
                if not persistent:
                    raise ValueError("Unexpected persistent id outside the main pickle.")
                return reader.persistent_load(saved_id)

        return RestrictedUnpickler(file, encoding="utf-8")

    # ---- storages and tensors

    def storage_bytes(self, storage):
        if self.zip_file is not None:
            name = f"{self.zip_prefix}data/{storage.key}"
            try:
                return self.zip_file.read(name)
            except KeyError:
                raise ValueError(f"The checkpoint has no record {name!r} for storage "
                                 f"{storage.key!r}. {self.received()}") from None
        if storage.key not in self.legacy_bytes:
            raise ValueError(f"The checkpoint has no data for storage {storage.key!r}. "
                             f"{self.received()}")
        return self.legacy_bytes[storage.key]

    def storage_array(self, storage):
        dtype = storage.dtype
        size = (storage.numel,)
        return self.tensor_array(_LazyTensor(storage, 0, size, (1,), dtype, None))

    def tensor_array(self, tensor):
        dtype = tensor.dtype
        if not isinstance(dtype, _TorchDtype):
            raise ValueError(f"A tensor needs a torch dtype. Received: {dtype!r}. "
                             f"{self.received()}")
        if dtype.code is None:
            raise ValueError(f"{dtype.name} tensors are not supported: NumPy has no such "
                             f"dtype. {self.received()}")
        offset, size, stride = tensor.offset, tensor.size, tensor.stride
        _check_int("storage_offset", offset)
        size, stride = _check_int_tuple("size", size), _check_int_tuple("stride", stride)
        if len(size) != len(stride):
            raise ValueError(f"A tensor's size {size} and stride {stride} differ in length. "
                             f"{self.received()}")
        raw = tensor.storage.data(self)
        itemsize = dtype.itemsize
        capacity = len(raw) // itemsize
        code = "u2" if dtype.code == "bf16" else dtype.code
        file_dtype = np.dtype(self.byteorder + code)
        if math.prod(size) == 0:
            values = np.empty(size, dtype=file_dtype)
        else:
            last = offset + sum((n - 1) * s for n, s in zip(size, stride))
            if last >= capacity:
                raise ValueError(
                    f"A tensor of size {size}, stride {stride} and offset {offset} reads past "
                    f"its storage of {capacity} {dtype.name} elements: corrupt checkpoint. "
                    f"{self.received()}")
            base = np.frombuffer(raw, dtype=file_dtype, count=capacity)
            values = np.lib.stride_tricks.as_strided(
                base[offset:], shape=size, strides=tuple(s * itemsize for s in stride),
                writeable=False).copy()
        if dtype.code == "bf16":
            # NumPy has no bfloat16: its 16 bits are the high half of a float32.
            values = (values.astype(np.uint32) << 16).view(np.float32)
        elif dtype.code == "b1":
            values = values.view(np.uint8) != 0
        else:
            values = values.astype(file_dtype.newbyteorder("="), copy=False)
        metadata = tensor.metadata
        if isinstance(metadata, dict):
            if metadata.get("conj"):
                values = np.conj(values)
            if metadata.get("neg"):
                values = np.negative(values)
        # (np.ascontiguousarray would turn a 0-d array into a 1-d one.)
        return values if values.flags.c_contiguous else values.copy()

    # ---- turning placeholders into NumPy values

    def resolve(self, obj):
        memo = {}

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
                    out.state = item.state
            elif isinstance(item, _Frozen):
                out = item.name
            elif isinstance(item, dict):
                memo[key] = (item, item)
                for k, v in list(item.items()):
                    item[k] = walk(v)
                if type(item) is not dict and hasattr(item, "__dict__"):
                    for k, v in list(vars(item).items()):
                        vars(item)[k] = walk(v)
                return item
            elif isinstance(item, list):
                memo[key] = (item, item)
                item[:] = [walk(v) for v in item]
                return item
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
            else:
                out = item
            memo[key] = (item, out)
            return out

        return walk(obj)

    # ---- the two file formats

    def load_zip(self):
        try:
            self.zip_file = zipfile.ZipFile(self.path)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError) as error:
            raise ValueError(f"Corrupt or truncated zip checkpoint ({error}). "
                             f"{self.received()}") from error
        names = self.zip_file.namelist()
        pickles = [n for n in names
                   if n == "data.pkl" or (n.endswith("/data.pkl") and n.count("/") == 1)]
        if len(pickles) != 1:
            hint = " (a NumPy .npz?)" if any(n.endswith(".npy") for n in names) else ""
            raise ValueError(
                "Not a PyTorch checkpoint: a zip archive without (exactly one) "
                f"'<folder>/data.pkl' record{hint}. {self.received()}")
        self.zip_prefix = pickles[0][:-len("data.pkl")]
        if f"{self.zip_prefix}constants.pkl" in names:
            raise ValueError("This is a TorchScript archive (torch.jit.save), which holds code; "
                             f"kctx reads torch.save checkpoints only. {self.received()}")
        if f"{self.zip_prefix}byteorder" in names:
            order = self.zip_file.read(f"{self.zip_prefix}byteorder")
            if order not in (b"little", b"big"):
                raise ValueError(f"Unknown byteorder record {order!r}. {self.received()}")
            self.byteorder = "<" if order == b"little" else ">"
        data = self.zip_file.read(pickles[0])
        return self.unpickler(io.BytesIO(data)).load()

    def load_legacy(self, file):
        try:
            magic = self.unpickler(file, persistent=False).load()
        except UnsafeCheckpointError:
            raise
        except Exception as error:
            raise ValueError(
                "Not a PyTorch checkpoint: neither a zip archive written by torch.save nor "
                f"the legacy format (which starts with torch's magic number) ({error}). "
                f"{self.received()}") from error
        if magic != _TORCH_MAGIC_NUMBER:
            raise ValueError(
                "Not a PyTorch checkpoint: a pickle, but not one written by torch.save "
                f"(no torch magic number). {self.received()}")
        protocol = self.unpickler(file, persistent=False).load()
        if protocol != _TORCH_PROTOCOL_VERSION:
            raise ValueError(f"Unsupported legacy torch protocol version {protocol!r} "
                             f"(expected {_TORCH_PROTOCOL_VERSION}). {self.received()}")
        self.unpickler(file, persistent=False).load()  # sys_info: endianness, type sizes
        result = self.unpickler(file).load()
        keys = self.unpickler(file, persistent=False).load()
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ValueError(f"Malformed storage key list. {self.received()}")
        for key in keys:
            storage = self.storages.get(key)
            if storage is None:
                raise ValueError(f"Storage {key!r} is listed but no tensor uses it. "
                                 f"{self.received()}")
            header = file.read(8)
            if len(header) != 8:
                raise ValueError(f"Truncated checkpoint: storage {key!r} is missing. "
                                 f"{self.received()}")
            # Legacy storages are always little-endian: an int64 element count, the elements.
            numel = int.from_bytes(header, "little", signed=True)
            _check_int("storage numel", numel)
            nbytes = numel * storage.dtype.itemsize
            data = file.read(nbytes)
            if len(data) != nbytes:
                raise ValueError(f"Truncated checkpoint: storage {key!r} needs {nbytes} bytes, "
                                 f"the file has {len(data)}. {self.received()}")
            self.legacy_bytes[key] = data
        return result


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
    return path


def _check_allowed_objects(allowed_objects):
    if isinstance(allowed_objects, (str, bytes)):
        raise ValueError("`allowed_objects` must be an iterable of 'module.Name' strings, not "
                         f"one string. Received: allowed_objects={allowed_objects!r}")
    names = tuple(allowed_objects or ())
    for name in names:
        if not isinstance(name, str) or not _IDENTIFIER_PATH.match(name):
            raise ValueError("`allowed_objects` entries must be dotted names such as "
                             "'mmengine.logging.history_buffer.HistoryBuffer'. "
                             f"Received: allowed_objects={allowed_objects!r}")
    return names


def read_torch(path, allowed_objects=()):
    """Read a ``torch.save`` file into NumPy without running its pickle's code.

    Reads the zip format (torch >= 1.6: ``<folder>/data.pkl``, ``<folder>/data/<key>``
    storages, ``<folder>/byteorder``) and the legacy format
    (``torch.save(..., _use_new_zipfile_serialization=False)``); not TorchScript
    archives nor the tar format of torch < 0.4. Every tensor and ``nn.Parameter``
    becomes a C-contiguous ``numpy.ndarray`` copy in native byte order, with its
    storage offset and strides honoured (views, transposes, tensors sharing a
    storage). NumPy has no bfloat16: bfloat16 tensors come back as float32 (exact).
    Conjugate / negative views are applied. Dicts, ``OrderedDict`` (with their
    ``_metadata``), lists and tuples are kept. NumPy arrays, scalars and plain
    dtypes in the metadata come back as NumPy values; torch dtypes as their name
    (``"torch.float16"``); allow-listed data classes as :class:`OpaqueObject`.
    A tensor's ``requires_grad`` and a Parameter's Python attributes are dropped.

    Args:
        path: the checkpoint file (str or ``os.PathLike``).
        allowed_objects: extra dotted global names (``"package.module.Class"``)
            to accept, besides :data:`DEFAULT_OPAQUE_OBJECTS`, as inert
            :class:`OpaqueObject` placeholders. The class is never imported;
            only list names of data classes from a source you trust.

    Returns:
        The unpickled object, tensors replaced by arrays.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        UnsafeCheckpointError: the pickle names a global outside the allow-list
            (the message names it, e.g. ``posix.system``, and the file);
            raised before the pickle calls anything.
        ValueError: not a PyTorch checkpoint, a truncated or corrupt one, or a
            tensor dtype NumPy lacks (float8, quantized).

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
    reader = _Reader(path, DEFAULT_OPAQUE_OBJECTS + names)
    try:
        with open(path, "rb") as file:
            head = file.read(512)
            if not head:
                raise ValueError(f"Not a PyTorch checkpoint: the file is empty. "
                                 f"{reader.received()}")
            if head[:4] == b"PK\x03\x04":
                result = reader.load_zip()
            elif head[257:262] == b"ustar":
                raise ValueError("A tar checkpoint (PyTorch < 0.4); kctx does not read this "
                                 f"format (re-save it with a recent torch). {reader.received()}")
            else:
                file.seek(0)
                result = reader.load_legacy(file)
            return reader.resolve(result)
    except UnsafeCheckpointError as error:
        if error.path is None:  # raised by a placeholder: add the file
            raise UnsafeCheckpointError(f"{error} {reader.received()}", error.global_name,
                                        path) from None
        raise
    except OSError:  # permissions, I/O: as they are
        raise
    except Exception as error:  # whatever a malformed pickle or archive makes fail
        if isinstance(error, ValueError) and "Received: path=" in str(error):
            raise
        raise ValueError(f"Corrupt or truncated PyTorch checkpoint ({type(error).__name__}: "
                         f"{error}). {reader.received()}") from error
    finally:
        if reader.zip_file is not None:
            reader.zip_file.close()


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
        return f"a mapping whose {', '.join(repr(k) for k in bad)} are not arrays"
    return f"a {type(value).__name__}"


def torch_state_dict(path_or_object, allowed_objects=()):
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
        checkpoint = read_torch(path_or_object, allowed_objects=allowed_objects)
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
                rejected.append(f"[{key!r}] is {_describe(obj[key])}")
        return None

    weights = find(checkpoint, 2)
    if weights is None:
        if isinstance(checkpoint, collections.abc.Mapping):
            keys = [k for k in checkpoint][:20]
            why = f"; {'; '.join(rejected)}" if rejected else ""
            raise ValueError(
                "No state dict (a mapping of parameter names to arrays) in the checkpoint: "
                f"looked at the checkpoint itself and under {STATE_DICT_KEYS}{why}. Top-level "
                f"keys: {keys}. Received: {where}")
        raise ValueError("No state dict in the checkpoint: it holds "
                         f"{_describe(checkpoint)}, not a mapping. Received: {where}")
    weights = dict(weights)
    if all(k.startswith("module.") for k in weights):
        weights = {k[len("module."):]: v for k, v in weights.items()}
    return weights
