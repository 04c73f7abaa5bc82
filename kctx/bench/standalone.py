"""What ``kctx.bench`` shares with the tool scripts that time the official models.

Standard library only, so that a tool script in another virtual environment (without
Keras) loads this file by its path (``tools/segnext_official_latency.py`` does) and
reports the same quantities under the same names as ``kctx.bench``: how busy the other
processes kept the machine while something was timed, and the layer kinds of SegNeXt's
per-layer profile.
"""

# Layer kinds of SegNeXt's per-layer profile (``--layer-profile`` of ``kctx.bench segnext``
# and of tools/segnext_official_latency.py), so the two line up.
CONV_1X1, CONV_3X3 = "conv 1×1", "conv 3×3 (stem, patch embeds)"
ELEMENTWISE = "element-wise (gate, layer scale, adds)"
LAYOUT = "layout (flatten, permute, copies)"
HEAD_RESIZE, HEAD_CONV = "head: resize + concat", "head: conv 1×1"
HEAD_NORM, HAMBURGER = "head: GroupNorm + ReLU", "head: Hamburger (breads, NMF, GN)"
UPSAMPLE = "logits upsampling, input normalisation"
OVERHEAD = "outside the layers (runtime, output copy)"


def depthwise_kind(height, width):
    """The layer kind of a depthwise convolution with a height × width kernel."""
    return f"depthwise {height}×{width}"



def cpu_jiffies():
    """(busy jiffies of the whole machine, all jiffies, steal jiffies, this process's),
    from ``/proc/stat`` and ``/proc/self/stat`` (Linux)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    with open("/proc/self/stat") as f:
        own = f.read().rsplit(")", 1)[1].split()
    return (user + nice + system + irq + softirq, sum(fields[:8]), steal,
            int(own[11]) + int(own[12]))


def other_load(before, after):
    """CPU share (% of all cores) used by other processes, and stolen by the hypervisor,
    between two :func:`cpu_jiffies` readings.

    Examples:
        >>> other_load((100, 1000, 0, 40), (160, 1100, 1, 80))
        {'others_cpu_pct': 20.0, 'steal_pct': 1.0}
    """
    busy, total, steal, own = (b - a for a, b in zip(before, after))
    if total <= 0:
        return {"others_cpu_pct": None, "steal_pct": None}
    return {"others_cpu_pct": round(100 * max(0, busy - own) / total, 1),
            "steal_pct": round(100 * steal / total, 1)}


def cpu_model():
    """The CPU's model name, family / model / stepping, the vector-instruction flags
    that decide TensorFlow's and PyTorch's kernels, and the logical CPU count."""
    import os
    import platform

    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key in ("model name", "cpu family", "model", "stepping") and key not in info:
                    info[key] = value
                elif key == "flags" and "flags" not in info:
                    info["flags"] = [flag for flag in value.split()
                                     if flag in ("avx2", "fma", "avx512f", "avx512_bf16",
                                                 "avx512_vnni", "amx_tile")]
    except OSError:
        pass
    return {"model_name": info.get("model name", platform.processor() or platform.machine()),
            "family": info.get("cpu family"), "model": info.get("model"),
            "stepping": info.get("stepping"), "flags": info.get("flags", []),
            "logical_cpus": os.cpu_count()}


def package_versions(names):
    """``{"python": ..., name: version or None}`` of installed distributions."""
    import importlib.metadata
    import platform

    versions = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions



# --- Timing on an accelerator, and measuring processes that take turns -------------------
#
# On a GPU, many measuring processes (one per model, dtype and framework) compile and
# warm up at the same time, then time one after another, so that compilation (XLA's
# autotuning included) runs in parallel while no two timed loops share the device:
# :func:`run_in_turn` starts them, each calls :func:`wait_for_turn` when it is ready to
# time, and the runner lets them time one at a time.

READY_MARKER = "KCTX_READY_TO_TIME"
TURN_VARIABLE = "KCTX_TAKE_TURNS"


def wait_for_turn():
    """In a process started by :func:`run_in_turn`: say it is ready, then block until the
    runner gives it the device. Elsewhere: return at once."""
    import os
    import sys

    if os.environ.get(TURN_VARIABLE) != "1":
        return
    print(READY_MARKER, flush=True)
    if not sys.stdin.readline():  # the runner went away: nothing to time for
        raise SystemExit(3)


def time_synced(call, synchronize, repeats, warmup):
    """Wall time of ``synchronize(call())`` (the device's work finished): ``warmup``
    untimed calls, then the median, minimum and every one of ``repeats`` timed calls, ms.

    Examples:
        >>> result = time_synced(lambda: 1, lambda out: out, repeats=3, warmup=1)
        >>> sorted(result)
        ['median_ms', 'min_ms', 'repeats', 'times_ms', 'warmup']
    """
    import statistics
    import time

    for _ in range(warmup):
        synchronize(call())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        synchronize(call())
        times.append((time.perf_counter() - start) * 1e3)
    return {"median_ms": round(statistics.median(times), 4), "min_ms": round(min(times), 4),
            "times_ms": [round(t, 4) for t in times], "repeats": repeats, "warmup": warmup}


def cuda_graph(call, warmup=3):
    """``call`` (a function of no arguments running PyTorch work on the current CUDA
    device) captured once in a CUDA graph: the function returned replays the graph and
    returns the captured outputs (the same tensors, rewritten), without Python or
    launch overhead. Warm-up calls (cuDNN's autotuning) run on a side stream first."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = call()

    def replay():
        graph.replay()
        return outputs

    return replay


def torch_profile(call, synchronize, calls=3, top=25):
    """Where ``call``'s time goes on PyTorch (``torch.profiler`` over ``calls`` calls):
    the wall ms per call, the ms per call the GPU was busy (the kernels' own time), the
    kernels launched per call and the ``top`` operators and kernels by their own device
    time (or CPU time on a CPU). A wall time well above the busy time means the host
    (Python, the launches) is the limit."""
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    synchronize(call())
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(calls):
            synchronize(call())
        wall = (time.perf_counter() - start) * 1e3 / calls

    def device_us(event):
        for name in ("self_device_time_total", "self_cuda_time_total"):
            if hasattr(event, name):
                return getattr(event, name)
        return 0.0

    events = prof.key_averages()
    kernels = [e for e in events if cuda and str(getattr(e, "device_type", "")).endswith("CUDA")]
    busy = sum(device_us(e) for e in kernels) / 1e3 / calls if cuda else None
    key = device_us if cuda else (lambda e: e.self_cpu_time_total)
    ranked = sorted(events, key=key, reverse=True)[:top]
    return {"calls": calls, "wall_ms": round(wall, 3),
            "gpu_busy_ms": None if busy is None else round(busy, 3),
            "kernels_per_call": (round(sum(e.count for e in kernels) / calls, 1)
                                 if cuda else None),
            "top": [{"name": e.key[:120], "count_per_call": round(e.count / calls, 1),
                     "ms_per_call": round(key(e) / 1e3 / calls, 4)} for e in ranked]}


# ATen operations that launch no kernel: views and aliases (``OpOverload.is_view``),
# allocations, and the exported graph's checks of its tensors' metadata.
_NO_KERNEL = ("detach", "alias", "empty", "empty_strided", "empty_like",
              "_assert_tensor_metadata", "_assert_scalar", "sym_size", "sym_stride")


def torch_census(call, inputs=()):
    """The ATen operations of one ``call()`` (PyTorch work of no arguments, run once more
    here), counted as they dispatch: each operation that computes (not a view, an alias,
    an allocation or a metadata check) by name, and their sum under ``"kernels"``: a
    static profile of an eager call or an exported program, what a GPU launches one by one
    (a library call may launch more than one kernel: ``torch_profile``'s
    ``kernels_per_call`` counts those on a GPU). An operation none of whose tensors comes
    from ``inputs`` (the image: the weights' layout changes, batch norm's
    ``rsqrt(var + ε)``, a random draw) is counted once more under ``"<name> of weights
    alone"`` and ``"kernels of weights alone"``: work a program with its weights folded
    in would not repeat.

    Example:
        >>> import torch
        >>> w, x = torch.ones(4, 4), torch.ones(2, 4)
        >>> census = torch_census(lambda: x @ (w * 2.0).t(), inputs=[x])
        >>> census["kernels"], census["kernels of weights alone"]
        (2, 1)
    """
    import collections
    import weakref

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    derived = weakref.WeakValueDictionary()  # id → tensor computed from the inputs
    for tensor in inputs:
        derived[id(tensor)] = tensor
    counts = collections.Counter()

    def from_inputs(tensor):
        return derived.get(id(tensor)) is tensor

    class Census(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            outputs = func(*args, **(kwargs or {}))
            tensors = [t for t in tree_flatten((args, kwargs))[0]
                       if isinstance(t, torch.Tensor)]
            if any(from_inputs(t) for t in tensors):
                for tensor in tree_flatten(outputs)[0]:
                    if isinstance(tensor, torch.Tensor):
                        derived[id(tensor)] = tensor
                weights_alone = False
            else:
                weights_alone = True
            name = func.overloadpacket.__name__
            if not func.is_view and name not in _NO_KERNEL:
                counts[name] += 1
                counts["kernels"] += 1
                if weights_alone:
                    counts[f"{name} of weights alone"] += 1
                    counts["kernels of weights alone"] += 1
            return outputs

    with Census():
        call()
    counts.setdefault("kernels of weights alone", 0)
    return dict(sorted(counts.items()))


def inductor_census(code):
    r"""The kernels of Inductor's program, counted from the Python code ``torch.compile``
    wrote (``torch._inductor.utils.run_and_get_code``'s sources): in each ``call``
    function, the kernels Inductor generated (``"generated"``: Triton on a GPU, C++ on a
    CPU, each a fusion of element-wise and reduction work), the library calls by name
    (``"extern convolution"``: cuDNN or oneDNN, ``"extern bmm"``...) and the ATen
    operations it left to PyTorch (``"fallback <name>"``), and their sum under
    ``"kernels"``, to set beside :func:`torch_census` of the uncompiled call.

    Example:
        >>> code = ("def call(args):\n    buf0 = empty_strided_cpu((2,), (1,))\n"
        ...         "    cpp_fused_add_0(arg0_1, buf0)\n"
        ...         "    buf1 = extern_kernels.mm(buf0, arg1_1)\n    return (buf1, )\n")
        >>> inductor_census([code])
        {'extern mm': 1, 'generated': 1, 'kernels': 2}
    """
    import collections
    import re

    counts = collections.Counter()
    for source in code:
        lines = source.splitlines()
        for start, line in enumerate(lines):
            if not line.lstrip().startswith("def call("):
                continue
            indent = len(line) - len(line.lstrip())
            for body in lines[start + 1:]:
                stripped = body.strip()
                if stripped and len(body) - len(body.lstrip()) <= indent:
                    break
                if not stripped or stripped.startswith(("#", "assert_", "del ")):
                    continue
                if re.search(r"\b(triton_\w+)\.run\(|^(cpp_fused_\w+)\(", stripped):
                    kind = "generated"
                elif match := re.search(r"extern_kernels\.(\w+)\(", stripped):
                    kind = f"extern {match.group(1)}"
                elif match := re.search(r"torch\.ops\.\w+\.(\w+)\.\w+\(", stripped):
                    kind = f"fallback {match.group(1)}"
                else:
                    continue
                counts[kind] += 1
                counts["kernels"] += 1
    return dict(sorted(counts.items()))


def jax_profile(call, synchronize, calls=3, top=30):
    """Where ``call``'s time goes on JAX: ``jax.profiler`` traces ``calls`` calls, and the
    trace (``jax.profiler.ProfileData``) is summed by name, like :func:`torch_profile`:
    the wall ms per call; on a GPU the kernels of the device's stream lines (the ms per
    call the device was busy, the kernels per call, the ``top`` kernels with a kind read
    from their names: convolution, GEMM, XLA fusion, copy...) and XLA's operations (the
    "XLA Ops" line: which HLO instruction each span of device time belongs to), and every
    device line's total; on a CPU, XLA's operations on the host."""
    import collections
    import glob
    import tempfile
    import time

    import jax

    synchronize(call())
    with tempfile.TemporaryDirectory(prefix="kctx-jax-profile-") as folder:
        with jax.profiler.trace(folder):
            start = time.perf_counter()
            for _ in range(calls):
                synchronize(call())
            wall = (time.perf_counter() - start) * 1e3 / calls
        paths = sorted(glob.glob(f"{folder}/**/*.xplane.pb", recursive=True))
        result = {"calls": calls, "wall_ms": round(wall, 3)}
        if not paths:
            return dict(result, error="no trace written")
        data = jax.profiler.ProfileData.from_file(paths[-1])
    device_planes = [p for p in data.planes if p.name.startswith("/device:GPU")]
    kernels, operations, lines = (collections.Counter(), collections.Counter(),
                                  collections.Counter())
    counts = collections.Counter()
    for plane in device_planes:
        for line in plane.lines:
            events = list(line.events)
            lines[line.name] += sum(e.duration_ns for e in events)
            if line.name.lower().startswith("stream"):
                for event in events:
                    kernels[event.name] += event.duration_ns
                    counts[event.name] += 1
            elif line.name == "XLA Ops":
                for event in events:
                    operations[event.name] += event.duration_ns
    if not device_planes:  # a CPU: XLA's operations on the host's client threads
        for plane in data.planes:
            for line in plane.lines:
                if "XLAPjRtCpuClient" not in line.name:
                    continue
                for event in line.events:
                    if event.name.startswith(("ThreadpoolListener", "end: ")):
                        continue
                    operations[event.name] += event.duration_ns
                    counts[event.name] += 1

    def per_call(ns):
        return round(ns / 1e6 / calls, 4)

    kinds = collections.Counter()
    for name, ns in kernels.items():
        kinds[_kernel_kind(name)] += ns
    result.update(
        device="gpu" if device_planes else "cpu",
        busy_ms=per_call(sum(kernels.values())) if device_planes else None,
        kernels_per_call=round(sum(counts.values()) / calls, 1),
        kernel_kinds_ms_per_call={k: per_call(ns) for k, ns in kinds.most_common()},
        top_kernels=[{"name": name[:160], "kind": _kernel_kind(name),
                      "count_per_call": round(counts[name] / calls, 1),
                      "ms_per_call": per_call(ns)} for name, ns in kernels.most_common(top)],
        top_operations=[{"name": name[:160], "ms_per_call": per_call(ns)}
                        for name, ns in operations.most_common(top)],
        device_lines_ms_per_call={name: per_call(ns) for name, ns in lines.most_common()})
    return result


def _kernel_kind(name):
    """A coarse kind of a GPU kernel (or XLA operation) from its name."""
    lowered = name.lower()
    for kind, marks in (("depthwise / grouped convolution", ("depthwise", "grouped")),
                        ("convolution", ("conv", "xmma_fprop", "implicit_gemm", "cudnn")),
                        ("GEMM", ("gemm", "cublas", "cutlass", "sm90_xmma", "matmul", "dot")),
                        ("transpose / copy", ("transpose", "copy", "memcpy", "memset")),
                        ("reduction", ("reduce", "reduction")),
                        ("fusion (XLA's own kernels)", ("fusion", "loop_", "input_", "triton")),
                        ):
        if any(mark in lowered for mark in marks):
            return kind
    return "other"


def run_together(jobs, max_parallel=4, timeout=900.0, log=print):
    """Run commands side by side, at most ``max_parallel`` at once, without taking turns
    (e.g. the compile-only processes that fill JAX's compilation cache before the timed
    processes of :func:`run_in_turn` load from it). ``jobs`` as :func:`run_in_turn`'s;
    returns ``{name: exit code}`` (None: stopped after ``timeout`` seconds)."""
    import os
    import subprocess
    import time

    pending, running, codes = list(jobs), {}, {}
    deadline = time.monotonic() + timeout
    while pending or running:
        while pending and len(running) < max_parallel:
            job = pending.pop(0)
            env = dict(os.environ, **job.get("env", {}))
            env.pop(TURN_VARIABLE, None)
            running[job["name"]] = subprocess.Popen(
                job["argv"], env=env, cwd=job.get("cwd"), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for name, process in list(running.items()):
            if process.poll() is not None:
                codes[name] = process.returncode
                log(f"{name}: exit code {process.returncode}")
                del running[name]
            elif time.monotonic() > deadline:
                process.kill()
                process.wait()
                codes[name] = None
                log(f"{name}: stopped after {timeout:.0f} s")
                del running[name]
        time.sleep(0.2)
    return codes


def run_in_turn(jobs, prepare_timeout=600.0, run_timeout=300.0, log=print, on_result=None):
    """Run measuring processes that prepare together and time one at a time.

    Every job starts at once with ``KCTX_TAKE_TURNS=1``; each prepares (builds, compiles,
    loads) and then calls :func:`wait_for_turn`. When all have said they are ready (or
    exited, or ``prepare_timeout`` seconds passed), the runner lets them time one after
    another, in the jobs' order, each for at most ``run_timeout`` seconds, and reads the
    JSON each wrote. A job that never said it was ready is stopped.

    Args:
        jobs: dicts with ``name``, ``argv`` (the command), ``json`` (the path the command
            writes its result to) and optionally ``env`` (variables to add) and ``cwd``.
        prepare_timeout: seconds for all of them to get ready.
        run_timeout: seconds each may time for.
        log: where progress lines go.
        on_result: called with ``(name, result)`` as each job's result comes in.

    Returns:
        ``{name: result}``: the JSON a job wrote, or ``{"error": ...}`` with the end of
        its standard error.
    """
    import json
    import os
    import subprocess
    import tempfile
    import threading
    import time

    running = {}
    for job in jobs:
        env = dict(os.environ, **job.get("env", {}), **{TURN_VARIABLE: "1"})
        err = tempfile.TemporaryFile("w+")  # the job's standard error, gone when closed
        process = subprocess.Popen(job["argv"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=err, env=env, cwd=job.get("cwd"), text=True)
        ready = threading.Event()

        def read(process=process, ready=ready):
            for line in process.stdout:
                if line.strip() == READY_MARKER:
                    ready.set()
            ready.set()  # exited (or closed its output): nothing more to wait for

        threading.Thread(target=read, daemon=True).start()
        running[job["name"]] = (job, process, ready, err)
    started = time.monotonic()
    for name, (job, process, ready, err) in running.items():
        ready.wait(max(0.0, prepare_timeout - (time.monotonic() - started)))
    log(f"{len(running)} processes prepared in {time.monotonic() - started:.0f} s")

    def error_of(process, err, why):
        err.seek(0)
        tail = err.read()[-3000:]
        return {"error": f"{why} (exit code {process.returncode})", "stderr_tail": tail}

    results = {}
    for name, (job, process, ready, err) in running.items():
        turn = time.monotonic()
        if not ready.is_set():
            process.kill()
            process.wait()
            results[name] = error_of(process, err, f"not ready after {prepare_timeout:.0f} s")
        else:
            try:
                if process.poll() is None:
                    process.stdin.write("go\n")
                    process.stdin.flush()
                process.wait(run_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                results[name] = error_of(process, err, f"timed for over {run_timeout:.0f} s")
            except BrokenPipeError:
                process.wait()
            if name not in results:
                if process.returncode == 0 and os.path.exists(job["json"]):
                    with open(job["json"]) as f:
                        results[name] = json.load(f)
                else:
                    results[name] = error_of(process, err, "failed")
        status = (results[name].get("error", "done") if isinstance(results[name], dict)
                  else "done")
        log(f"{name}: {status} ({time.monotonic() - turn:.1f} s)")
        err.close()
        if on_result is not None:
            on_result(name, results[name])
    return results
