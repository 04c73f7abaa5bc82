"""SegNeXt T / S / B / L: parameters, MACs and batch-1 CPU latency, kctx against official.

For each variant, :func:`kctx.models.segnext` (150 classes, the whole-image inference
of an RGB 0–255 image at ``--size``: normalisation, network, logits resized to the
input) is measured in fresh processes, one per cell, so that no two runtimes share
caches or thread pools:

* ``stats``: trainable parameters (``keras.Model.count_params`` also counts BatchNorm's
  moving statistics, which PyTorch keeps as buffers) and the MACs of one image counted
  from the traced graph by :func:`kctx.profile.count_macs` — ``Conv2D``,
  ``DepthwiseConv2dNative``, ``MatMul`` / ``BatchMatMul`` / ``Einsum`` (the Hamburger's
  breads and NMF); resizes, normalisations and element-wise ops are not counted;
  the ONNX and LiteRT artifacts are exported here (:func:`kctx.export.export_model`);
* ``keras`` / ``keras_xla``: ``model.predict_on_batch`` (the compiled ``tf.function``
  predict path) with ``jit_compile=False`` / ``True``, TensorFlow limited to
  ``--threads`` intra-op threads and one inter-op thread;
* ``onnx`` / ``litert``: the artifact in ONNX Runtime / the LiteRT interpreter
  (:func:`kctx.export.load_artifact` with ``num_threads=--threads``).

Each latency is the median of ``--repeats`` calls after ``--warmup``, on one uniform
0–255 image, random weights (seed 0). With ``--official-python``, the official PyTorch
model (mmsegmentation 1.2.2) is measured the same way by
``tools/segnext_official_latency.py`` in that interpreter, one process per variant, and
its MACs counted with PyTorch's ``FlopCounterMode`` (the ops kctx counts) and fvcore's
rules (the paper's convention); kctx itself never imports torch. The ratio column is
kctx's fastest runtime over the official time (goal: ≤ :data:`GOAL`). Each cell also
records the CPU share other processes used while it was timed.

``--layer-profile`` adds, per variant, the milliseconds of each layer kind
(:data:`LAYER_KINDS`: depthwise convs by kernel, 1×1 convs, norms, GELU, the
Hamburger...) in Keras-TF (TensorFlow's profiler, :func:`keras_layer_profile`) next to
the official model's (forward hooks), to show where the time goes.
"""

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

from kctx.arguments import output_path, positive_int
from kctx.bench import report
from kctx.bench.standalone import (
    CONV_1X1,
    CONV_3X3,
    ELEMENTWISE,
    HAMBURGER,
    HEAD_CONV,
    HEAD_NORM,
    HEAD_RESIZE,
    LAYOUT,
    OVERHEAD,
    UPSAMPLE,
    cpu_jiffies,
    cpu_model,
    depthwise_kind,
    other_load,
    package_versions,
)
from kctx.profile.layer_profile import run_worker

VARIANTS = ("t", "s", "b", "l")
RUNTIMES = ("keras", "keras_xla", "onnx", "litert")
RUNTIME_NAMES = {"keras": "Keras-TF", "keras_xla": "Keras-TF XLA", "onnx": "ONNX Runtime",
                 "litert": "LiteRT", "official": "Official PT"}
ARTIFACTS = {"onnx": "model.onnx", "litert": "model.tflite"}
# The paper (Tab. 1 / Tab. 2, ADE20K, 512×512): parameters (M) and GFLOPs — MACs as
# fvcore counts them (convolutions, matmuls, normalisations, bilinear upsampling).
PAPER = {"t": (4.3, 6.6), "s": (13.9, 15.9), "b": (27.6, 34.9), "l": (48.9, 70.0)}
GOAL = 0.7  # kctx's fastest runtime at most 0.7× the official model on the same CPU
OFFICIAL_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tools", "segnext_official_latency.py")
OFFICIAL_MARKER = "SEGNEXT_OFFICIAL_RESULT "
_RESULT_MARKER = "KCTX_SEGNEXT_RESULT "
_NOT_RUN = "not run"


# ---------------------------------------------------------------------------
# Measuring processes.
# ---------------------------------------------------------------------------


def _image(size, seed=0):
    import numpy as np

    return np.random.default_rng(seed).uniform(0, 255, (1, size, size, 3)).astype("float32")


def _time(function, x, repeats, warmup):
    """First-call, median and minimum wall time (ms) of ``function(x)``, every timed
    call, and the load of the rest of the machine while they ran."""
    start = time.perf_counter()
    function(x)
    first = (time.perf_counter() - start) * 1e3
    for _ in range(warmup):
        function(x)
    times = []
    load_before, before = os.getloadavg(), cpu_jiffies()
    for _ in range(repeats):
        start = time.perf_counter()
        function(x)
        times.append((time.perf_counter() - start) * 1e3)
    return {"median_ms": round(statistics.median(times), 3), "min_ms": round(min(times), 3),
            "times_ms": [round(t, 3) for t in times], "first_call_ms": round(first, 1),
            "loadavg_before": [round(v, 2) for v in load_before],
            **other_load(before, cpu_jiffies())}


def _limit_tensorflow_threads(threads):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def _build(variant, size, num_classes, seed=0):
    import keras

    from kctx.models import segnext

    keras.utils.set_random_seed(seed)
    return segnext(variant, num_classes=num_classes, input_shape=(size, size, 3))


def hamburger_macs(graph):
    """MACs of the counted ops under a Hamburger's name scope (its breads and NMF)
    in ``graph``'s top level."""
    from kctx.profile.macs import MAC_RULES

    return sum(MAC_RULES[op.type](op) for op in graph.get_operations()
               if op.type in MAC_RULES and "hamburger" in op.name)


def model_stats(variant, size=512, num_classes=150, export_dir=None, formats=()):
    """Parameters and MACs of ``segnext(variant)`` at ``size``; with ``export_dir``, the
    ``formats`` (``"onnx"``, ``"litert"``) exported there."""
    import tensorflow as tf

    from kctx.profile import count_graph_macs, count_params

    model = _build(variant, size, num_classes)
    trainable, non_trainable = count_params(model)
    concrete = tf.function(lambda x: model(x, training=False), autograph=False) \
        .get_concrete_function(tf.TensorSpec((1, size, size, 3), tf.float32))
    by_op = {}
    macs = count_graph_macs(concrete.graph, by_op)
    resized = {op.name: op.outputs[0].shape.as_list() for op in concrete.graph.get_operations()
               if op.type.startswith("Resize")}
    result = {"params": trainable, "non_trainable_params": non_trainable,
              "keras_count_params": int(model.count_params()), "macs": int(macs),
              "macs_by_op": {k: int(v) for k, v in sorted(by_op.items())},
              "macs_hamburger": int(hamburger_macs(concrete.graph)),
              "resize_output_elements": int(sum(
                  _prod(shape) for shape in resized.values()))}
    if export_dir:
        from kctx.export import artifact_size, export_model

        for format in formats:
            path = os.path.join(export_dir, ARTIFACTS[format])
            start = time.perf_counter()
            try:
                export_model(model, path, format=format)
            except Exception as error:  # noqa: BLE001 - that runtime's cell says so
                result[f"{format}_artifact"] = {"error": f"export: {_error(error)}"}
                continue
            result[f"{format}_artifact"] = {"path": path, "bytes": artifact_size(path),
                                            "export_s": round(time.perf_counter() - start, 1)}
    return result


def _prod(values):
    out = 1
    for value in values:
        out *= int(value)
    return out


def keras_latency(variant, size=512, num_classes=150, jit_compile=False, repeats=5, warmup=2,
                  threads=2):
    """Latency of ``model.predict_on_batch`` (compiled ``tf.function``, XLA with
    ``jit_compile``) on ``threads`` intra-op threads."""
    _limit_tensorflow_threads(threads)
    model = _build(variant, size, num_classes)
    model.compile(jit_compile=jit_compile)
    result = _time(model.predict_on_batch, _image(size), repeats, warmup)
    return {**result, "threads": threads, "jit_compile": bool(jit_compile)}


def artifact_latency(path, format, size=512, repeats=5, warmup=2, threads=2):
    """Latency of an exported artifact in its runtime (``num_threads=threads``)."""
    from kctx.export import load_artifact

    function = load_artifact(path, "onnx" if format == "onnx" else "litert",
                             num_threads=threads)
    return {**_time(function, _image(size), repeats, warmup), "threads": threads}




LAYER_KINDS = (
    *(depthwise_kind(*k) for k in ((5, 5), (1, 7), (7, 1), (1, 11), (11, 1), (1, 21), (21, 1),
                                   (3, 3))),
    CONV_1X1, CONV_3X3, "BatchNorm", "LayerNorm", "GELU", ELEMENTWISE, LAYOUT, HEAD_RESIZE,
    HEAD_CONV, HEAD_NORM, HAMBURGER, UPSAMPLE, "other", OVERHEAD)


def keras_layer_kind(layer):
    """The :data:`LAYER_KINDS` entry of a layer of :func:`kctx.models.segnext`."""
    import keras

    from kctx.layers.hamburger import Hamburger
    from kctx.layers.resize import ResizeToMatch
    from kctx.models.segnext import LayerScale, PadToMultiple, UpsampleLogits

    head = layer.name.startswith("decode_head.")
    if isinstance(layer, keras.layers.DepthwiseConv2D):
        return depthwise_kind(*layer.kernel_size)
    if isinstance(layer, keras.layers.Conv2D):
        return HEAD_CONV if head else CONV_1X1 if tuple(layer.kernel_size) == (1, 1) \
            else CONV_3X3
    if isinstance(layer, keras.layers.ZeroPadding2D):
        return CONV_3X3
    if isinstance(layer, Hamburger):
        return HAMBURGER
    if isinstance(layer, (keras.layers.GroupNormalization, keras.layers.ReLU)) and head:
        return HEAD_NORM
    if isinstance(layer, keras.layers.BatchNormalization):
        return "BatchNorm"
    if isinstance(layer, keras.layers.LayerNormalization):
        return "LayerNorm"
    if isinstance(layer, keras.layers.Activation):
        return "GELU"
    if isinstance(layer, (LayerScale, keras.layers.Add, keras.layers.Multiply,
                          keras.layers.Dropout)):
        return ELEMENTWISE
    if isinstance(layer, (ResizeToMatch, keras.layers.Concatenate)):
        return HEAD_RESIZE
    if isinstance(layer, (UpsampleLogits, PadToMultiple, keras.layers.Rescaling)):
        return UPSAMPLE
    return "other"


def _op_events(logdir):
    """(node name, op type, duration ms) of every TensorFlow op in a profiler trace."""
    import glob

    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    events = []
    for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        for plane in space.planes:
            metadata = plane.event_metadata
            for line in plane.lines:
                if not line.name.startswith("tf_Compute"):
                    continue
                for event in line.events:
                    name = metadata[event.metadata_id].name
                    if "/" in name and ":" in name and "::" not in name:
                        node, _, op_type = name.rpartition(":")
                        events.append((node, op_type, event.duration_ps / 1e9))
    return events


def keras_layer_profile(variant, size=512, num_classes=150, threads=2, calls=3, warmup=2):
    """Milliseconds per call of each :data:`LAYER_KINDS` entry in ``predict_on_batch``,
    from TensorFlow's profiler (every op event of ``calls`` calls, each op attributed to
    the innermost layer whose name scope holds it), and per op type."""
    import re

    import keras
    import tensorflow as tf

    _limit_tensorflow_threads(threads)
    model = _build(variant, size, num_classes)
    model.compile()
    x = _image(size)
    for _ in range(warmup + 1):
        model.predict_on_batch(x)
    kinds, models = {}, [model]
    while models:  # the layers of the model and of its nested models, not their sublayers
        for layer in models.pop().layers:
            if isinstance(layer, keras.Model):
                models.append(layer)
            else:
                kinds.setdefault(layer.name, keras_layer_kind(layer))
    with tempfile.TemporaryDirectory(prefix="kctx-segnext-trace-") as logdir:
        tf.profiler.experimental.start(
            logdir, options=tf.profiler.experimental.ProfilerOptions(host_tracer_level=2))
        start = time.perf_counter()
        for _ in range(calls):
            model.predict_on_batch(x)
        call_ms = (time.perf_counter() - start) * 1e3 / calls
        tf.profiler.experimental.stop()
        events = _op_events(logdir)
    by_kind, by_op = {}, {}
    for node, op_type, ms in events:
        kind = "other"
        for scope in reversed(node.split("/")[:-1]):
            name = re.sub(r"_\d+$", "", scope)  # Keras appends _<call count> to a scope
            if name in kinds:
                kind = kinds[name]
                break
        by_kind[kind] = by_kind.get(kind, 0.0) + ms / calls
        by_op[op_type] = by_op.get(op_type, 0.0) + ms / calls
    ops_ms = sum(by_kind.values())
    by_kind[OVERHEAD] = max(0.0, call_ms - ops_ms)
    return {"call_ms": round(call_ms, 2), "ops_ms": round(ops_ms, 2),
            "layer_ms": {k: round(v, 3) for k, v in by_kind.items()},
            "op_type_ms": {k: round(v, 3) for k, v in sorted(by_op.items(),
                                                             key=lambda kv: -kv[1])},
            "threads": threads, "calls": calls}


_TASKS = {"stats": model_stats, "keras": keras_latency, "artifact": artifact_latency,
          "layer_profile": keras_layer_profile}


def run_task(task, request, timeout=None):
    """Run a task of this module (``_TASKS``) in a fresh process on Keras-TF."""
    return run_worker(f"kctx.bench.segnext:{_TASKS[task].__name__}", request, timeout)


def official_latency(python, variant, size=512, num_classes=150, repeats=5, warmup=2,
                     threads=2, script=OFFICIAL_SCRIPT, layer_profile=False, timeout=None):
    """Run ``tools/segnext_official_latency.py`` in ``python`` for one variant (with
    ``layer_profile``, its per-layer-kind times too, taken after the timed calls)."""
    command = [python, script, "--variant", variant, "--size", str(size), "--num-classes",
               str(num_classes), "--repeats", str(repeats), "--warmup", str(warmup),
               "--threads", str(threads)] + (["--layer-profile"] if layer_profile else [])
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    for line in completed.stdout.splitlines():
        if line.startswith(OFFICIAL_MARKER):
            return json.loads(line[len(OFFICIAL_MARKER):])
    raise RuntimeError(f"the official script failed with exit code {completed.returncode}:\n"
                       f"{completed.stderr[-4000:]}")


def _error(error):
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(error).__name__)[:300]


# ---------------------------------------------------------------------------
# The benchmark.
# ---------------------------------------------------------------------------


def run_segnext(variants=VARIANTS, runtimes=RUNTIMES, size=512, num_classes=150, repeats=5,
                warmup=2, threads=2, official_python=None, official_script=OFFICIAL_SCRIPT,
                layer_profile=False, timeout=None, log=print):
    """One row per variant: parameters, MACs, the latency of each runtime and of the
    official model, the fastest kctx runtime and its ratio to the official time; with
    ``layer_profile``, the time of each layer kind in Keras-TF and in the official model
    (``row["layer_profile"]``, measured after the latencies, in its own process)."""
    rows = []
    for variant in variants:
        row = {"variant": variant, "size": size, "num_classes": num_classes}
        if (size, num_classes) == (512, 150):
            row["paper"] = {"params_m": PAPER[variant][0], "gflops": PAPER[variant][1]}
        formats = [r for r in runtimes if r in ARTIFACTS]
        with tempfile.TemporaryDirectory(prefix=f"kctx-segnext-{variant}-") as folder:
            stats = run_task("stats", {"variant": variant, "size": size,
                                       "num_classes": num_classes,
                                       "export_dir": folder if formats else None,
                                       "formats": formats}, timeout)
            artifacts = {f: stats.pop(f"{f}_artifact") for f in formats}
            row.update(stats)
            log(f"SegNeXt-{variant.upper()}: {row['params']:,} params, "
                f"{row['macs'] / 1e9:.2f} GMACs")
            cells = {}
            for runtime in runtimes:
                try:
                    if runtime in ARTIFACTS and "error" in artifacts[runtime]:
                        raise RuntimeError(artifacts[runtime]["error"])
                    if runtime in ARTIFACTS:
                        cell = run_task("artifact", {"path": artifacts[runtime]["path"],
                                                     "format": runtime, "size": size,
                                                     "repeats": repeats, "warmup": warmup,
                                                     "threads": threads}, timeout)
                        cell["artifact_bytes"] = artifacts[runtime]["bytes"]
                        cell["export_s"] = artifacts[runtime]["export_s"]
                    else:
                        cell = run_task("keras", {"variant": variant, "size": size,
                                                  "num_classes": num_classes,
                                                  "jit_compile": runtime == "keras_xla",
                                                  "repeats": repeats, "warmup": warmup,
                                                  "threads": threads}, timeout)
                    log(f"SegNeXt-{variant.upper()}, {RUNTIME_NAMES[runtime]}: "
                        f"{cell['median_ms']:.1f} ms (others used {cell['others_cpu_pct']}% "
                        "of the CPU)")
                except (RuntimeError, subprocess.TimeoutExpired) as error:
                    cell = {"error": _error(error)}
                    log(f"SegNeXt-{variant.upper()}, {RUNTIME_NAMES[runtime]}: failed: "
                        f"{cell['error']}")
                cells[runtime] = cell
        row["runtimes"] = cells
        row["official"] = {"status": _NOT_RUN}
        if official_python:
            try:
                row["official"] = official_latency(official_python, variant, size, num_classes,
                                                   repeats, warmup, threads, official_script,
                                                   layer_profile, timeout)
                log(f"SegNeXt-{variant.upper()}, official PyTorch: "
                    f"{row['official']['median_ms']:.1f} ms")
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
                row["official"] = {"error": _error(error)}
                log(f"SegNeXt-{variant.upper()}, official PyTorch: failed: "
                    f"{row['official']['error']}")
        if layer_profile:
            row["layer_profile"] = {"official": row["official"].pop("layer_profile", None)}
            try:
                row["layer_profile"]["keras"] = run_task(
                    "layer_profile", {"variant": variant, "size": size,
                                      "num_classes": num_classes, "threads": threads}, timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                row["layer_profile"]["keras"] = {"error": _error(error)}
        timed = {r: c["median_ms"] for r, c in cells.items() if "median_ms" in c}
        row["best_runtime"] = min(timed, key=timed.get) if timed else None
        row["best_ms"] = timed[row["best_runtime"]] if timed else None
        official_ms = row["official"].get("median_ms")
        row["ratio"] = round(row["best_ms"] / official_ms, 3) \
            if timed and official_ms else None
        row["goal"] = GOAL
        row["meets_goal"] = None if row["ratio"] is None else row["ratio"] <= GOAL
        rows.append(row)
    return rows


def _versions():
    return package_versions(("kctx", "tensorflow", "keras", "onnxruntime", "tf2onnx",
                             "ai-edge-litert", "numpy"))


def command_line(args):
    """The ``python -m kctx.bench segnext`` command that reproduces ``args``."""
    parts = ["python", "-m", "kctx.bench", "segnext", "--variants", *args.variants,
             "--runtimes", *args.runtimes, "--size", str(args.size), "--repeats",
             str(args.repeats), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    if args.num_classes != 150:
        parts += ["--num-classes", str(args.num_classes)]
    if args.official_python:
        parts += ["--official-python", args.official_python]
        if args.official_script != OFFICIAL_SCRIPT:
            parts += ["--official-script", args.official_script]
    if args.layer_profile:
        parts += ["--layer-profile"]
    if args.json:
        parts += ["--json", args.json]
    return shlex.join(parts)


def _ms(cell):
    if cell is None:
        return "—"
    if "error" in cell:
        return "failed"
    if cell.get("status") == _NOT_RUN:
        return _NOT_RUN
    return format(cell["median_ms"], ".1f")


def _g(value):
    return "—" if value is None else format(value / 1e9, ".2f")


def _paper(paper, key):
    return format(paper[key], ".1f") if key in paper else "—"


def _notes(*paragraphs):
    return [textwrap.fill(text, 100) for text in paragraphs]


def format_table(rows):
    runtimes = [r for r in RUNTIMES if any(r in row["runtimes"] for row in rows)]
    header = (f"{'Model':<9} {'Params M':>8} {'paper':>5} | {'GMACs':>6} {'off.':>6} "
              f"{'fvcore':>6} {'paper':>5} | "
              + " ".join(f"{RUNTIME_NAMES[r]:>12}" for r in runtimes)
              + f" {RUNTIME_NAMES['official']:>12} | {'best/off.':>9}")
    lines = [header, "-" * len(header)]
    for row in rows:
        paper = row.get("paper", {})
        official = row["official"]
        ratio = "—" if row["ratio"] is None else \
            f"{row['ratio']:.2f}{'' if row['meets_goal'] else ' !'}"
        lines.append(
            f"{'SegNeXt-' + row['variant'].upper():<9} {row['params'] / 1e6:>8.2f} "
            f"{_paper(paper, 'params_m'):>5} | {_g(row['macs']):>6} "
            f"{_g(official.get('macs_flop_counter')):>6} {_g(official.get('macs_fvcore')):>6} "
            f"{_paper(paper, 'gflops'):>5} | "
            + " ".join(f"{_ms(row['runtimes'].get(r)):>12}" for r in runtimes)
            + f" {_ms(official):>12} | {ratio:>9}")
    lines.append("")
    size = rows[0]["size"] if rows else 512
    cells = [c for row in rows for c in [*row["runtimes"].values(), row["official"]]
             if "median_ms" in c]
    threads = sorted({c["threads"] for c in cells if "threads" in c})
    repeats = sorted({len(c["times_ms"]) for c in cells if "times_ms" in c})
    others = [c["others_cpu_pct"] for c in cells if c.get("others_cpu_pct") is not None]
    notes = [
        f"Latency: batch 1, {size}×{size} RGB 0–255 → logits at {size}×{size}, median ms of "
        f"{'/'.join(map(str, repeats)) or '—'} calls after warm-up, each cell in a fresh "
        f"process on {'/'.join(map(str, threads)) or '—'} thread(s) (TensorFlow: intra-op, "
        "1 inter-op; ONNX Runtime, LiteRT: num_threads; PyTorch: set_num_threads). "
        "Keras-TF: model.predict_on_batch (compiled tf.function; XLA: jit_compile=True); "
        "ONNX Runtime, LiteRT: kctx.export's float32 artifacts. Official PT: mmseg 1.2.2 "
        "encode_decode with the normalisation, eval, no_grad ('not run' without "
        "--official-python)."]
    if others:
        notes.append(f"Load: other processes used at most {max(others):.1f}% of the CPU "
                     "(all cores) while a cell was timed (median "
                     f"{statistics.median(others):.1f}%).")
    notes += [
        "Params: trainable (= PyTorch's parameters(); Keras' count_params() adds "
        "BatchNorm's moving statistics). GMACs: kctx's profiler on the traced graph (Conv2D, "
        "depthwise convs, MatMul/Einsum: the Hamburger's breads and NMF; no resizes, norms "
        "or element-wise ops). off.: the official model under FlopCounterMode (FLOPs / 2: "
        "convs incl. depthwise, bmm), the same op classes. fvcore: mmengine's fvcore rules "
        "on the official model, which add the norms and 4 per bilinear-upsampled element: "
        "the paper's convention. kctx applies the upper bread to the NMF's factors, "
        "(W·D)·C instead of W·(D·C), which saves d²·(n − r) MACs (n positions, d "
        "channels, r atoms), and reuses x·D₀ between the code initialisation and the first "
        "update: it counts fewer MACs than the "
        "official model for the same output.",
        f"best/off.: kctx's fastest runtime / official (goal ≤ {GOAL}; '!': missed)."]
    lines += _notes(*notes)
    return "\n".join(lines)


def format_layer_profile(rows):
    """Per variant, ms per call of each layer kind: Keras-TF and the official model."""
    lines = []
    for row in rows:
        profile = row.get("layer_profile")
        if not profile:
            continue
        keras_side = (profile.get("keras") or {}).get("layer_ms", {})
        official = (profile.get("official") or {}).get("layer_ms", {})
        header = (f"SegNeXt-{row['variant'].upper()} layer profile {'':<23} "
                  f"{'Keras-TF ms':>11} {'Official ms':>11} {'ratio':>6}")
        lines += ["", header, "-" * len(header)]
        kinds = [k for k in LAYER_KINDS if k in keras_side or k in official]
        for kind in kinds:
            ours, theirs = keras_side.get(kind), official.get(kind)
            ratio = f"{ours / theirs:.2f}" if ours and theirs and theirs > 0.05 else "—"
            lines.append(f"{kind:<49} {_num(ours):>11} {_num(theirs):>11} {ratio:>6}")
        ours_total = (profile.get("keras") or {}).get("call_ms")
        theirs_total = (profile.get("official") or {}).get("call_ms")
        ratio = f"{ours_total / theirs_total:.2f}" if ours_total and theirs_total else "—"
        lines.append(f"{'call (profiled)':<49} {_num(ours_total):>11} {_num(theirs_total):>11} "
                     f"{ratio:>6}")
    if lines:
        lines += [""] + _notes(
            "Layer profile: ms per call. Keras-TF: TensorFlow's profiler on predict_on_batch, "
            "each op given to the innermost layer whose name scope holds it (fused ops to "
            "the layer of their last op); 'outside the layers' is the rest of the call "
            "(executor, the logits' copy to NumPy). Official: forward hooks on every module "
            "(a container's own time is its element-wise / layout work); what no module "
            "runs is the final resize. Both profiled calls are slower than the timed ones.")
    return "\n".join(lines)


def _num(value):
    return "—" if value is None else f"{value:.1f}"


def main(args):
    started = time.time()
    load_start = os.getloadavg()
    rows = run_segnext(tuple(args.variants), tuple(args.runtimes), args.size,
                       args.num_classes, args.repeats, args.warmup, args.threads,
                       args.official_python, args.official_script, args.layer_profile,
                       args.timeout)
    official_versions = next((row["official"].get("versions") for row in rows
                              if row["official"].get("versions")), None)
    payload = {
        "benchmark": "segnext",
        "command": command_line(args),
        "argv": sys.argv[1:],
        "cpu": cpu_model(),
        "threads": args.threads,
        "size": args.size,
        "num_classes": args.num_classes,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "goal": GOAL,
        "versions": {"kctx": _versions(), "official": official_versions},
        "load": {"loadavg_start": [round(v, 2) for v in load_start],
                 "loadavg_end": [round(v, 2) for v in os.getloadavg()],
                 "wall_s": round(time.time() - started, 1)},
        "rows": rows,
    }
    table = format_table(rows)
    if args.layer_profile:
        table += "\n" + format_layer_profile(rows)
    report(payload, table, args.json)
    return payload


def add_arguments(parser):
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--runtimes", nargs="+", default=list(RUNTIMES), choices=RUNTIMES,
                        help="kctx runtimes: keras (TF), keras_xla (jit_compile=True), onnx "
                             "(ONNX Runtime), litert")
    parser.add_argument("--size", type=positive_int, default=512, help="height = width")
    parser.add_argument("--num-classes", type=positive_int, default=150)
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed calls per cell")
    parser.add_argument("--warmup", type=positive_int, default=2, help="untimed calls first")
    parser.add_argument("--threads", type=positive_int, default=2,
                        help="CPU threads of every runtime, the official model's included")
    parser.add_argument("--official-python",
                        help="a Python with torch + mmsegmentation: runs "
                             "tools/segnext_official_latency.py for the official column")
    parser.add_argument("--official-script", default=OFFICIAL_SCRIPT,
                        help="the script it runs (default: %(default)s)")
    parser.add_argument("--layer-profile", action="store_true",
                        help="also time each layer kind in Keras-TF and the official model")
    parser.add_argument("--timeout", type=positive_int, default=3600,
                        help="seconds before a measuring process is stopped")
    parser.add_argument("--json", type=output_path,
                        help="write the rows, the CPU, versions, threads and the command here")

