"""NumPy arrays, dtypes and scalars rebuilt from their pickled bytes (NumPy's own
unpickling helpers are never called); exotic dtypes (structured, datetime, with
metadata) stay inert placeholders."""

import math

import numpy as np

from kctx.checkpoints.errors import CheckpointError, check_int_tuple, describe
from kctx.checkpoints.placeholders import _NumpyDtype


def _as_bytes(name, value):
    # py2-era pickles store bytes as latin-1 str.
    if isinstance(value, str):
        value = value.encode("latin-1")
    if not isinstance(value, (bytes, bytearray)):
        raise CheckpointError(f"`{name}` must be bytes. Received: {type(value).__name__}")
    return bytes(value)


def _build_numpy_array(array, resolve):
    """The ndarray of a ``_NumpyArray`` (None: a dtype kctx does not rebuild)."""
    state = array.state
    if isinstance(state, tuple) and len(state) == 5:
        state = state[1:]
    if not isinstance(state, tuple) or len(state) != 4:
        raise CheckpointError("A pickled NumPy array has no (or a malformed) state.")
    shape, dtype, is_fortran, rawdata = state
    shape = check_int_tuple("shape", shape)
    if not isinstance(dtype, _NumpyDtype):
        raise CheckpointError(f"A pickled NumPy array's dtype must be a numpy.dtype. Received: "
                         f"{type(dtype).__name__}")
    numpy_dtype = dtype.to_numpy()
    if numpy_dtype is None:
        return None
    order = "F" if is_fortran else "C"
    count = math.prod(shape)
    if numpy_dtype.hasobject:
        if not isinstance(rawdata, list) or len(rawdata) != count:
            raise CheckpointError(f"A pickled object array of shape {describe(shape)} needs a list of {count} "
                             "items.")
        out = np.empty(count, dtype=object)
        for i, item in enumerate(rawdata):
            out[i] = resolve(item)
        return out.reshape(shape, order=order)
    rawdata = _as_bytes("rawdata", rawdata)
    if len(rawdata) != count * numpy_dtype.itemsize:
        raise CheckpointError(f"A pickled NumPy array of shape {describe(shape)} and dtype {numpy_dtype} needs "
                         f"{count * numpy_dtype.itemsize} bytes. Received: {len(rawdata)} bytes")
    out = np.frombuffer(rawdata, dtype=numpy_dtype, count=count).reshape(shape, order=order)
    # A copy in native byte order, as numpy's own unpickling returns (order kept).
    return out.astype(numpy_dtype.newbyteorder("="), order="K")


def _numpy_scalar_value(dtype, obj):
    """The NumPy scalar of ``scalar(dtype, obj)``; None where the dtype is not rebuilt."""
    if not isinstance(dtype, _NumpyDtype):
        raise CheckpointError(f"numpy's scalar needs a numpy.dtype. Received: {type(dtype).__name__}")
    numpy_dtype = dtype.to_numpy()
    if numpy_dtype is None:
        return None
    if numpy_dtype.hasobject:
        return obj
    raw = _as_bytes("scalar data", obj)
    if len(raw) != numpy_dtype.itemsize:
        raise CheckpointError(f"A pickled NumPy {numpy_dtype} scalar needs {numpy_dtype.itemsize} "
                         f"bytes. Received: {len(raw)} bytes")
    if numpy_dtype.kind == "b":
        return np.bool_(raw != b"\x00")
    return np.frombuffer(raw, dtype=numpy_dtype, count=1)[0]
