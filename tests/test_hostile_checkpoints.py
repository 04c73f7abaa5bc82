"""kctx.checkpoints against crafted hostile .pth files, each read in a fresh child process.

Every case writes one file, and tests/hostile_checkpoint_probe.py (started with
``sys.executable``; it imports ``kctx.checkpoints`` alone, without TensorFlow) reads it in a
forked child under ``RLIMIT_AS`` (1.5 GiB of head room), killed after 10 s. The contract, for
every case (``violations`` below):

* the child exits normally: no signal (a C stack overflow is SIGSEGV), not killed at the
  deadline;
* it returns a value or raises a ``ValueError`` (``UnsafeCheckpointError`` and
  ``CheckpointLimitError`` are ValueErrors). A ``MemoryError``, raised or wrapped anywhere in
  the exception's cause / context chain, is a failure: the reader's own limits did not hold;
* within ``TIME_LIMIT`` seconds, with a peak RSS at most ``GROWTH_LIMIT_MB`` above a child
  that read a tiny checkpoint;
* an error message of at most ``MESSAGE_LIMIT`` characters, without control characters
  (U+0000-U+001F, U+007F-U+009F: no terminal escapes);
* a returned value holds no kctx-internal object (``_LazyTensor``, ``_StorageRef``,
  ``_NumpyDtype``, ``_Frozen`` ... placeholders) and passes the case's check;
* the case's marker file (what an executed payload would create) does not exist.

Expected behaviour per case (the ``CASES`` table below says the same in code).
``error``: must raise; ``ok``: must return (the check); ``either``: may raise, and when it
returns, the check holds (the arrays torch would give).

==================================  ======  ============================================
case                                expect  when it returns
==================================  ======  ============================================
dag-* (13 cases)                    error   (a DAG of shared tuples, 2**40 nodes, or of
                                            frozensets, 2**30, where the reader formats
                                            a value into its message, or hashes it)
views-2000-of-1MiB                  either  2000 float32 arrays equal to the storage
zero-stride-2GB                     either  (50000, 10000) float32, all 7.0
deflate-bomb-storage                either  float32 [0.0] (the tensor needs 4 bytes)
deflate-bomb-byteorder              error
memo-index-2^30                     either  None
legacy-storage-numel-2GiB           either  float32 [1.0] (the header claims 2 GiB)
deep-* (200,000-deep tuple)         either  the set / frozenset / dict holding it
deep-dict-key-state-dict            error   (no state dict)
ext-primed-os-system                error   UnsafeCheckpointError; os.system never runs
ext-registered-not-primed           error   UnsafeCheckpointError
ext-unregistered                    error
leak-tensor-in-set / -frozenset*    error   (NumPy arrays are not hashable)
leak-tensor-dict-key                error
leak-storage-dict-key               error
leak-tensor-in-slice                either  slice(array([1., 2.]), None, None)
leak-torch-dtype-in-frozenset       either  frozenset({"torch.float16"})
leak-numpy-dtype-in-frozenset       either  frozenset({dtype("float32")})
ordereddict-shadow-items-callable   either  {"w": array([1., 2.])} (torch_state_dict;
ordereddict-shadow-items-tensor     either  never {} and never a TypeError)
global-name-escape, global-name-4MB error   UnsafeCheckpointError, bounded and escaped
global-module-controls              error   (the same)
memory-error-is-memory-error        error   MemoryError itself, or a ValueError that
                                            neither wraps one nor says "corrupt"
fifo                                error   ValueError or OSError, within the time limit
zip-lzma-data-pkl                   error
zip-bzip2-storage                   error
zip-directory-offset-past-members   error   (header offsets below 0: seek's EINVAL)
storage-key-two-dtypes-v2           either  float32 [1.5, -2.0] and uint8 of the same
untyped-storage-two-dtypes-v3       either  bytes' first two (torch's reinterpretation)
test_fuzzed_fixture[<file>-<chunk>] either  (seeded mutants of two real fixtures; the
                                            contract only; 20 mutants per probe process)
test_committed_fixtures_still_load  ok      every committed .pth fixture (checkpoints,
  [<folder>]                                segnext, resnet, fid_inception) loads
==================================  ======  ============================================

The files are built by hand (pickle opcodes, zip records): no torch needed. The helpers of
tests/test_checkpoints.py write the usual records. To probe another copy of the reader (the
committed one, say: ``git show HEAD:kctx/checkpoints.py > /tmp/old/kctx/checkpoints.py``), set
``KCTX_PROBE_PACKAGE_DIR=/tmp/old/kctx``.
"""

import functools
import io
import json
import os
import pickle
import pickletools
import random
import struct
import subprocess
import sys
import zipfile
import zlib
from dataclasses import dataclass, field

import numpy as np
import pytest
from test_checkpoints import (
    MAGIC_NUMBER,
    legacy_bytes,
    op_call,
    op_global,
    op_int,
    op_storage,
    op_str,
    op_tensor,
    op_tuple,
    program,
    write_zip_checkpoint,
)

# The probe forks, limits RLIMIT_AS and reads /proc/self/status: Linux only.
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the probe needs fork, RLIMIT_AS and /proc (Linux)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "tests", "hostile_checkpoint_probe.py")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")

TIME_LIMIT = 5.0  # seconds for one read
GROWTH_LIMIT_MB = 300  # peak RSS above the tiny-checkpoint child
MESSAGE_LIMIT = 2000  # characters
DEADLINE = 10  # seconds before the probe kills a child
SUBPROCESS_TIMEOUT = 20  # seconds for one probe process with one job

ERROR, OK, EITHER = "error", "ok", "either"

# --------------------------------------------------------------------------- pickle opcodes

def put(index):
    return b"r" + index.to_bytes(4, "little")  # LONG_BINPUT


def get(index):
    return b"j" + index.to_bytes(4, "little")  # LONG_BINGET


# The DAGs number their memo entries from 0, as pickle does (the helpers use no memo), so
# that a reader bounding memo indices by the opcodes read so far still builds them.
def op_tuple_dag(depth=40, base=0):
    """t0 = (); t(i+1) = (t(i), t(i)): 2**depth nodes from 20 bytes per level."""
    ops = b")" + put(base) + b"0"
    for i in range(depth):
        ops += get(base + i) + get(base + i) + b"\x86" + put(base + i + 1) + b"0"
    return ops + get(base + depth)


def op_frozenset_dag(depth=30, base=0):
    """f0 = frozenset(); f(i+1) = frozenset({f(i), (f(i),)}) with the FROZENSET opcode:
    hashable (each frozenset's hash is computed once), a repr of 2**depth parts, two
    levels of nesting per step (60 in all)."""
    ops = op_call(op_global("builtins", "frozenset")) + put(base) + b"0"
    for i in range(depth):
        ops += b"(" + get(base + i) + get(base + i) + b"\x85" + b"\x91" + put(base + i + 1) + b"0"
    return ops + get(base + depth)


DEEP = 200_000


def op_deep_tuple(depth=DEEP):
    """((((),),),) ... depth levels: one byte per level (TUPLE1)."""
    return b")" + b"\x85" * depth


def op_tensor_args(storage, offset, size, stride, func="_rebuild_tensor_v2"):
    """op_tensor with opcodes (not ints) for offset, size and stride."""
    return op_call(op_global("torch._utils", func), storage, offset, size, stride, b"\x89",
                   op_call(op_global("collections", "OrderedDict")))


def float_tensor(key="0", values=2):
    """A float32 tensor of ``values`` elements over FloatStorage ``key`` (opcodes)."""
    return op_tensor(op_storage("FloatStorage", key, values), 0, (values,), (1,))


ONE_TWO = {"0": np.array([1.0, 2.0], "<f4").tobytes()}


def protocol4(*body):
    return b"\x80\x04" + b"".join(body) + b"."


def stack_global(module, name):
    return op_str(module) + op_str(name) + b"\x93"  # STACK_GLOBAL


# --------------------------------------------------------------------------- zip records

def write_raw_zip(path, members):
    """A zip archive from (name, method, payload, crc, size) records as given: lets a
    member's payload be a deflate stream made here (the bombs)."""
    out, central = bytearray(), bytearray()
    for name, method, payload, crc, size in members:
        encoded = name.encode()
        offset = len(out)
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 0x21, crc,
                           len(payload), size, len(encoded), 0) + encoded + payload
        central += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, method, 0, 0x21, crc,
                               len(payload), size, len(encoded), 0, 0, 0, 0, 0,
                               offset) + encoded
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members),
                      len(central), len(out), 0)
    with open(path, "wb") as file:
        file.write(bytes(out + central + end))
    return str(path)


def stored(name, data):
    return (name, zipfile.ZIP_STORED, data, zlib.crc32(data), len(data))


@functools.cache
def deflated_zeros(mib):
    """(raw deflate stream, crc32, size) of ``mib`` MiB of zeros, never held in memory.

    zlib.compressobj is streamed over 1 MiB chunks, each ended by a full flush: a full flush
    resets the compressor's history, so every chunk after the first compresses to the same
    bytes, which are then repeated (about 1 KB per MiB; 1 GiB in ~1 MB and 0.3 s)."""
    chunk = bytes(1 << 20)
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    blocks = [compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
              for _ in range(min(mib, 3))]
    if mib > 3 and blocks[1] == blocks[2]:
        blocks += [blocks[2]] * (mib - 3)
    else:  # a zlib that does not repeat itself: stream every chunk
        for _ in range(mib - len(blocks)):
            blocks.append(compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH))
    payload = b"".join(blocks) + compressor.flush()
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(chunk, crc)
    return payload, crc, mib << 20


def deflated(name, mib):
    payload, crc, size = deflated_zeros(mib)
    return (name, zipfile.ZIP_DEFLATED, payload, crc, size)


# --------------------------------------------------------------------------- cases

@dataclass
class Case:
    id: str
    expect: str  # ERROR / OK / EITHER
    build: object  # build(tmp_path) -> path of the file
    func: str = "read_torch"
    check: str = None  # name of a check in the probe's CHECKS (a returned value)
    errors: tuple = ("ValueError",)  # accepted exception classes (in the type's MRO)
    job: dict = field(default_factory=dict)  # more probe job fields
    memory_error_allowed: bool = False  # the case makes the child run out on purpose


def zip_case(data_pkl, storages=None, **kwargs):
    return lambda tmp: write_zip_checkpoint(tmp / "case.pth", data_pkl(), storages, **kwargs)


def legacy_case(data):
    def build(tmp):
        path = tmp / "case.pth"
        path.write_bytes(data())
        return str(path)
    return build


# 1. Unbounded time (and memory) through error messages and hashes.
FLOAT1 = {"0": np.float32(1).tobytes()}
DAG_CASES = [
    Case("dag-storage-offset", ERROR, zip_case(lambda: program(op_tensor_args(
        op_storage("FloatStorage", "0", 1), op_tuple_dag(), op_tuple(op_int(1)),
        op_tuple(op_int(1)))), FLOAT1)),
    Case("dag-size", ERROR, zip_case(lambda: program(op_tensor_args(
        op_storage("FloatStorage", "0", 1), op_int(0), op_tuple_dag(),
        op_tuple(op_int(1)))), FLOAT1)),
    Case("dag-stride", ERROR, zip_case(lambda: program(op_tensor_args(
        op_storage("FloatStorage", "0", 1), op_int(0), op_tuple(op_int(1)),
        op_tuple_dag())), FLOAT1)),
    Case("dag-persistent-id", ERROR, zip_case(lambda: program(op_tuple_dag() + b"Q"))),
    Case("dag-storage-key", ERROR, zip_case(lambda: program(op_tuple(
        op_str("storage"), op_global("torch", "FloatStorage"), op_tuple_dag(), op_str("cpu"),
        op_int(1)) + b"Q"))),
    Case("dag-storage-type", ERROR, zip_case(lambda: program(op_tuple(
        op_str("storage"), op_tuple_dag(), op_str("0"), op_str("cpu"), op_int(1)) + b"Q"))),
    Case("dag-v3-dtype", ERROR, zip_case(lambda: program(op_call(
        op_global("torch._utils", "_rebuild_tensor_v3"),
        op_storage("UntypedStorage", "0", 4, module="torch.storage"), op_int(0),
        op_tuple(op_int(1)), op_tuple(op_int(1)), b"\x89",
        op_call(op_global("collections", "OrderedDict")), op_tuple_dag())), FLOAT1)),
    Case("dag-getattr", ERROR, zip_case(lambda: program(op_call(
        op_global("builtins", "getattr"), op_tuple_dag(), op_str("x"))))),
    Case("dag-legacy-protocol", ERROR, legacy_case(lambda: (
        pickle.dumps(MAGIC_NUMBER, protocol=2) + program(op_tuple_dag())))),
    Case("dag-legacy-view", ERROR, legacy_case(lambda: legacy_bytes(
        program(op_storage("FloatStorage", "0", 1, view=op_tuple_dag())),
        [("0", 1, FLOAT1["0"])]))),
    # torch_state_dict formats the top-level keys / a rejected candidate's keys.
    Case("dag-state-dict-top-level-keys", ERROR, zip_case(lambda: program(
        b"}" + op_frozenset_dag() + op_int(1) + b"s")), func="torch_state_dict"),
    Case("dag-state-dict-rejected-keys", ERROR, zip_case(lambda: program(
        b"}" + op_str("state_dict") + b"}" + op_frozenset_dag() + op_int(1) + b"s" + b"s")),
        func="torch_state_dict"),
    # A tuple DAG as a dict key: hashing it visits 2**40 nodes.
    Case("dag-hash-dict-key", ERROR, zip_case(lambda: program(
        b"}" + op_tuple_dag() + op_int(1) + b"s"))),
]


# 2. Memory amplification.
def views_2000():
    """2000 full views of one 1 MiB float32 storage, the shared parts memoised."""
    numel = 262144
    head = (op_global("torch._utils", "_rebuild_tensor_v2") + b"q\x00" + b"0"
            + op_storage("FloatStorage", "0", numel) + b"q\x01" + b"0"
            + op_tuple(op_int(numel)) + b"q\x02" + b"0"
            + op_tuple(op_int(1)) + b"q\x03" + b"0"
            + op_call(op_global("collections", "OrderedDict")) + b"q\x04" + b"0")
    tensor = b"h\x00" + b"(" + b"h\x01" + b"K\x00" + b"h\x02" + b"h\x03" + b"\x89" + b"h\x04" \
        + b"t" + b"R"
    return program(head + b"]" + b"(" + tensor * 2000 + b"e")


def deflate_bomb_storage(tmp):
    data_pkl = program(op_tensor(op_storage("FloatStorage", "0", 1), 0, (1,), (1,)))
    return write_raw_zip(tmp / "case.pth", [
        stored("archive/data.pkl", data_pkl), stored("archive/byteorder", b"little"),
        deflated("archive/data/0", 1024), stored("archive/version", b"3\n")])


def deflate_bomb_byteorder(tmp):
    return write_raw_zip(tmp / "case.pth", [
        stored("archive/data.pkl", program(b"N")), deflated("archive/byteorder", 1024),
        stored("archive/version", b"3\n")])


MEMORY_CASES = [
    Case("views-2000-of-1MiB", EITHER, zip_case(
        views_2000, {"0": np.arange(262144, dtype="<f4").tobytes()}), check="views_2000"),
    Case("zero-stride-2GB", EITHER, zip_case(lambda: program(op_tensor(
        op_storage("FloatStorage", "0", 1), 0, (50000, 10000), (0, 0))),
        {"0": np.float32(7).tobytes()}), check="zero_stride"),
    Case("deflate-bomb-storage", EITHER, deflate_bomb_storage, check="one_zero"),
    Case("deflate-bomb-byteorder", ERROR, deflate_bomb_byteorder),
    # A 9-byte pickle: None, LONG_BINPUT 2**30 (the C unpickler grows its memo to 2**31 slots).
    Case("memo-index-2^30", EITHER, zip_case(
        lambda: b"\x80\x02N" + put(2**30) + b"."), check="none"),
    # A legacy storage whose header claims 2**29 float32 elements (2 GiB) where the pickle
    # says 1; 4 bytes follow (torch.load fails; the tensor's one element is there).
    Case("legacy-storage-numel-2GiB", EITHER, legacy_case(lambda: legacy_bytes(
        program(op_tensor(op_storage("FloatStorage", "0", 1), 0, (1,), (1,))),
        [("0", 2**29, FLOAT1["0"])])), check="one_one"),
]


# 3. Interpreter crash: hashing a 200,000-deep tuple recurses in C.
DEEP_CASES = [
    Case("deep-set-reduce", EITHER, zip_case(lambda: program(op_call(
        op_global("builtins", "set"), b"]" + op_deep_tuple() + b"a"))), check="deep_container"),
    Case("deep-frozenset-reduce", EITHER, zip_case(lambda: program(op_call(
        op_global("builtins", "frozenset"), op_deep_tuple() + b"\x85"))),
        check="deep_container"),
    Case("deep-frozenset-opcode", EITHER, zip_case(lambda: protocol4(
        b"(" + op_deep_tuple() + b"\x91")), check="deep_container"),  # FROZENSET
    Case("deep-set-additems", EITHER, zip_case(lambda: protocol4(
        b"\x8f" + b"(" + op_deep_tuple() + b"\x90")), check="deep_container"),  # ADDITEMS
    Case("deep-dict-key", EITHER, zip_case(lambda: program(
        b"}" + op_deep_tuple() + b"N" + b"s")), check="deep_container"),
    Case("deep-dict-key-state-dict", ERROR, zip_case(lambda: program(
        b"}" + op_deep_tuple() + b"N" + b"s")), func="torch_state_dict"),
]


# 4. The copyreg extension registry: EXT1 241 -> os.system, cached by a plain pickle.loads.
def ext_case(tmp):
    call = b"\x82\xf1" + op_tuple(op_str(f"touch {tmp / 'pwned'}")) + b"R"  # EXT1 241
    return write_zip_checkpoint(tmp / "case.pth", program(call))


UNSAFE = ("UnsafeCheckpointError",)
EXT_CASES = [
    Case("ext-primed-os-system", ERROR, ext_case, errors=UNSAFE,
         job={"register_extension": ["os", "system", 241, True]}),
    Case("ext-registered-not-primed", ERROR, ext_case, errors=UNSAFE,
         job={"register_extension": ["os", "system", 241, False]}),
    Case("ext-unregistered", ERROR, ext_case),
]


# 5. kctx's placeholders must not leak into the result.
def ordered_dict_shadowing(*state_items):
    """OrderedDict w=tensor whose BUILD state sets instance attributes (items, keys)."""
    return program(op_call(op_global("collections", "OrderedDict")) + b"("
                   + op_str("w") + float_tensor() + b"u"
                   + b"}" + b"(" + b"".join(state_items) + b"u" + b"b")


LEAK_CASES = [
    Case("leak-tensor-in-set", ERROR, zip_case(lambda: program(op_call(
        op_global("builtins", "set"), b"]" + float_tensor() + b"a")), ONE_TWO)),
    Case("leak-tensor-in-frozenset", ERROR, zip_case(lambda: program(op_call(
        op_global("builtins", "frozenset"), float_tensor() + b"\x85")), ONE_TWO)),
    Case("leak-tensor-in-frozenset-opcode", ERROR, zip_case(lambda: protocol4(
        b"(" + float_tensor() + b"\x91"), ONE_TWO)),
    Case("leak-tensor-dict-key", ERROR, zip_case(lambda: program(
        b"}" + float_tensor() + op_int(1) + b"s"), ONE_TWO)),
    Case("leak-storage-dict-key", ERROR, zip_case(lambda: program(
        b"}" + op_storage("FloatStorage", "0", 2) + op_int(1) + b"s"), ONE_TWO)),
    Case("leak-tensor-in-slice", EITHER, zip_case(lambda: program(op_call(
        op_global("builtins", "slice"), float_tensor(), b"N", b"N")), ONE_TWO),
        check="slice_of_tensor"),
    Case("leak-torch-dtype-in-frozenset", EITHER, zip_case(lambda: program(op_call(
        op_global("builtins", "frozenset"), b"]" + op_global("torch", "float16") + b"a"))),
        check="frozenset_dtype_name"),
    Case("leak-numpy-dtype-in-frozenset", EITHER, zip_case(
        lambda: pickle.dumps(frozenset([np.dtype("<f4")]), protocol=2)),
        check="frozenset_numpy_dtype"),
    # items / keys set to a callable that returns an empty collection: torch_state_dict
    # took the mapping for an (empty) state dict and dict() copied nothing.
    Case("ordereddict-shadow-items-callable", EITHER, zip_case(lambda: ordered_dict_shadowing(
        op_str("items") + op_global("builtins", "set"),
        op_str("keys") + op_global("builtins", "set")), ONE_TWO),
        func="torch_state_dict", check="state_dict_w"),
    Case("ordereddict-shadow-items-tensor", EITHER, zip_case(lambda: ordered_dict_shadowing(
        op_str("items") + float_tensor(), op_str("keys") + float_tensor()), ONE_TWO),
        func="torch_state_dict", check="state_dict_w"),
]


# 6. Raw text of the file in error messages.
TEXT_CASES = [
    Case("global-name-escape", ERROR, zip_case(lambda: program(op_call(
        op_global("os", "\x1b[31msystem\x1b[0m\x1b]0;pwned\x07"), op_str("x")))), errors=UNSAFE),
    Case("global-name-4MB", ERROR, zip_case(lambda: protocol4(
        stack_global("os", "A" * 4_000_000))), errors=UNSAFE),
    Case("global-module-controls", ERROR, zip_case(lambda: protocol4(
        stack_global("os\r\n\x08\x7f\x9b2J", "system\x00"))), errors=UNSAFE),
]


# 7. Minor.
def fifo(tmp):
    path = tmp / "fifo.pth"
    os.mkfifo(path)
    return str(path)


def lzma_data_pkl(tmp):
    path = tmp / "case.pth"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_LZMA) as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"step": 1}, protocol=2))
        archive.writestr("archive/byteorder", b"little")
    return str(path)


def bzip2_storage(tmp):
    path = tmp / "case.pth"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", program(float_tensor()))
        archive.writestr("archive/byteorder", b"little")
        archive.writestr("archive/data/0", ONE_TWO["0"], compress_type=zipfile.ZIP_BZIP2)
    return str(path)


def memory_error_file(tmp):
    """A legitimate 256 MiB float32 tensor (a 256 KB file), read with 64 MiB of head room."""
    numel = 64 << 20
    data_pkl = program(op_tensor(op_storage("FloatStorage", "0", numel), 0, (numel,), (1,)))
    return write_raw_zip(tmp / "case.pth", [
        stored("archive/data.pkl", data_pkl), stored("archive/byteorder", b"little"),
        deflated("archive/data/0", 256), stored("archive/version", b"3\n")])


def untyped_v3_tensor(dtype):
    """A 2-element tensor of ``dtype`` over UntypedStorage "0" of 8 bytes."""
    return op_call(op_global("torch._utils", "_rebuild_tensor_v3"),
                   op_storage("UntypedStorage", "0", 8, module="torch.storage"), op_int(0),
                   op_tuple(op_int(2)), op_tuple(op_int(1)), b"\x89",
                   op_call(op_global("collections", "OrderedDict")), op_global("torch", dtype))


def zip_directory_offset_past_members(tmp):
    """A zip whose end record puts the central directory 1 MiB further than it is: Python's
    zipfile shifts every member's header offset by the difference, below 0 (found by
    tools/fuzz_checkpoints.py: ``OSError: [Errno 22] Invalid argument`` from the seek)."""
    path = write_zip_checkpoint(tmp / "case.pth", program(float_tensor()), ONE_TWO)
    data = bytearray(open(path, "rb").read())
    end = data.rindex(b"PK\x05\x06")  # end of central directory: its offset field at +16
    offset = int.from_bytes(data[end + 16:end + 20], "little")
    data[end + 16:end + 20] = (offset + (1 << 20)).to_bytes(4, "little")
    with open(path, "wb") as file:
        file.write(data)
    return path


TWO_DTYPE_BYTES = {"0": np.array([1.5, -2.0], "<f4").tobytes()}
MINOR_CASES = [
    Case("memory-error-is-memory-error", ERROR, memory_error_file,
         errors=("ValueError", "MemoryError"), job={"limit_mb": 64}, memory_error_allowed=True),
    Case("fifo", ERROR, fifo, errors=("ValueError", "OSError")),
    Case("zip-lzma-data-pkl", ERROR, lzma_data_pkl),
    Case("zip-bzip2-storage", ERROR, bzip2_storage),
    Case("zip-directory-offset-past-members", ERROR, zip_directory_offset_past_members),
    # One storage key, two typed storage classes (FloatStorage of 2, ByteStorage of 8).
    Case("storage-key-two-dtypes-v2", EITHER, zip_case(lambda: program(op_tuple(
        op_tensor(op_storage("FloatStorage", "0", 2), 0, (2,), (1,)),
        op_tensor(op_storage("ByteStorage", "0", 8), 0, (2,), (1,)))), TWO_DTYPE_BYTES),
        check="two_dtypes"),
    Case("untyped-storage-two-dtypes-v3", EITHER, zip_case(lambda: program(op_tuple(
        untyped_v3_tensor("float32"), untyped_v3_tensor("uint8"))), TWO_DTYPE_BYTES),
        check="two_dtypes"),
]

CASES = DAG_CASES + MEMORY_CASES + DEEP_CASES + EXT_CASES + LEAK_CASES + TEXT_CASES + MINOR_CASES


# --------------------------------------------------------------------------- the probe

def run_probe(jobs, timeout):
    """Reports of the probe for ``jobs`` (one dict each), and its header line."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = "1"
    try:
        done = subprocess.run([sys.executable, PROBE], input=json.dumps(jobs), cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the probe process ran past {timeout} s")
    assert done.returncode == 0, (
        f"the probe process failed (exit status {done.returncode}): {done.stderr[-2000:]}")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    header, reports = lines[0], lines[1:]
    assert header["baseline_status"] == "exited", header
    assert len(reports) == len(jobs), done.stdout[-2000:]
    return header, reports


def short(text, limit=160):
    return ascii(text[:limit]) + ("..." if len(text) > limit else "")


def violations(report, expect=EITHER, errors=("ValueError",), memory_error_allowed=False):
    """What breaks the contract (see the module docstring), one line each."""
    status = report["status"]
    if status == "timeout":
        return [f"timeout: still running after {report['deadline']} s (killed)"]
    if status != "exited":
        return [f"crash: the child died ({status})"]
    found = []
    if report["outcome"] == "error":
        message, chain = report["message"], report["chain"]
        if memory_error_allowed:
            if report["exc_type"] != "MemoryError" and (
                    report["memory_error"] or "corrupt" in message.lower()):
                found.append(f"MemoryError reported as {report['exc_type']} "
                             f"({' <- '.join(chain)}): {short(message)}")
        elif report["exc_type"] == "MemoryError" or report["memory_error"]:
            found.append(f"memory: MemoryError under the address-space limit "
                         f"({' <- '.join(chain)}): {short(message)}")
        if not any(name in report["exc_mro"] for name in errors):
            found.append(f"wrong exception {report['exc_type']} (expected {'/'.join(errors)}): "
                         f"{short(message)}")
        if expect == OK:
            found.append(f"raised {report['exc_type']} but must return: {short(message)}")
        if report["message_length"] > MESSAGE_LIMIT:
            found.append(f"unbounded message: {report['message_length']} characters")
        if report["bad_chars"]:
            found.append(f"control characters in the message: {', '.join(report['bad_chars'])}")
    else:
        if expect == ERROR:
            found.append(f"returned a {report['value_type']} but must raise")
        if report["leaks"]:
            found.append(f"placeholder leak: {', '.join(report['leaks'])} in the result")
        if report["check"] not in (None, "pass"):
            found.append(f"wrong value: {report['check']}")
    if report["seconds"] >= TIME_LIMIT:
        found.append(f"slow: {report['seconds']:.1f} s")
    if report["growth_mb"] > GROWTH_LIMIT_MB and not memory_error_allowed:
        found.append(f"memory: peak RSS {report['growth_mb']:.0f} MB above the baseline")
    if report.get("marker_exists"):
        found.append("code ran: the payload's marker file exists")
    return found


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_checkpoint(case, tmp_path):
    path = case.build(tmp_path)
    marker = tmp_path / "pwned"
    job = {"path": str(path), "func": case.func, "check": case.check, "marker": str(marker),
           "deadline": DEADLINE, **case.job}
    _, (report,) = run_probe([job], SUBPROCESS_TIMEOUT)
    found = violations(report, case.expect, case.errors, case.memory_error_allowed)
    if marker.exists() and not report.get("marker_exists"):
        found.append("code ran: the payload's marker file exists")
    if found and report.get("outcome") == "error" and not any(
            short(report["message"]) in line for line in found):
        found.append(f"(raised {report['exc_type']}: {short(report['message'])})")
    assert not found, "; ".join(found)


# --------------------------------------------------------------------------- seeded fuzzing

FUZZ_FILES = ["tensors.pth", "tensors_legacy.pth"]
FUZZ_MUTANTS = 60  # per file
FUZZ_CHUNKS = 3
MEMO_OPS = {"BINPUT": 1, "BINGET": 1, "LONG_BINPUT": 4, "LONG_BINGET": 4}
LENGTH_OPS = {"BINUNICODE": 4, "SHORT_BINUNICODE": 1, "BINBYTES": 4, "SHORT_BINBYTES": 1,
              "BINSTRING": 4, "SHORT_BINSTRING": 1, "BINUNICODE8": 8, "BINBYTES8": 8,
              "BYTEARRAY8": 8, "LONG1": 1, "LONG4": 4, "FRAME": 8}
INT_OPS = {"BININT": 4, "BININT1": 1, "BININT2": 2}
SNIPPETS = [b"2", b"(", b"0", b"1", b"b", b"R", b"Q", b"s", b"u", b"e", b"a", b"t", b"\x85",
            b"\x86", b"\x87", b"}", b"]", b")", b"N", b"\x88", b"\x81", b"\x92", b"\x93", b"\x91",
            b"\x90", b"\x8f", b"\x94", b"h\x00", b"j\x00\x00\x00\x00", b"\x82\xf1",
            put(2**30), get(2**31 - 1), b"\x8a\x08" + b"\xff" * 7 + b"\x7f",
            b"\x8b\xff\xff\xff\x7f", b"\x95" + b"\xff" * 8, b"J\xff\xff\xff\x7f",
            b"J\x00\x00\x00\x80", op_tuple_dag(20),
            op_global("builtins", "frozenset") + b"(" + op_deep_tuple(1000) + b"\x85t" + b"R"]


def opcode_spans(data, count):
    """(name, start, end, arg offset) of every opcode of the first ``count`` pickles."""
    stream, spans = io.BytesIO(data), []
    for _ in range(count):
        ops = list(pickletools.genops(stream))
        for (opcode, _, pos), nxt in zip(ops, [o[2] for o in ops[1:]] + [stream.tell()]):
            spans.append((opcode.name, pos, nxt))
    return spans, stream.tell()


def mutate(data, spans, end, rng):
    """``data`` with 1-3 random mutations inside data[:end] (the pickles); a description."""
    done = []
    for _ in range(rng.randint(1, 3)):
        name, start, stop = rng.choice(spans)
        kind = rng.choice(["flip", "insert", "delete", "duplicate", "swap", "memo", "length",
                           "int", "snippet", "truncate"])
        if kind == "flip" and data:
            pos = rng.randrange(min(end, len(data)))
            data = data[:pos] + bytes([data[pos] ^ rng.randint(1, 255)]) + data[pos + 1:]
        elif kind == "insert":
            data = data[:start] + rng.randbytes(rng.randint(1, 8)) + data[start:]
        elif kind == "delete":
            data = data[:start] + data[stop:]
        elif kind == "duplicate":
            data = data[:stop] + data[start:stop] + data[stop:]
        elif kind == "swap":
            _, start2, stop2 = rng.choice(spans)
            if stop <= start2:
                data = (data[:start] + data[start2:stop2] + data[stop:start2]
                        + data[start:stop] + data[stop2:])
        elif kind in ("memo", "length", "int"):
            table = {"memo": MEMO_OPS, "length": LENGTH_OPS, "int": INT_OPS}[kind]
            candidates = [s for s in spans if s[0] in table]
            if candidates:
                name, start, stop = rng.choice(candidates)
                width = table[name]
                value = rng.choice([0, 1, 2**(8 * width) - 1, 2**(8 * width - 1) - 1,
                                    2**(8 * width - 1), rng.randrange(2**(8 * width))])
                arg = value.to_bytes(width, "little")
                data = data[:start + 1] + arg + data[start + 1 + width:]
        elif kind == "snippet":
            data = data[:start] + rng.choice(SNIPPETS) + data[start:]
        else:  # truncate
            data = data[:start]
        done.append(f"{kind}@{start}({name})")
    return data, " ".join(done)


def fuzz_mutants(name, tmp_path, chunk):
    """(seed, description, path) of this chunk's mutants of fixture ``name``."""
    source = os.path.join(FIXTURES, "checkpoints", name)
    with open(source, "rb") as file:
        original = file.read()
    members = None
    if zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as archive:
            members = [(info.filename, archive.read(info)) for info in archive.infolist()]
        pkl_name = next(n for n, _ in members if n.endswith("/data.pkl"))
        data = dict(members)[pkl_name]
        spans, end = opcode_spans(data, 1)
    else:  # legacy: magic, protocol, sys_info, the object, the storage keys; raw storages
        data = original
        spans, end = opcode_spans(data, 5)
    per_chunk = FUZZ_MUTANTS // FUZZ_CHUNKS
    out = []
    for seed in range(chunk * per_chunk, (chunk + 1) * per_chunk):
        rng = random.Random(1000 * FUZZ_FILES.index(name) + seed)
        mutant, description = mutate(data, spans, end, rng)
        path = tmp_path / f"mutant{seed}.pth"
        if members is None:
            path.write_bytes(mutant)
        else:
            with zipfile.ZipFile(path, "w") as archive:
                for member, content in members:
                    archive.writestr(member, mutant if member == pkl_name else content)
        out.append((seed, description, str(path)))
    return out


@pytest.mark.parametrize("chunk", range(FUZZ_CHUNKS))
@pytest.mark.parametrize("name", FUZZ_FILES)
def test_fuzzed_fixture(name, chunk, tmp_path):
    mutants = fuzz_mutants(name, tmp_path, chunk)
    jobs = [{"path": path, "deadline": DEADLINE} for _, _, path in mutants]
    _, reports = run_probe(jobs, SUBPROCESS_TIMEOUT + DEADLINE * len(jobs))
    failures = []
    for (seed, description, _), report in zip(mutants, reports):
        found = violations(report)
        if found:
            failures.append(f"seed {seed} [{description}]: {'; '.join(found)}")
    assert not failures, f"{len(failures)} of {len(mutants)} mutants:\n" + "\n".join(failures)


# --------------------------------------------------------------------------- legitimate files

FIXTURE_FOLDERS = ["checkpoints", "segnext", "resnet", "fid_inception"]


@pytest.mark.parametrize("folder", FIXTURE_FOLDERS)
def test_committed_fixtures_still_load(folder):
    paths = sorted(os.path.join(FIXTURES, folder, n)
                   for n in os.listdir(os.path.join(FIXTURES, folder)) if n.endswith(".pth"))
    assert paths
    jobs = [{"path": path, "check": "has_array", "deadline": DEADLINE} for path in paths]
    _, reports = run_probe(jobs, SUBPROCESS_TIMEOUT + DEADLINE * len(jobs))
    failures = [f"{os.path.basename(path)}: {'; '.join(found)}"
                for path, report in zip(paths, reports)
                if (found := violations(report, OK))]
    assert not failures, "\n".join(failures)
