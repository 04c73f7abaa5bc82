"""Run kctx's checkpoint reader on (hostile) files, each in a forked child; report JSON lines.

Used by tests/test_hostile_checkpoints.py, which starts this script with ``sys.executable``:

    python tests/hostile_checkpoint_probe.py < jobs.json

stdin: a JSON list of jobs, each a dict:

    path           the file to read
    func           "read_torch" (default) or "torch_state_dict"
    check          optional name of a check of the returned value (CHECKS below)
    register_extension optional [module, name, code, prime]: before reading, register
                   the copyreg extension code and (prime, default true) unpickle an EXT
                   opcode for it once with plain ``pickle.loads`` (this fills
                   ``copyreg._extension_cache``)
    marker         optional path; the report says whether it exists after the read
    limit_mb       address-space head room of the child in MiB (default 1536)
    deadline       seconds before the child is killed (default 10)

stdout: one JSON line per job (same order), with ``status`` ("exited", "signal N",
"timeout", "no-report"), ``outcome`` ("ok" / "error"), ``exc_type``, ``exc_mro``,
``message`` (first 4,000 characters), ``message_length``, ``bad_chars`` (control
characters found in the message), ``memory_error`` (a MemoryError anywhere in the
exception's cause / context chain), ``seconds`` (the read alone), ``maxrss_mb`` and
``growth_mb`` (the child's peak RSS, and that minus the peak of a child that read a
tiny checkpoint), ``leaks`` (kctx-internal objects found in a returned value),
``check`` (None, "pass" or the reason it failed) and ``marker_exists``.

Only ``kctx.checkpoints`` is imported (with a bare ``kctx`` package object, so that
``kctx/__init__.py`` and its TensorFlow imports do not run): the children can run
under ``RLIMIT_AS``.
"""

import json
import os
import resource
import select
import signal
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "fixtures", "checkpoints", "old_zip.pth")
MESSAGE_KEEP = 4000
NODE_LIMIT = 2_000_000


for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")  # before NumPy starts its thread pools (the probe forks)


def import_checkpoints():
    # KCTX_PROBE_PACKAGE_DIR: another copy of the kctx package folder to probe (e.g. the
    # committed reader, extracted with `git show`), for comparisons.
    if "kctx" not in sys.modules:
        package = types.ModuleType("kctx")
        folder = os.environ.get("KCTX_PROBE_PACKAGE_DIR") or os.path.join(ROOT, "kctx")
        package.__path__ = [folder]
        sys.modules["kctx"] = package
    from kctx import checkpoints

    return checkpoints


ck = import_checkpoints()
# KCTX_PROBE_READER=torch: read with torch.load(weights_only=True) instead, for
# tools/hostile_checkpoint_comparison.py (run with a Python that has torch).
READER = os.environ.get("KCTX_PROBE_READER", "kctx")


def reader_function(name):
    if READER == "torch":
        import torch

        return lambda path: torch.load(path, weights_only=True, map_location="cpu")
    return getattr(ck, name)

import numpy as np  # (already imported by kctx.checkpoints)

HEAVY_MODULES = sorted({m.split(".")[0] for m in sys.modules}
                       & {"tensorflow", "keras", "jax", "torch"})


# --------------------------------------------------------------------------- inspection

def is_internal(obj):
    """A kctx.checkpoints object that must never reach the caller (placeholders)."""
    if isinstance(obj, ck.OpaqueObject):
        return False
    if isinstance(obj, type) and issubclass(obj, ck.OpaqueObject):
        return False
    module = getattr(type(obj), "__module__", "") or ""
    return module == "kctx.checkpoints" or module.startswith("kctx.checkpoints.")


def children(obj):
    if isinstance(obj, dict):
        out = []
        for key, value in list(obj.items()):
            out += [key, value]
        if type(obj) is not dict:
            try:
                out += list(vars(obj).values())
            except TypeError:
                pass
        return out
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)
    if isinstance(obj, slice):
        return [obj.start, obj.stop, obj.step]
    if isinstance(obj, ck.OpaqueObject):
        return [obj.args, obj.kwargs, obj.state, obj.listitems, obj.dictitems]
    if isinstance(obj, np.ndarray) and obj.dtype.hasobject:
        return list(obj.reshape(-1))
    return []


def find_leaks(root):
    """Type names of kctx-internal objects anywhere in ``root`` (iterative, bounded)."""
    leaks, seen, stack, visited = [], set(), [root], 0
    while stack and visited < NODE_LIMIT:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        visited += 1
        if is_internal(obj):
            name = type(obj).__name__
            if name not in leaks:
                leaks.append(name)
            continue
        stack.extend(children(obj))
    return leaks


def nesting_depth(obj, limit=10_000_000):
    """How deep ``obj`` is a 1-tuple of a 1-tuple of ... (iterative)."""
    depth = 0
    while isinstance(obj, tuple) and len(obj) == 1 and depth < limit:
        obj, depth = obj[0], depth + 1
    return depth


def first_array(obj):
    stack, seen = [obj], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, np.ndarray) and not item.dtype.hasobject:
            return item
        stack.extend(children(item))
    return None


# --------------------------------------------------------------------------- checks of results

def _arange(n):
    return np.arange(n, dtype=np.float32)


def check_views_2000(value):
    assert isinstance(value, list) and len(value) == 2000, f"{type(value).__name__}"
    wanted = _arange(262144)
    for i in (0, 1, 999, 1999):
        item = value[i]
        assert isinstance(item, np.ndarray) and item.dtype == np.float32, type(item).__name__
        assert item.shape == (262144,) and np.array_equal(item, wanted), f"view {i} differs"


def check_zero_stride(value):
    assert isinstance(value, np.ndarray), type(value).__name__
    assert value.shape == (50000, 10000) and value.dtype == np.float32, (value.shape, value.dtype)
    assert value[0, 0] == 7.0 and value[-1, -1] == 7.0 and value[12345, 678] == 7.0


def check_one_zero(value):
    assert isinstance(value, np.ndarray), type(value).__name__
    assert value.dtype == np.float32 and value.tolist() == [0.0], (value.dtype, value.shape)


def check_one_one(value):
    assert isinstance(value, np.ndarray), type(value).__name__
    assert value.dtype == np.float32 and value.tolist() == [1.0], (value.dtype, value.shape)


def check_none(value):
    assert value is None, type(value).__name__


def check_deep_container(value):
    """A set / frozenset / dict whose one element (key) is the 200,000-deep tuple."""
    if isinstance(value, dict):
        items = list(value)
    else:
        assert isinstance(value, (set, frozenset)), type(value).__name__
        items = list(value)
    assert len(items) == 1, len(items)
    item = items[0]
    depth = 0
    while isinstance(item, tuple) and item:
        item, depth = item[0], depth + 1
    assert item == () and depth == 200_000, depth


def check_slice_of_tensor(value):
    assert isinstance(value, slice), type(value).__name__
    assert isinstance(value.start, np.ndarray), type(value.start).__name__
    assert value.start.tolist() == [1.0, 2.0], value.start.tolist()


def check_frozenset_dtype_name(value):
    assert value == frozenset({"torch.float16"}), repr(value)[:200]


def check_frozenset_numpy_dtype(value):
    assert isinstance(value, frozenset) and len(value) == 1, type(value).__name__
    (item,) = value
    assert isinstance(item, np.dtype) and item == np.dtype("<f4"), type(item).__name__


def check_state_dict_w(value):
    assert isinstance(value, dict) and list(value) == ["w"], (
        f"{type(value).__name__} with keys {list(value)[:5]}")
    assert isinstance(value["w"], np.ndarray) and value["w"].tolist() == [1.0, 2.0]


def check_two_dtypes(value):
    """torch reinterprets a storage's bytes as each tensor's own dtype."""
    floats, raw = value
    raw_bytes = np.array([1.5, -2.0], "<f4").tobytes()
    assert isinstance(floats, np.ndarray) and floats.dtype == np.float32, (
        f"float tensor: {getattr(floats, 'dtype', type(floats).__name__)}")
    assert floats.tolist() == [1.5, -2.0], floats.tolist()
    assert isinstance(raw, np.ndarray) and raw.dtype == np.uint8, (
        f"uint8 tensor came back as {getattr(raw, 'dtype', type(raw).__name__)}")
    assert raw.tolist() == list(raw_bytes[:2]), raw.tolist()


def check_has_array(value):
    assert first_array(value) is not None, "no array in the result"


CHECKS = {name[len("check_"):]: func for name, func in globals().items()
          if name.startswith("check_")}


# --------------------------------------------------------------------------- the child

def status_kb(key):
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def limit_address_space(limit_mb):
    size_kb = status_kb("VmSize")
    if size_kb is None:
        return
    limit = size_kb * 1024 + limit_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def bad_chars(message):
    found = []
    for char in message:
        if (ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F) and char not in found:
            found.append(char)
            if len(found) >= 5:
                break
    return [f"U+{ord(c):04X}" for c in found]


def exception_chain(error):
    chain, seen = [], set()
    while error is not None and id(error) not in seen and len(chain) < 20:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def register_extension(module, name, code, prime=True):
    """copyreg.add_extension, then (prime) one plain pickle.loads of the EXT opcode: the
    unpickler caches what it found in copyreg._extension_cache, which later unpicklers
    consult before calling their find_class."""
    import copyreg
    import pickle

    copyreg.add_extension(module, name, code)
    if prime:
        opcode = b"\x82" + bytes([code]) if code < 256 else b"\x83" + code.to_bytes(2, "little")
        pickle.loads(b"\x80\x02" + opcode + b".")


def run_job(job):
    """In the child: read, summarise. Returns a JSON-able dict."""
    report = {}
    if job.get("register_extension"):
        register_extension(*job["register_extension"])
    func = reader_function(job.get("func", "read_torch"))
    limit_address_space(job.get("limit_mb", 1536))
    start = time.perf_counter()
    try:
        value = func(job["path"])
    except BaseException as error:  # noqa: BLE001 (everything is reported)
        report["seconds"] = time.perf_counter() - start
        value = None
        report["outcome"] = "error"
        report["exc_type"] = type(error).__name__
        report["exc_mro"] = [cls.__name__ for cls in type(error).__mro__]
        try:
            message = str(error)
        except BaseException as str_error:  # noqa: BLE001
            message = f"<str() of the exception failed: {type(str_error).__name__}>"
        report["message"] = message[:MESSAGE_KEEP]
        report["message_length"] = len(message)
        report["bad_chars"] = bad_chars(message)
        chain = exception_chain(error)
        report["chain"] = [type(e).__name__ for e in chain]
        report["memory_error"] = any(isinstance(e, MemoryError) for e in chain)
        del error, chain
    else:
        report["seconds"] = time.perf_counter() - start
        report["outcome"] = "ok"
        report["value_type"] = type(value).__name__
        report["leaks"] = find_leaks(value)
        report["check"] = None
        if job.get("check"):
            try:
                CHECKS[job["check"]](value)
                report["check"] = "pass"
            except BaseException as error:  # noqa: BLE001
                report["check"] = f"{type(error).__name__}: {str(error)[:500]}"
    if job.get("marker"):
        report["marker_exists"] = os.path.exists(job["marker"])
    return report


def fork_job(job):
    """Run ``job`` in a forked child; the parent's view of it (status, rusage)."""
    deadline = job.get("deadline", 10)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            os.close(read_fd)
            data = json.dumps(run_job(job)).encode()
            with os.fdopen(write_fd, "wb") as pipe:
                pipe.write(data)
        except BaseException:  # noqa: BLE001
            code = 3
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks, started, timed_out = [], time.monotonic(), False
    while True:
        left = deadline - (time.monotonic() - started)
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([read_fd], [], [], left)
        if ready:
            chunk = os.read(read_fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    os.close(read_fd)
    _, wait_status, rusage = os.wait4(pid, 0)
    maxrss_mb = rusage.ru_maxrss / (1024 * 1024 if sys.platform == "darwin" else 1024)
    if timed_out:
        status = "timeout"
    elif os.WIFSIGNALED(wait_status):
        status = f"signal {os.WTERMSIG(wait_status)} ({signal.Signals(os.WTERMSIG(wait_status)).name})"
    elif os.WEXITSTATUS(wait_status) != 0:
        status = f"exit code {os.WEXITSTATUS(wait_status)}"
    else:
        status = "exited"
    report = {}
    if chunks:
        try:
            report = json.loads(b"".join(chunks))
        except ValueError:
            report = {}
    if status == "exited" and not report:
        status = "no-report"
    report.update(status=status, maxrss_mb=round(maxrss_mb, 1), deadline=deadline,
                  path=job["path"])
    return report


def main():
    jobs = json.load(sys.stdin)
    # The baseline: a child that reads a tiny checkpoint.
    baseline = fork_job({"path": TINY})
    base_mb = baseline["maxrss_mb"]
    print(json.dumps({"baseline_mb": base_mb, "baseline_status": baseline["status"],
                      "heavy_modules": HEAVY_MODULES,
                      "reader": "torch.load(weights_only=True)" if READER == "torch"
                      else ck.__file__}), flush=True)
    for job in jobs:
        report = fork_job(job)
        report["growth_mb"] = round(report["maxrss_mb"] - base_mb, 1)
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
