"""The reader's errors and the bounded, escaped descriptions of attacker values in them.

A message never formats an object from the file with ``repr``: a pickle can build a
structure whose ``repr`` doubles at every level (a DAG through the memo) or a name of
megabytes with terminal escape codes. :func:`describe` gives a type and a short,
escaped summary instead, bounded whatever the value.
"""

import pickle
import reprlib

MAX_DESCRIPTION = 80
MAX_NAME = 200


class CheckpointError(ValueError):
    """The file cannot be read as a checkpoint; the message says why (and, from
    :func:`~kctx.checkpoints.read_torch`, names the file)."""


class UnsafeCheckpointError(pickle.UnpicklingError, CheckpointError):
    """The checkpoint's pickle names a global that is not on the allow-list, or misuses
    an allowed one.

    Raised from ``find_class`` (or by a stand-in), i.e. before the pickle could call
    it. Both a ``pickle.UnpicklingError`` and a ``ValueError``. ``global_name`` is the
    refused name, escaped and shortened (``"posix.system"`` for ``os.system`` pickled
    on Linux) and ``path`` the file.
    """

    def __init__(self, message, global_name=None, path=None):
        super().__init__(message)
        self.global_name = global_name
        self.path = path


class CheckpointLimitError(CheckpointError):
    """The file asks for more than a limit allows (bytes produced, nesting depth, memo
    size, pickle size): refused before the memory or time is spent. ``limit`` names the
    limit (``"max_bytes"``, ...)."""

    def __init__(self, message, limit=None):
        super().__init__(message)
        self.limit = limit


def escape(text, limit=MAX_DESCRIPTION):
    """``text`` with every non-printable character escaped (``\\x1b``...), cut to
    ``limit`` characters with the original length said."""
    text = str(text)
    cut = text[:limit]
    escaped = cut.encode("unicode_escape", "backslashreplace").decode("ascii")
    escaped = escaped.replace("\\\\", "\\")  # keep real backslashes single
    escaped = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in escaped)
    if len(text) > limit:
        escaped += f"... ({len(text)} characters)"
    return escaped


_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxtuple = _REPR.maxlist = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 4
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 40


def describe(value):
    """A bounded, escaped description of a value from the file: a string quoted, else
    its type and a short ``reprlib`` summary (at most about 120 characters, whatever
    the value)."""
    if isinstance(value, str):
        return f"'{escape(value)}'"
    try:
        summary = _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a stand-in's __repr__ may refuse
        summary = "..."
    return f"{type(value).__name__} {escape(summary)}"


def describe_name(name):
    """A global's dotted name from the file, escaped and cut to :data:`MAX_NAME`."""
    return escape(name, MAX_NAME)


def check_int(name, value, minimum=0):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CheckpointError(f"`{name}` must be an integer >= {minimum}. Received: {describe(value)}")


def check_int_tuple(name, value):
    if not isinstance(value, (tuple, list)):
        raise CheckpointError(f"`{name}` must be a tuple of integers. Received: {describe(value)}")
    for item in value:
        check_int(name, item)
    return tuple(value)
