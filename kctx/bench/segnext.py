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

The benchmark's parts: :mod:`kctx.bench.segnext_measure` (what one fresh process
measures), :mod:`kctx.bench.segnext_layer_profile` (the layer kinds' times),
:mod:`kctx.bench.segnext_run` (the protocol: processes, the official model, the rows),
:mod:`kctx.bench.segnext_report` (the tables); this module is the command line.
"""

import os
import shlex
import sys
import time

from kctx.arguments import output_path, positive_int
from kctx.bench import report
from kctx.bench.segnext_layer_profile import LAYER_KINDS, keras_layer_kind, keras_layer_profile
from kctx.bench.segnext_measure import (
    ARTIFACTS,
    artifact_latency,
    hamburger_macs,
    keras_latency,
    model_stats,
)
from kctx.bench.segnext_report import format_layer_profile, format_table
from kctx.bench.segnext_run import (
    GOAL,
    OFFICIAL_MARKER,
    OFFICIAL_SCRIPT,
    PAPER,
    RUNTIME_NAMES,
    RUNTIMES,
    VARIANTS,
    official_latency,
    run_segnext,
    run_task,
)
from kctx.bench.standalone import cpu_model, package_versions

__all__ = [
    "ARTIFACTS", "GOAL", "LAYER_KINDS", "OFFICIAL_MARKER", "OFFICIAL_SCRIPT", "PAPER",
    "RUNTIMES", "RUNTIME_NAMES", "VARIANTS", "add_arguments", "artifact_latency",
    "command_line", "format_layer_profile", "format_table", "hamburger_macs",
    "keras_latency", "keras_layer_kind", "keras_layer_profile", "main", "model_stats",
    "official_latency", "run_segnext", "run_task",
]


def _versions():
    """The versions of kctx's side of the table."""
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
