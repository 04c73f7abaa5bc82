"""The restricted unpickler and its allow-list.

:class:`RestrictedLoader` unpickles with a ``pickle.Unpickler`` whose ``find_class``
never imports the module a global names: it looks the name up in a fixed allow-list
(:data:`SAFE_GLOBALS`) and returns kctx's own stand-in (:mod:`kctx.checkpoints.placeholders`);
any other name raises :class:`~kctx.checkpoints.UnsafeCheckpointError` before the pickle
can call anything. Allow-listed data classes (:data:`DEFAULT_OPAQUE_OBJECTS` plus the
caller's ``allowed_objects``) become inert :class:`~kctx.checkpoints.OpaqueObject`
placeholders. The opcode stream has been checked by :mod:`kctx.checkpoints.prescan`
first (no extension-registry opcodes, bounded memo and nesting).
"""

import _compat_pickle
import pickle

from kctx.checkpoints.errors import (
    CheckpointError,
    UnsafeCheckpointError,
    check_int,
    describe,
    describe_name,
)
from kctx.checkpoints.numpy_values import _numpy_scalar_value
from kctx.checkpoints.placeholders import (
    _STORAGE_DTYPES,
    _TORCH_DTYPES,
    _UINT8,
    OpaqueObject,
    _LazyTensor,
    _Marker,
    _NumpyArray,
    _NumpyDtype,
    _OpaqueMeta,
    _OrderedDictState,
    _SafeCallable,
    _StorageRef,
    _TorchDtype,
    _TorchStorageType,
)

DEFAULT_OPAQUE_OBJECTS = ("mmengine.logging.history_buffer.HistoryBuffer",)
"""Data classes that load as :class:`OpaqueObject` without being asked for.

mmengine's ``CheckpointHook`` (``Runner.save_checkpoint``) stores
``message_hub.state_dict()``, whose ``log_scalars`` are ``HistoryBuffer``
objects (their ``_log_history`` / ``_count_history`` arrays are in ``.state``).
"""

# --------------------------------------------------------------------------- safe functions


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
        raise CheckpointError(f"_rebuild_tensor_v3 needs a torch dtype. Received: {describe(dtype)}")
    return _LazyTensor(storage, storage_offset, size, stride, dtype, metadata)


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None, state=None):
    if not isinstance(data, _LazyTensor):
        raise CheckpointError(f"A Parameter must wrap a tensor. Received: {type(data).__name__}")
    return data


_TENSOR_TYPES = (_Marker("torch.Tensor"), _Marker("torch.nn.parameter.Parameter"))


def _rebuild_from_type_v2(func, new_type, args, state):
    if (not any(func is f for f in _REBUILD_FUNCTIONS)
            or not any(new_type is t for t in _TENSOR_TYPES)):
        raise UnsafeCheckpointError(
            "torch._tensor._rebuild_from_type_v2 is only allowed with a torch._utils rebuild "
            f"function and torch.Tensor / Parameter. Received: func={describe(func)}, "
            f"new_type={describe(new_type)}", "torch._tensor._rebuild_from_type_v2")
    return func(*args)


def _codecs_encode(obj, encoding="utf-8", errors="strict"):
    if (not isinstance(obj, str) or errors != "strict"
            or encoding not in ("latin1", "latin-1", "utf-8", "utf8", "ascii")):
        raise UnsafeCheckpointError(
            "_codecs.encode is only allowed on a str with latin-1 / utf-8 / ascii. Received: "
            f"{type(obj).__name__}, encoding={describe(encoding)}", "_codecs.encode")
    return obj.encode(encoding)


def _bytes(source=b"", encoding=None):
    # Protocol 2 pickles b"" as bytes(); never from a size (bytes(10**12)).
    if isinstance(source, str) and encoding is not None:
        return _codecs_encode(source, encoding)
    if isinstance(source, (bytes, bytearray)) and encoding is None:
        return bytes(source)
    raise CheckpointError(f"bytes / bytearray are only rebuilt from bytes or an encoded str. "
                     f"Received: {type(source).__name__}")


def _bytearray(source=b"", encoding=None):
    return bytearray(_bytes(source, encoding))


def _numpy_dtype(*args):
    return _NumpyDtype(args)


_NDARRAY = _Marker("numpy.ndarray")


def _numpy_reconstruct(subtype, shape=(0,), dtype_code=b"b"):
    if subtype is not _NDARRAY:
        raise UnsafeCheckpointError(
            "numpy's _reconstruct is only allowed for numpy.ndarray. Received: "
            f"{describe(subtype)}",
            "numpy.core.multiarray._reconstruct")
    return _NumpyArray((shape, dtype_code))


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
    table["collections.OrderedDict"] = _OrderedDictState
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


class RestrictedLoader:
    """One file's unpickling: its globals (``getattr`` and NumPy's ``scalar`` bound to
    this file's opaque classes), the opaque classes made so far, and the storages the
    pickle declared (by key and dtype)."""

    def __init__(self, opaque_names):
        self.opaque_names = frozenset(opaque_names)
        self.opaque_classes = {}
        self.storages = {}
        self.globals = dict(_STATIC_GLOBALS)
        for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
            name = f"{module}.scalar"
            self.globals[name] = _SafeCallable(name, self._numpy_scalar_factory(name))
        self.globals["builtins.getattr"] = _SafeCallable("builtins.getattr", self._getattr)

    # ---- globals

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
                f"allow-listed class. Received: getattr({describe(obj)}, {describe(attribute)})",
                "builtins.getattr")
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
                f"Refusing a malformed global ({describe(module)}, {describe(name)}).",
                "malformed")
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
        shown = describe_name(full)
        alias = f" (os.{describe_name(name)})" if module in ("posix", "nt") else ""
        raise UnsafeCheckpointError(
            f"Refusing to load the checkpoint: its pickle references the global '{shown}'"
            f"{alias}, which is not on kctx's allow-list of tensor, container and data types. "
            "Nothing was imported or run (unpickling calls such globals; this is how a "
            "checkpoint executes code). If the file comes from a source you trust and the "
            "global is a data class, pass its name in allowed_objects to read it as an inert "
            "OpaqueObject.", shown)

    def persistent_load(self, saved_id):
        if not isinstance(saved_id, tuple) or not saved_id:
            raise CheckpointError(f"Malformed persistent id: {describe(saved_id)}.")
        typename = saved_id[0]
        if isinstance(typename, bytes):
            typename = typename.decode("ascii")
        if typename != "storage" or len(saved_id) not in (5, 6):
            raise CheckpointError(f"Unsupported persistent id {describe(typename)} (kctx reads "
                             "tensors and storages only).")
        storage_type, key, _location, numel = saved_id[1:5]
        view = saved_id[5] if len(saved_id) == 6 else None
        if not isinstance(storage_type, _TorchStorageType):
            raise CheckpointError(f"A storage's type must be a torch storage class. Received: "
                             f"{describe(storage_type)}.")
        if isinstance(key, bytes):
            key = key.decode("ascii")
        if not isinstance(key, str):
            raise CheckpointError(f"Storage keys must be strings. Received: {describe(key)}.")
        check_int("numel", numel)
        dtype = storage_type.dtype or _UINT8
        if dtype.code is None:
            raise CheckpointError(f"{dtype.name} tensors are not supported: NumPy has no such "
                             "dtype.")
        # One key may be declared with several dtypes: each reading reinterprets the same
        # bytes (the longest declaration decides how many are read).
        storage = self.storages.get((key, dtype.name))
        if storage is None:
            storage = self.storages[(key, dtype.name)] = _StorageRef(key, dtype, numel)
        if view is not None:  # legacy (view_key, offset, size), in elements
            if not isinstance(view, tuple) or len(view) != 3:
                raise CheckpointError(f"Malformed storage view: {describe(view)}.")
            view_key, offset, size = view
            check_int("view offset", offset)
            check_int("view size", size)
            if offset + size > storage.numel:
                raise CheckpointError(f"A storage view of {size} elements at {offset} lies outside "
                                 f"its storage of {storage.numel} elements.")
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
                    raise CheckpointError("Unexpected persistent id outside the main pickle.")
                return reader.persistent_load(saved_id)

        return RestrictedUnpickler(file, encoding="utf-8")
