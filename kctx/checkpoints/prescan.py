"""A pass over a pickle's opcodes before anything is built from it.

:func:`scan_pickle` reads the opcode stream with :mod:`pickletools` (which builds
nothing) and refuses, with a clear error, what would make the C unpickler or the code
after it misbehave on a hostile file:

* the extension-registry opcodes ``EXT1`` / ``EXT2`` / ``EXT4``: the C unpickler serves
  them from ``copyreg``'s process-wide cache without asking ``find_class``, so they
  would bypass the allow-list in a process that ever unpickled one;
* memo indices beyond the number of opcodes (``LONG_BINPUT 2**30`` makes the C
  unpickler grow its memo to a gigabyte from a 10-byte pickle), and reads of indices
  never stored;
* nesting deeper than :data:`MAX_DEPTH` (a 200,000-deep tuple inside a set or as a dict
  key crashes CPython's unguarded hash recursion);
* declared lengths past the end of the stream (a file is read through
  :class:`BoundedReader`, so a declared length never allocates more than the file).

Time and memory are linear in the stream's size: one opcode at a time, one depth per
stack entry.
"""

import io
import pickletools

from kctx.checkpoints.errors import (
    CheckpointError,
    CheckpointLimitError,
    UnsafeCheckpointError,
)

MAX_DEPTH = 100
"""The deepest nesting of containers a checkpoint may build (state dicts and training
checkpoints nest a few levels; CPython's hash of nested tuples recurses without a
guard, and the walk that replaces the stand-ins recurses once per level)."""

_EXTENSIONS = {"EXT1", "EXT2", "EXT4"}
_PUTS = {"PUT", "BINPUT", "LONG_BINPUT"}
_GETS = {"GET", "BINGET", "LONG_BINGET"}
_IN_PLACE = {"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"}
_HASHABLE = {"EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "FROZENSET"}
MAX_TUPLE_NODES = 10**6
"""The most nodes a tuple or frozenset may expand to, counting every shared element
each time it appears (hashing and comparing one visits them all: a 40-level DAG of
tuples reusing memo entries expands to 2**40)."""
MAX_TUPLE_WORK = 10**7
"""The most expanded tuple nodes a pickle may place into containers, in all."""
_MARK = object()


class BoundedReader:
    """``size`` bytes of an open binary ``file`` from its current position, read so that
    no request asks the file for more than what is left: a pickle's declared length
    never makes Python allocate more than the file holds. Seekable within the window."""

    def __init__(self, file, size):
        self.file, self.start = file, file.tell()
        self.end = self.start + size

    def _left(self):
        return max(self.end - self.file.tell(), 0)

    def read(self, n=-1):
        left = self._left()
        return self.file.read(left if n is None or n < 0 else min(n, left))

    def readinto(self, buffer):
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def readline(self, limit=-1):
        left = self._left()
        return self.file.readline(left if limit is None or limit < 0 else min(limit, left))

    def tell(self):
        return self.file.tell() - self.start

    def seek(self, offset, whence=io.SEEK_SET):
        if whence == io.SEEK_SET:
            offset += self.start
        elif whence == io.SEEK_END:
            offset, whence = self.end + offset, io.SEEK_SET
        return self.file.seek(offset, whence) - self.start


def _pop_to_mark(stack):
    items = []
    while stack:
        item = stack.pop()
        if item is _MARK:
            return items
        items.append(item)
    raise CheckpointError("the pickle pops a mark it never set")


def scan_pickle(stream, max_depth=MAX_DEPTH):
    """Check one pickle (up to its STOP) read from ``stream``; returns the opcode count.

    Raises:
        UnsafeCheckpointError: an extension-registry opcode.
        CheckpointLimitError: nesting deeper than ``max_depth`` (``limit="max_depth"``),
            or a memo index beyond the pickle's size (``limit="memo"``).
        ValueError: a malformed or truncated stream.
    """
    stack, memo, count, work = [], {}, 0, 0
    for opcode, argument, position in pickletools.genops(stream):
        count += 1
        name = opcode.name
        if name in _EXTENSIONS:
            raise UnsafeCheckpointError(
                f"Refusing the pickle opcode {name} at byte {position}: it loads a global "
                "from Python's extension registry (copyreg), outside the allow-list.", name)
        if name in _PUTS or name == "MEMOIZE":
            index = len(memo) if name == "MEMOIZE" else argument
            if not isinstance(index, int) or index < 0 or index > count:
                raise CheckpointLimitError(
                    f"The pickle stores memo entry {index if isinstance(index, int) else '?'} "
                    f"at byte {position}, beyond its {count} opcodes so far: a memo that "
                    "large only serves to exhaust memory.", "memo")
            if not stack or stack[-1] is _MARK:
                raise CheckpointError(f"the pickle memoizes an empty stack at byte {position}")
            memo[index] = stack[-1]
            continue
        if name in _GETS:
            if argument not in memo:
                raise CheckpointError(f"the pickle reads memo entry {argument} at byte "
                                      f"{position}, which it never stored")
            stack.append(memo[argument])
            continue
        if name == "MARK":
            stack.append(_MARK)
            continue
        if name == "STOP":
            return count
        if name in ("PROTO", "FRAME"):
            continue
        before = opcode.stack_before
        if pickletools.markobject in before:
            marked = _pop_to_mark(stack)
            head = [stack.pop() for _ in range(before.index(pickletools.markobject))]
        else:
            marked, head = [], [stack.pop() for _ in range(len(before))]
        if name == "POP" or name == "POP_MARK":
            continue
        if name == "DUP":
            stack.extend(head[::-1] * 2)
            continue
        if any(item is _MARK for item in head):
            raise CheckpointError(f"the pickle's {name} at byte {position} finds a mark")
        if not opcode.stack_after:
            continue
        # Each entry: (nesting depth, expanded nodes if it is a tuple / frozenset, else 0).
        if name in _IN_PLACE:  # the container (deepest popped) gains the other items
            container, items = head[-1], head[:-1] + marked
            depth = max([container[0]] + [1 + item[0] for item in items])
        else:
            items = head + marked
            depth = 1 + max(item[0] for item in items) if items else 0
        nodes = 1 + sum(max(item[1], 1) for item in items) if name in _HASHABLE else 0
        work += sum(item[1] for item in items)
        if depth > max_depth:
            raise CheckpointLimitError(
                f"The pickle nests containers {depth} deep at byte {position}, deeper than "
                f"max_depth={max_depth}.", "max_depth")
        if nodes > MAX_TUPLE_NODES or work > MAX_TUPLE_WORK:
            raise CheckpointLimitError(
                f"The pickle's tuples expand to more than {MAX_TUPLE_NODES} nodes (shared "
                f"elements counted each time) at byte {position}: hashing or comparing them "
                "would not end.", "tuple_nodes")
        stack.append((depth, nodes))
    raise CheckpointError("the pickle ends without STOP")
