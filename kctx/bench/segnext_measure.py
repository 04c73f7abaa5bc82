"""SegNeXt measured inside one process: the tasks the benchmark runs in fresh
``python -m kctx.profile.worker`` processes (:func:`kctx.bench.segnext_run.run_task`).

* :func:`model_stats`: trainable parameters and the MACs of one image counted from the
  traced graph (:func:`kctx.profile.count_graph_macs`), and the ONNX / LiteRT artifacts
  exported (:func:`kctx.export.export_model`);
* :func:`keras_latency`: ``model.predict_on_batch`` on Keras-TF (XLA with
  ``jit_compile``);
* :func:`artifact_latency`: an exported artifact in ONNX Runtime or LiteRT.

Latencies come from :func:`time_calls`: the first call, then the median and minimum of
the timed calls after the warm-up, and the CPU share the other processes used meanwhile.
"""

import math
import os
import statistics
import time

import keras
import numpy as np

from kctx.bench.standalone import cpu_jiffies, other_load
from kctx.export import artifact_size, export_model, load_artifact
from kctx.models import segnext
from kctx.profile import count_graph_macs, count_params
from kctx.profile.macs import MAC_RULES

ARTIFACTS = {"onnx": "model.onnx", "litert": "model.tflite"}


def random_image(size, seed=0):
    """One uniform 0–255 RGB image, (1, size, size, 3) float32."""
    return np.random.default_rng(seed).uniform(0, 255, (1, size, size, 3)).astype("float32")


def time_calls(function, x, repeats, warmup):
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


def limit_tensorflow_threads(threads):
    """TensorFlow on ``threads`` intra-op threads and one inter-op thread."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def build_model(variant, size, num_classes, seed=0):
    """``segnext(variant)`` at ``size``² with random weights drawn from ``seed``."""
    keras.utils.set_random_seed(seed)
    return segnext(variant, num_classes=num_classes, input_shape=(size, size, 3))


def hamburger_macs(graph):
    """MACs of the counted ops under a Hamburger's name scope (its breads and NMF)
    in ``graph``'s top level."""
    return sum(MAC_RULES[op.type](op) for op in graph.get_operations()
               if op.type in MAC_RULES and "hamburger" in op.name)


def model_stats(variant, size=512, num_classes=150, export_dir=None, formats=()):
    """Parameters and MACs of ``segnext(variant)`` at ``size``; with ``export_dir``, the
    ``formats`` (``"onnx"``, ``"litert"``) exported there."""
    import tensorflow as tf

    model = build_model(variant, size, num_classes)
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
                  math.prod(map(int, shape)) for shape in resized.values()))}
    if export_dir:
        for format in formats:
            path = os.path.join(export_dir, ARTIFACTS[format])
            start = time.perf_counter()
            try:
                export_model(model, path, format=format)
            except Exception as error:  # noqa: BLE001 - that runtime's cell says so
                result[f"{format}_artifact"] = {"error": f"export: {short_error(error)}"}
                continue
            result[f"{format}_artifact"] = {"path": path, "bytes": artifact_size(path),
                                            "export_s": round(time.perf_counter() - start, 1)}
    return result


def keras_latency(variant, size=512, num_classes=150, jit_compile=False, repeats=5, warmup=2,
                  threads=2):
    """Latency of ``model.predict_on_batch`` (compiled ``tf.function``, XLA with
    ``jit_compile``) on ``threads`` intra-op threads."""
    limit_tensorflow_threads(threads)
    model = build_model(variant, size, num_classes)
    model.compile(jit_compile=jit_compile)
    result = time_calls(model.predict_on_batch, random_image(size), repeats, warmup)
    return {**result, "threads": threads, "jit_compile": bool(jit_compile)}


def artifact_latency(path, format, size=512, repeats=5, warmup=2, threads=2):
    """Latency of an exported artifact in its runtime (``num_threads=threads``)."""
    function = load_artifact(path, "onnx" if format == "onnx" else "litert",
                             num_threads=threads)
    return {**time_calls(function, random_image(size), repeats, warmup), "threads": threads}


def short_error(error):
    """The last line of an error's message (or its type), at most 300 characters: what a
    failed cell of the table says."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(error).__name__)[:300]
