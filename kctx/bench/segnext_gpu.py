"""SegNeXt T / S / B / L on a GPU with JAX and PyTorch, next to the official model.

``python -m kctx.bench segnext-gpu`` measures :func:`kctx.models.segnext` (150 classes,
whole-image inference of RGB 0–255 images at ``--size``: normalisation, network, logits
resized to the input) on the Keras backends JAX and PyTorch, for each variant, compute
dtype and batch size: the batch-1 latency and the batch-16 throughput, in float32 and in
bfloat16. With ``--official-python``, mmsegmentation 1.2.2's SegNeXt
(``tools/segnext_official_latency.py``) is measured on the same GPU in the same way.

One measuring process per (framework, variant, dtype). The processes build, load and
compile together, then time one at a time (:func:`kctx.bench.standalone.run_in_turn`),
so XLA's compilation runs in parallel while no two timed loops share the GPU. A timed
call is the wall time until the device has finished (``block_until_ready``,
``torch.cuda.synchronize``): the median of ``--repeats`` calls after ``--warmup``
(``--batch-warmup`` / ``--batch-repeats`` at the larger batches).

* **JAX**: the model's ``stateless_call`` under ``jax.jit``, compiled ahead of the
  timing (compile time, XLA's cost analysis and :func:`hlo_census` recorded), the weights
  its arguments (``--inference-function``: its constants, through
  :func:`kctx.export.inference_function`). XLA's default precision:
  float32 convolutions and matmuls run on TF32 tensor cores.
* **PyTorch**: the Keras model called eagerly under ``torch.no_grad()``
  (``torch.backends.cudnn.benchmark = True``, as mmsegmentation's runner sets it);
  ``--inference-function``: :func:`kctx.export.inference_function`, the exported
  program compiled by ``torch.compile`` (``--compile-mode``), or not
  (``--inference-function exported``).
  PyTorch's defaults: float32 convolutions on TF32, matmuls in full float32.
* **CUDA graphs** (PyTorch on a GPU, both sides): the same call captured once in a CUDA
  graph and replayed (:func:`kctx.bench.standalone.cuda_graph`), which removes Python's
  and the launches' overhead: what a deployment on PyTorch can add without changing the
  model.
* **bfloat16**: Keras' ``mixed_bfloat16`` policy (float32 variables, bfloat16 compute;
  the Hamburger's NMF stays float32); the official model under
  ``torch.autocast("cuda", torch.bfloat16)``.

``--check-fixtures DIR`` (the float32 SegNeXt-T process of each backend) also loads the
official-format checkpoints of ``tests/fixtures/segnext`` on the GPU and reports how far
the logits are from the official model's (computed on a CPU in float32).
"""

import json
import os
import shlex
import sys
import time

import numpy as np

from kctx.arguments import output_path, positive_int
from kctx.bench import report
from kctx.bench.standalone import (
    cuda_graph,
    inductor_census,
    jax_profile,
    package_versions,
    torch_census,
    torch_profile,
    run_in_turn,
    time_synced,
    wait_for_turn,
)
from kctx.export import TORCH_COMPILE_MODES

VARIANTS = ("t", "s", "b", "l")
BACKENDS = ("jax", "torch")
DTYPES = ("float32", "bfloat16")
POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16"}
FRAMEWORK_NAMES = {"jax": "kctx JAX", "torch": "kctx PyTorch", "torch_graph": "kctx PT graph",
                   "official": "official", "official_graph": "official graph"}
# Each framework column: the process whose result holds it, and the result's key.
COLUMNS = {"jax": ("jax", "cells"), "torch": ("torch", "cells"),
           "torch_graph": ("torch", "cells_graph"), "official": ("official", "cells"),
           "official_graph": ("official", "cells_graph")}
GOAL = 0.7  # kctx at most 0.7x the official model's time on the same GPU
OFFICIAL_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tools", "segnext_official_latency.py")
# mmseg's published inference times (ms, ADE20K 512x512, batch 1, a V100-class GPU).
PUBLISHED_MS = {"t": 19.1, "s": 23.7, "b": 28.5, "l": 43.7}


def random_images(batch, size, seed=0):
    """``batch`` uniform 0–255 RGB images, (batch, size, size, 3) float32."""
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 255, (batch, size, size, 3)).astype("float32")


def device_description():
    """The accelerator the process's Keras backend computes on."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        device = jax.devices()[0]
        return {"platform": device.platform, "device_kind": device.device_kind,
                "count": jax.device_count()}
    import torch

    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        return {"platform": "cuda", "device_kind": properties.name,
                "memory_gb": round(properties.total_memory / 1e9, 1),
                "multiprocessors": properties.multi_processor_count,
                "count": torch.cuda.device_count()}
    return {"platform": "cpu", "device_kind": "cpu", "count": 1}


class Runner:
    """How the process's backend puts arrays on the device, runs a model's forward pass
    and waits for it: ``jax.jit`` of ``stateless_call`` on JAX, the eager call under
    ``torch.no_grad()`` on PyTorch."""

    def __init__(self):
        import keras

        self.backend = keras.backend.backend()
        if self.backend not in ("jax", "torch"):
            raise ValueError("The GPU benchmarks measure kctx on JAX and PyTorch (the GPU "
                             "machines have no TensorFlow; TensorFlow's CPU benchmark is "
                             f"`python -m kctx.bench segnext`). Received: KERAS_BACKEND="
                             f"{self.backend!r}")
        if self.backend == "torch":
            import torch

            torch.backends.cudnn.benchmark = True
            self.torch = torch

    def to_device(self, array):
        if self.backend == "jax":
            import jax

            return jax.device_put(array)
        import keras

        return keras.ops.convert_to_tensor(array)

    def synchronize(self, outputs):
        if self.backend == "jax":
            import jax

            return jax.block_until_ready(outputs)
        if self.torch.cuda.is_available():
            self.torch.cuda.synchronize()
        return outputs

    def forward(self, model, x, inference_function=None, compile_mode=None):
        """``(call, info)``: a function of no arguments computing ``model(x)`` for
        inference, compiled ahead on JAX (``info``: compile seconds, XLA's FLOPs and bytes
        accessed, :func:`hlo_census`, :func:`dispatch_us`). ``inference_function``
        (``"compiled"`` or ``"exported"``): the call through
        :func:`kctx.export.inference_function`, made here (``info``: ``compile_s``, the
        first call's seconds): on JAX the weights are constants of the compiled program
        instead of its arguments, so XLA folds what it computes from them alone (the layout
        changes of the filters, say) at compile time and a call dispatches the image alone;
        on PyTorch the exported program, compiled by ``torch.compile`` (``compile_mode``:
        its mode; ``info``: :func:`kctx.bench.standalone.inductor_census` of its code) or
        not (``"exported"``). On PyTorch without Inductor, ``info`` has the call's
        :func:`kctx.bench.standalone.torch_census`."""
        if inference_function:
            from kctx.export import inference_function as make

            infer = make(model, compile=inference_function == "compiled", mode=compile_mode)
            start = time.perf_counter()
            if self.backend == "torch" and inference_function == "compiled":
                from torch._inductor.utils import run_and_get_code

                outputs, code = run_and_get_code(infer, x)
                self.synchronize(outputs)
            else:
                self.synchronize(infer(x))
            info = {"compile_s": round(time.perf_counter() - start, 2)}
            if self.backend == "jax":
                compiled = next(iter(infer.programs.values()))
                info.update(xla_cost(compiled), hlo_census=hlo_census(compiled, inputs=[x.shape]),
                            dispatch_us=dispatch_us((x,)))
            elif inference_function == "compiled":
                info["inductor_census"] = inductor_census(code)
            else:
                info["torch_census"] = torch_census(lambda: infer(x), inputs=[x])
            return (lambda: infer(x)), info
        if self.backend == "jax":
            import jax

            state = ([v.value for v in model.trainable_variables],
                     [v.value for v in model.non_trainable_variables])

            def forward(state, x):
                return model.stateless_call(state[0], state[1], x, training=False)[0]

            start = time.perf_counter()
            compiled = jax.jit(forward).lower(state, x).compile()
            arguments = (state, x)
            info = {"compile_s": round(time.perf_counter() - start, 2), **xla_cost(compiled),
                    "hlo_census": hlo_census(compiled, inputs=[x.shape]),
                    "dispatch_us": dispatch_us(arguments)}
            return (lambda: compiled(*arguments)), info
        torch = self.torch

        def call():
            with torch.no_grad():
                return model(x, training=False)

        return call, {"torch_census": torch_census(call, inputs=[x])}

    def reset_peak_memory(self):
        if self.backend == "torch" and self.torch.cuda.is_available():
            self.torch.cuda.reset_peak_memory_stats()

    def peak_memory_mb(self):
        """The device allocator's peak (on JAX: over the whole process so far)."""
        if self.backend == "jax":
            import jax

            stats = jax.devices()[0].memory_stats() or {}
            peak = stats.get("peak_bytes_in_use")
        elif self.torch.cuda.is_available():
            peak = self.torch.cuda.max_memory_allocated()
        else:
            peak = None
        return None if peak is None else round(peak / 2**20, 1)


def dispatch_us(arguments, calls=500):
    """The host's µs per call of a compiled JAX program that takes ``arguments`` (the same
    arrays, kept though unused) and computes next to nothing: JAX's dispatch of a call's
    arguments (the pytree's flattening, each buffer's checks), which a call timed to the
    device's end pays on top of its kernels. SegNeXt-T's weights as arguments, 545 arrays:
    223 µs on a 2-core AMD EPYC, against 6 µs for the image alone (``--inference-function``;
    ``python -m kctx.bench.segnext_gpu --cell t float32 --batches 1 --size 64
    [--inference-function] --json F`` on the CPU, ``dispatch_us`` in F).

    Example:
        >>> import jax.numpy as jnp
        >>> weights = [jnp.ones((3, 3)), jnp.zeros(4)]
        >>> dispatch_us((weights, jnp.ones((1, 8, 8, 3))), calls=3) > 0
        True
    """
    import jax

    probe = jax.jit(lambda *a: jax.tree_util.tree_leaves(a)[-1].ravel()[0],
                    keep_unused=True).lower(*arguments).compile()
    for _ in range(20):
        jax.block_until_ready(probe(*arguments))
    start = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(probe(*arguments))
    return round((time.perf_counter() - start) / calls * 1e6, 1)


def xla_cost(compiled):
    """XLA's cost analysis of a compiled JAX function: FLOPs and bytes accessed."""
    try:
        cost = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 - not every platform provides it
        return {}
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    return {key.replace(" ", "_"): float(cost[key]) for key in ("flops", "bytes accessed")
            if cost and key in cost}


def hlo_census(compiled, inputs=()):
    """What XLA made of a compiled JAX function, counted from its optimized HLO: the
    library calls by target (cuDNN convolutions, cuBLAS GEMMs...), and the kernels XLA
    writes itself (fusions), the layout changes (transposes, copies) and the rest, in the
    entry computation and every computation it calls. A static profile: where layout
    changes around convolutions or unfused element-wise work would cost time.

    ``inputs``: the shapes of the call's data arguments (the images); the entry's other
    parameters are the weights. A kernel of the entry computation that reads the weights
    and constants alone, or nothing (a filter's layout change, a table of resize indices),
    computes the same on every call: it is counted once more under ``"<kind> of weights
    alone"``, a kernel that a program with the weights folded in as constants would not
    launch (folding can merge other kernels too: a lower bound).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> w, x = jnp.ones((4, 4)), jnp.ones((2, 4))
        >>> compiled = jax.jit(lambda w, x: x @ (w * 2.0)).lower(w, x).compile()
        >>> census = hlo_census(compiled, inputs=[x.shape])
        >>> census.get("dot", 0) + census.get("fusion", 0) >= 1
        True
    """
    import collections
    import re

    try:
        text = compiled.as_text()
    except Exception:  # noqa: BLE001 - not every backend gives it
        return {}
    input_shapes = {",".join(str(int(d)) for d in shape) for shape in inputs}
    counts = collections.Counter()
    inside_fusion = False  # the bodies of fusions are one kernel each: not counted
    in_entry = False
    weight_only = set()  # entry values computed from the weights and constants alone
    computations = set()  # the names of computations (what calls= and to_apply= name)
    for line in text.splitlines():
        header = re.match(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if header:
            computations.add(header.group(2))
            in_entry = bool(header.group(1))
            inside_fusion = "fused" in header.group(2) or "fusion" in header.group(2)
            continue
        match = re.search(r"=\s*(?:\([^=]*?\)|\S+)\s+([a-z][a-z0-9-]*)\(", line)
        if not match or inside_fusion:
            continue
        opcode = match.group(1)
        if opcode == "custom-call":
            target = re.search(r'custom_call_target="([^"]+)"', line)
            kind = f"custom-call {target.group(1) if target else '?'}"
        elif opcode in ("fusion", "transpose", "copy", "convolution", "dot", "reduce",
                        "all-reduce", "while", "conditional"):
            kind = opcode
        else:
            kind = None
        if kind:
            counts[kind] += 1
        if not in_entry:
            continue
        name = re.match(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=", line)
        if not name:
            continue
        if opcode == "parameter":
            shape = re.search(r"=\s*\w+\[([\d,]*)\]", line)
            if not shape or shape.group(1) not in input_shapes:
                weight_only.add(name.group(1))
            continue
        if opcode == "constant":
            weight_only.add(name.group(1))
            continue
        operands = [operand for operand in re.findall(r"%([\w.\-]+)", line[match.end():])
                    if operand not in computations]
        if all(operand in weight_only for operand in operands):  # none: a constant
            weight_only.add(name.group(1))
            if kind:
                counts[f"{kind} of weights alone"] += 1
    return dict(sorted(counts.items()))


def timing_settings(batch, repeats, warmup, batch_repeats, batch_warmup):
    """``(repeats, warmup)`` of a cell: the batch-1 settings, or the larger batches'."""
    return (repeats, warmup) if batch == 1 else (batch_repeats, batch_warmup)


def segnext_cells(variant, dtype="float32", batches=(1, 16), size=512, num_classes=150,
                  repeats=50, warmup=10, batch_repeats=10, batch_warmup=3, check_fixtures=None,
                  json_path=None, profile=False, compile_only=False, backend_depthwise=False,
                  matrix_resize=False, square_taps=False, inference_function=None,
                  compile_mode=None):
    """Measure ``segnext(variant)`` in this process at each batch size (see the module's
    docstring); with ``check_fixtures``, the GPU's distance from the official outputs;
    with ``profile``, where each call's time goes
    (:func:`kctx.bench.standalone.torch_profile`, ``jax_profile``). ``compile_only``: build
    and compile, then return (on JAX with ``JAX_COMPILATION_CACHE_DIR`` set, this fills the
    cache the timed process loads from).

    Returns:
        A dict with the variant, dtype, backend, device, versions and one cell per batch
        size: median / minimum ms, images per second, the first call's ms, the
        allocator's peak and, on JAX, the compile time and XLA's cost analysis.
    """
    import keras

    from kctx.models import segnext

    runner = Runner()
    if backend_depthwise:
        _use_backend_depthwise()
    if square_taps:
        from kctx.layers import TapDepthwiseConv2D

        TapDepthwiseConv2D.TAP_KERNELS = {**TapDepthwiseConv2D.TAP_KERNELS, "gpu": "all"}
    if matrix_resize:  # jax.image.resize's interpolation matrices, as before lease 4
        from kctx.ops import resize

        resize.GATHER_PLATFORMS = ()
    keras.config.set_dtype_policy(POLICIES[dtype])
    keras.utils.set_random_seed(0)
    start = time.perf_counter()
    model = segnext(variant, num_classes=num_classes, input_shape=(size, size, 3))
    build_s = time.perf_counter() - start
    prepared = []
    for batch in batches:
        x = runner.to_device(random_images(batch, size, seed=batch))
        call, info = runner.forward(model, x, inference_function, compile_mode)
        prepared.append((batch, call, info))
    result = {"framework": keras.backend.backend(), "variant": variant, "dtype": dtype,
              "backend_depthwise": backend_depthwise, "matrix_resize": matrix_resize,
              "square_taps": square_taps, "inference_function": inference_function,
              "compile_mode": compile_mode,
              "policy": POLICIES[dtype], "size": size, "num_classes": num_classes,
              "params": int(sum(int(np.prod(v.shape)) for v in model.trainable_variables)),
              "build_s": round(build_s, 2), "device": device_description(),
              "versions": package_versions(("keras", "jax", "jaxlib", "torch", "numpy")),
              "cells": {}}
    if compile_only:
        return result
    if check_fixtures and dtype == "float32" and variant == "t":
        result["fixtures"] = fixture_errors(check_fixtures)
    wait_for_turn()
    for batch, call, info in prepared:
        cell_repeats, cell_warmup = timing_settings(batch, repeats, warmup, batch_repeats,
                                                    batch_warmup)
        result["cells"][str(batch)] = dict(
            timed_cell(runner, call, batch, cell_repeats, cell_warmup), **info)
    if runner.backend == "torch" and runner.torch.cuda.is_available():
        result["cells_graph"] = {}
        for batch, call, info in prepared:
            cell_repeats, cell_warmup = timing_settings(batch, repeats, warmup, batch_repeats,
                                                        batch_warmup)
            try:
                result["cells_graph"][str(batch)] = timed_cell(
                    runner, cuda_graph(call), batch, cell_repeats, cell_warmup)
            except Exception as error:  # noqa: BLE001 - that column says so
                result["cells_graph"][str(batch)] = {
                    "error": f"{type(error).__name__}: {error}"[:500]}
    if profile:
        profiler = torch_profile if runner.backend == "torch" else jax_profile
        result["profiles"] = {}
        for batch, call, info in prepared:
            try:
                result["profiles"][str(batch)] = profiler(call, runner.synchronize)
            except Exception as error:  # noqa: BLE001 - a profile is extra
                result["profiles"][str(batch)] = {"error": f"{type(error).__name__}: {error}"}
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
    return result


def _use_backend_depthwise():
    """In this process, SegNeXt's ``TapDepthwiseConv2D`` layers run the backend's grouped
    convolution on JAX too (``--backend-depthwise``: how kctx ran before the taps)."""
    from kctx.layers import TapDepthwiseConv2D

    TapDepthwiseConv2D.TAP_KERNELS = {}


def timed_cell(runner, call, batch, repeats, warmup):
    """The first call's ms, :func:`kctx.bench.standalone.time_synced` of ``call``,
    images per second and the allocator's peak."""
    runner.reset_peak_memory()
    start = time.perf_counter()
    runner.synchronize(call())
    first_ms = (time.perf_counter() - start) * 1e3
    timed = time_synced(call, runner.synchronize, repeats, warmup)
    return {"batch": batch, **timed, "first_call_ms": round(first_ms, 1),
            "images_per_s": round(batch * 1e3 / timed["median_ms"], 2),
            "peak_memory_mb": runner.peak_memory_mb()}


def fixture_errors(folder):
    """max |kctx − official| / max |official| of the official-format fixtures loaded on
    this backend's device: the reduced SegNeXt's logits and SegNeXt-T's head logits
    (the official outputs were computed in float32 on a CPU)."""
    import keras

    from kctx.models import segnext

    def relative(got, expected):
        got = np.asarray(keras.ops.convert_to_numpy(got), np.float64)
        return float(np.abs(got - expected).max() / np.abs(expected).max())

    tiny_options = dict(embed_dims=(16, 32, 64, 96), depths=(1, 1, 2, 1),
                        mlp_ratios=(4, 4, 2, 2))
    errors = {}
    outputs = np.load(os.path.join(folder, "tiny_outputs.npz"))
    model = segnext(None, num_classes=7, channels=64, ham_channels=64, rank=8,
                    backbone_options=tiny_options,
                    weights=os.path.join(folder, "tiny_mmseg.pth"))
    errors["tiny_logits"] = relative(model(outputs["images"], training=False),
                                     outputs["logits"])
    outputs = np.load(os.path.join(folder, "mscan_t_outputs.npz"))
    model = segnext("t", weights=os.path.join(folder, "mscan_t_mmseg.pth"))
    head = keras.Model(model.inputs, model.get_layer("decode_head-conv_seg").output)
    errors["segnext_t_head_logits"] = relative(head(outputs["images"], training=False),
                                               outputs["head_logits"])
    return errors


# --- The runs: processes per framework, variant and dtype -------------------------------

def kctx_job(backend, variant, dtype, args, folder):
    """The command measuring one (backend, variant, dtype) in a fresh process."""
    path = os.path.join(folder, f"{backend}-{variant}-{dtype}.json")
    argv = [sys.executable, "-m", "kctx.bench.segnext_gpu", "--cell", variant, dtype,
            "--batches", *map(str, args.batches), "--size", str(args.size),
            "--num-classes", str(args.num_classes), "--repeats", str(args.repeats),
            "--warmup", str(args.warmup), "--batch-repeats", str(args.batch_repeats),
            "--batch-warmup", str(args.batch_warmup), "--json", path]
    if args.check_fixtures:
        argv += ["--check-fixtures", args.check_fixtures]
    if profiled(args, variant, dtype):
        argv += ["--profile"]
    return {"name": f"{backend}/{variant}/{dtype}", "argv": argv, "json": path,
            "env": {"KERAS_BACKEND": backend, "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                    "TF_CPP_MIN_LOG_LEVEL": "2"}}


def official_job(variant, dtype, args, folder):
    """The command measuring the official model (one variant and dtype) on the GPU."""
    path = os.path.join(folder, f"official-{variant}-{dtype}.json")
    argv = [args.official_python, args.official_script, "--variant", variant, "--device",
            args.official_device, "--dtype", dtype, "--batches", *map(str, args.batches), "--size",
            str(args.size), "--num-classes", str(args.num_classes), "--repeats",
            str(args.repeats), "--warmup", str(args.warmup), "--batch-repeats",
            str(args.batch_repeats), "--batch-warmup", str(args.batch_warmup), "--no-macs",
            "--cuda-graph", "--json", path] + (["--profile"] if profiled(args, variant, dtype)
                                               else [])
    return {"name": f"official/{variant}/{dtype}", "argv": argv, "json": path}


def profiled(args, variant, dtype):
    """Whether ``--profile`` asks for the profile of this variant and dtype."""
    if args.profile is None or dtype != "float32":
        return False
    return variant in (args.profile or ("t", "l"))


def jobs_of(args, folder):
    """Every measuring process of a run, in the order they time."""
    jobs = []
    for variant in args.variants:
        for dtype in args.dtypes:
            jobs += [kctx_job(backend, variant, dtype, args, folder) for backend in args.backends]
            if args.official_python:
                jobs.append(official_job(variant, dtype, args, folder))
    return jobs


def rows_of(results, args):
    """One row per (variant, dtype, batch): each framework's time and kctx's best ratio."""
    rows = []
    for variant in args.variants:
        for dtype in args.dtypes:
            for batch in args.batches:
                row = {"variant": variant, "dtype": dtype, "batch": batch, "frameworks": {}}
                for framework, (process, key) in COLUMNS.items():
                    result = results.get(f"{process}/{variant}/{dtype}")
                    if result is None or (key != "cells" and key not in result
                                          and "error" not in result):
                        continue
                    cell = result.get(key, {}).get(str(batch))
                    row["frameworks"][framework] = cell or {"error": result.get("error",
                                                                                "no cell")}
                rows.append(with_ratio(row))
    return rows


def with_ratio(row):
    """``row`` with kctx's fastest framework, its ms and its ratio to the official
    model's fastest time (eager or CUDA graph)."""
    timed = {f: c["median_ms"] for f, c in row["frameworks"].items()
             if not f.startswith("official") and "median_ms" in c}
    official = [c["median_ms"] for f, c in row["frameworks"].items()
                if f.startswith("official") and "median_ms" in c]
    best = min(timed, key=timed.get) if timed else None
    row["best"] = best
    row["official_best_ms"] = min(official) if official else None
    row["ratio"] = (round(timed[best] / row["official_best_ms"], 3)
                    if best and official else None)
    row["meets_goal"] = None if row["ratio"] is None else row["ratio"] <= GOAL
    return row


def format_table(rows, device=None):
    frameworks = [f for f in COLUMNS if any(f in row["frameworks"] for row in rows)]
    header = (f"{'Model':<10} {'dtype':<9} {'batch':>5} | "
              + " ".join(f"{FRAMEWORK_NAMES[f]:>14}" for f in frameworks)
              + f" | {'best/off.':>9}")
    lines = [f"SegNeXt on {device or 'the GPU'}: ms per call (images/s at batch > 1)",
             header, "-" * len(header)]
    for row in rows:
        cells = []
        for framework in frameworks:
            cell = row["frameworks"].get(framework)
            if cell is None:
                cells.append(f"{'—':>14}")
            elif "median_ms" not in cell:
                cells.append(f"{'failed':>14}")
            elif row["batch"] == 1:
                cells.append(f"{cell['median_ms']:>14.2f}")
            else:
                cells.append(f"{cell['median_ms']:>7.1f} {cell['images_per_s']:>4.0f}/s"
                             .rjust(14))
        ratio = "" if row["ratio"] is None else (
            f"{row['ratio']:.2f}" + ("" if row["meets_goal"] else " !"))
        lines.append(f"SegNeXt-{row['variant'].upper():<2} {row['dtype']:<9} "
                     f"{row['batch']:>5} | " + " ".join(cells) + f" | {ratio:>9}")
    lines.append("")
    lines.append(f"best/off.: kctx's fastest column over the official model's fastest "
                 f"(goal ≤ {GOAL}; '!': missed). graph: the call replayed as a CUDA graph. "
                 "mmseg publishes 19.1 / 23.7 / 28.5 / 43.7 ms for T–L "
                 "(batch 1, a V100-class GPU).")
    return "\n".join(lines)


def command_line(args):
    """The ``python -m kctx.bench segnext-gpu`` command that reproduces ``args``."""
    parts = ["python", "-m", "kctx.bench", "segnext-gpu", "--backends", *args.backends,
             "--variants", *args.variants, "--dtypes", *args.dtypes, "--batches",
             *map(str, args.batches), "--size", str(args.size), "--repeats", str(args.repeats),
             "--warmup", str(args.warmup), "--batch-repeats", str(args.batch_repeats),
             "--batch-warmup", str(args.batch_warmup)]
    if args.official_python:
        parts += ["--official-python", args.official_python]
    if args.check_fixtures:
        parts += ["--check-fixtures", args.check_fixtures]
    if args.profile is not None:
        parts += ["--profile", *args.profile]
    if args.json:
        parts += ["--json", args.json]
    return shlex.join(parts)


def run_payload(results, args, started):
    """What the command reports of the processes' ``results``: the rows, the device, the
    goal and the published times, every process's result."""
    device = next((r["device"] for r in results.values() if "device" in r), None)
    return {"benchmark": "segnext-gpu", "command": command_line(args), "device": device,
            "goal": GOAL, "published_ms": PUBLISHED_MS, "wall_s": round(time.time() - started),
            "rows": rows_of(results, args), "processes": results}


def run(args, log=print):
    """All the measuring processes of ``args``; the payload the command reports."""
    import tempfile

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="kctx-segnext-gpu-") as folder:
        results = run_in_turn(jobs_of(args, folder), args.prepare_timeout, args.run_timeout,
                              log)
    return run_payload(results, args, started)


def main(args):
    if args.cell:
        variant, dtype = args.cell
        return segnext_cells(variant, dtype, tuple(args.batches), args.size, args.num_classes,
                             args.repeats, args.warmup, args.batch_repeats, args.batch_warmup,
                             args.check_fixtures, args.json, args.profile is not None,
                             args.compile_only, args.backend_depthwise,
                             args.matrix_resize, args.square_taps, args.inference_function,
                             args.compile_mode)
    payload = run(args)
    device = (payload["device"] or {}).get("device_kind")
    report(payload, format_table(payload["rows"], device), args.json)
    return payload


def add_arguments(parser):
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    parser.add_argument("--batches", nargs="+", type=positive_int, default=[1, 16])
    parser.add_argument("--size", type=positive_int, default=512, help="height = width")
    parser.add_argument("--num-classes", type=positive_int, default=150)
    parser.add_argument("--repeats", type=positive_int, default=50,
                        help="timed calls at batch 1")
    parser.add_argument("--warmup", type=positive_int, default=10,
                        help="untimed calls at batch 1 (after the first)")
    parser.add_argument("--batch-repeats", type=positive_int, default=10,
                        help="timed calls at the larger batches")
    parser.add_argument("--batch-warmup", type=positive_int, default=3)
    parser.add_argument("--official-python",
                        help="a Python with torch + mmsegmentation: the official column")
    parser.add_argument("--official-script", default=OFFICIAL_SCRIPT)
    parser.add_argument("--official-device", default="cuda",
                        help="where the official model runs (cpu: to try the command out)")
    parser.add_argument("--check-fixtures",
                        help="tests/fixtures/segnext: the float32 T process of each backend "
                             "also reports its distance from the official outputs")
    parser.add_argument("--profile", nargs="*", default=None, metavar="VARIANT",
                        help="profile the calls of these variants (float32, JAX and PyTorch; "
                             "default with no names: t and l), beside the official model's")
    parser.add_argument("--prepare-timeout", type=float, default=600.0,
                        help="seconds for every process to build and compile")
    parser.add_argument("--run-timeout", type=float, default=300.0,
                        help="seconds each process may time for")
    parser.add_argument("--cell", nargs=2, metavar=("VARIANT", "DTYPE"),
                        help="measure one variant and dtype in this process (what each "
                             "measuring process runs)")
    parser.add_argument("--matrix-resize", action="store_true",
                        help="with --cell on JAX: bilinear resizes as jax.image.resize's "
                             "interpolation matrices, not two gathered taps per axis "
                             "(kctx.ops.resize.GATHER_PLATFORMS; how kctx ran before lease 4)")
    parser.add_argument("--square-taps", action="store_true",
                        help="with --cell on JAX: the square depthwise kernels (5×5, 3×3) as "
                             "kctx's sum of taps too, not XLA's convolution "
                             "(TapDepthwiseConv2D.TAP_KERNELS' \"all\"; how lease 3 ran)")
    parser.add_argument("--inference-function", nargs="?", const="compiled",
                        choices=("compiled", "exported"),
                        help="with --cell: the call through kctx.export.inference_function: "
                             "on JAX the weights as constants of the compiled program, not "
                             "its arguments, so XLA folds what it computes from them alone "
                             "(hlo_census's \"of weights alone\" kernels); on PyTorch the "
                             "exported program compiled by torch.compile, or as exported "
                             "(exported: PyTorch only)")
    parser.add_argument("--compile-mode", choices=TORCH_COMPILE_MODES,
                        help="with --inference-function on PyTorch: torch.compile's mode "
                             "(reduce-overhead: its CUDA graphs)")
    parser.add_argument("--backend-depthwise", action="store_true",
                        help="with --cell: MSCAN's depthwise convolutions as the backend's "
                             "grouped convolution on JAX too, not kctx's sum of taps "
                             "(TapDepthwiseConv2D; the comparison of results/gpu_h200/lease3)")
    parser.add_argument("--compile-only", action="store_true",
                        help="with --cell: build and compile, then exit (fills JAX's "
                             "compilation cache)")
    parser.add_argument("--json", type=output_path,
                        help="write the rows, the device, the versions and the command here")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kctx.bench.segnext_gpu",
                                     description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    main(parser.parse_args())
