"""The SegNeXt benchmark's protocol: what runs where, and the rows it gives.

Per variant, each measurement runs in a fresh ``python -m kctx.profile.worker`` process
(:func:`run_task`, :func:`kctx.profile.layer_profile.run_worker`), so that no two
runtimes share caches or thread pools: the parameters, MACs and exported artifacts
first, then the latency of each kctx runtime (:data:`RUNTIMES`), then, with
``--official-python``, the official PyTorch model in that interpreter
(:func:`official_latency`, ``tools/segnext_official_latency.py``), and last, with
``--layer-profile``, the time of each layer kind. :func:`run_segnext` gathers them into
one row per variant, with kctx's fastest runtime over the official time (goal: at most
:data:`GOAL`).
"""

import json
import os
import subprocess
import tempfile

from kctx.bench.segnext_layer_profile import keras_layer_profile
from kctx.bench.segnext_measure import (
    ARTIFACTS,
    artifact_latency,
    keras_latency,
    model_stats,
    short_error,
)
from kctx.profile.layer_profile import run_worker

VARIANTS = ("t", "s", "b", "l")
RUNTIMES = ("keras", "keras_xla", "onnx", "litert")
RUNTIME_NAMES = {"keras": "Keras-TF", "keras_xla": "Keras-TF XLA", "onnx": "ONNX Runtime",
                 "litert": "LiteRT", "official": "Official PT"}
# The paper (Tab. 1 / Tab. 2, ADE20K, 512×512): parameters (M) and GFLOPs — MACs as
# fvcore counts them (convolutions, matmuls, normalisations, bilinear upsampling).
PAPER = {"t": (4.3, 6.6), "s": (13.9, 15.9), "b": (27.6, 34.9), "l": (48.9, 70.0)}
GOAL = 0.7  # kctx's fastest runtime at most 0.7× the official model on the same CPU
OFFICIAL_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tools", "segnext_official_latency.py")
OFFICIAL_MARKER = "SEGNEXT_OFFICIAL_RESULT "
NOT_RUN = "not run"  # the official cell without --official-python

_TASKS = {"stats": model_stats, "keras": keras_latency, "artifact": artifact_latency,
          "layer_profile": keras_layer_profile}


def run_task(task, request, timeout=None):
    """Run a measuring task (``_TASKS``) in a fresh process on Keras-TF."""
    function = _TASKS[task]
    return run_worker(f"{function.__module__}:{function.__name__}", request, timeout)


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
        stats, cells = _kctx_measurements(variant, runtimes, size, num_classes, repeats,
                                          warmup, threads, timeout, log)
        row.update(stats)
        row["runtimes"] = cells
        row["official"] = {"status": NOT_RUN}
        if official_python:
            row["official"] = _official_cell(official_python, variant, size, num_classes,
                                             repeats, warmup, threads, official_script,
                                             layer_profile, timeout, log)
        if layer_profile:
            row["layer_profile"] = {"official": row["official"].pop("layer_profile", None)}
            try:
                row["layer_profile"]["keras"] = run_task(
                    "layer_profile", {"variant": variant, "size": size,
                                      "num_classes": num_classes, "threads": threads}, timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                row["layer_profile"]["keras"] = {"error": short_error(error)}
        row.update(_against_official(cells, row["official"]))
        rows.append(row)
    return rows


def _kctx_measurements(variant, runtimes, size, num_classes, repeats, warmup, threads,
                       timeout, log):
    """``(stats, cells)``: :func:`model_stats` of ``variant`` (its artifacts exported to a
    temporary folder) and each runtime's latency cell (``{"error": ...}`` where it
    failed)."""
    formats = [r for r in runtimes if r in ARTIFACTS]
    with tempfile.TemporaryDirectory(prefix=f"kctx-segnext-{variant}-") as folder:
        stats = run_task("stats", {"variant": variant, "size": size,
                                   "num_classes": num_classes,
                                   "export_dir": folder if formats else None,
                                   "formats": formats}, timeout)
        artifacts = {f: stats.pop(f"{f}_artifact") for f in formats}
        log(f"SegNeXt-{variant.upper()}: {stats['params']:,} params, "
            f"{stats['macs'] / 1e9:.2f} GMACs")
        cells = {}
        for runtime in runtimes:
            name = f"SegNeXt-{variant.upper()}, {RUNTIME_NAMES[runtime]}"
            try:
                cell = _runtime_cell(runtime, variant, artifacts, size, num_classes, repeats,
                                     warmup, threads, timeout)
                log(f"{name}: {cell['median_ms']:.1f} ms (others used "
                    f"{cell['others_cpu_pct']}% of the CPU)")
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                cell = {"error": short_error(error)}
                log(f"{name}: failed: {cell['error']}")
            cells[runtime] = cell
    return stats, cells


def _runtime_cell(runtime, variant, artifacts, size, num_classes, repeats, warmup, threads,
                  timeout):
    """The latency of one kctx runtime, in a fresh process (an artifact whose export
    failed raises that error)."""
    if runtime not in ARTIFACTS:
        return run_task("keras", {"variant": variant, "size": size, "num_classes": num_classes,
                                  "jit_compile": runtime == "keras_xla", "repeats": repeats,
                                  "warmup": warmup, "threads": threads}, timeout)
    artifact = artifacts[runtime]
    if "error" in artifact:
        raise RuntimeError(artifact["error"])
    cell = run_task("artifact", {"path": artifact["path"], "format": runtime, "size": size,
                                 "repeats": repeats, "warmup": warmup, "threads": threads},
                    timeout)
    cell["artifact_bytes"] = artifact["bytes"]
    cell["export_s"] = artifact["export_s"]
    return cell


def _official_cell(python, variant, size, num_classes, repeats, warmup, threads, script,
                   layer_profile, timeout, log):
    """:func:`official_latency`, or ``{"error": ...}`` where it failed."""
    try:
        cell = official_latency(python, variant, size, num_classes, repeats, warmup, threads,
                                script, layer_profile, timeout)
        log(f"SegNeXt-{variant.upper()}, official PyTorch: {cell['median_ms']:.1f} ms")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        cell = {"error": short_error(error)}
        log(f"SegNeXt-{variant.upper()}, official PyTorch: failed: {cell['error']}")
    return cell


def _against_official(cells, official):
    """The fastest kctx runtime, its time, its ratio to the official time and whether
    that meets :data:`GOAL` (None where a side has no time)."""
    timed = {r: c["median_ms"] for r, c in cells.items() if "median_ms" in c}
    best = min(timed, key=timed.get) if timed else None
    best_ms = timed[best] if timed else None
    official_ms = official.get("median_ms")
    ratio = round(best_ms / official_ms, 3) if timed and official_ms else None
    return {"best_runtime": best, "best_ms": best_ms, "ratio": ratio, "goal": GOAL,
            "meets_goal": None if ratio is None else ratio <= GOAL}
