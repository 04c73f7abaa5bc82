"""Inference latency of one model in one runtime: Keras (TensorFlow, XLA, JAX), ONNX
Runtime, LiteRT (float32, int8). Each measurement runs in a fresh process."""

import importlib
import os
import tempfile

import keras
import numpy as np

from kctx.profile.layer_profile import layer_from_spec, measure_latency, run_worker

RUNTIMES = ("keras_tf", "keras_xla", "keras_jax", "onnxruntime", "litert", "litert_int8")
RUNTIME_NAMES = {"keras_tf": "Keras-TF", "keras_xla": "Keras-TF XLA", "keras_jax": "Keras-JAX jit",
                 "onnxruntime": "ONNX Runtime", "litert": "LiteRT fp32",
                 "litert_int8": "LiteRT int8"}


def model_from_spec(spec):
    """A functional model from ``{"builder": "module:function", "kwargs": {...}}`` (e.g.
    ``"kctx.models:kanet"``, or a workflow's model builder, imported by name) or from
    ``{"block": name, "kwargs": {...}, "input_shape": [...]}`` (Input → the block)."""
    if "block" in spec:
        inputs = keras.Input(tuple(spec["input_shape"]))
        return keras.Model(inputs, layer_from_spec(spec)(inputs))
    module, function = spec["builder"].split(":")
    return getattr(importlib.import_module(module), function)(**spec.get("kwargs", {}))


def runtime_latency(spec, runtime, batch, repeats=10, warmup=3, threads=None, isolate=True):
    """Median and minimum latency (ms) of one inference call on a ``batch`` of inputs.

    Args:
        spec: the model (:func:`model_from_spec`); random weights (latency does not
            depend on their values) and uniform [0, 1) inputs.
        runtime: one of :data:`RUNTIMES`: ``model.predict_on_batch`` compiled with
            ``jit_compile=False`` (``keras_tf``) or ``True`` (``keras_xla``; on the JAX
            backend, ``keras_jax``, ``jax.jit``); or the model exported with
            :func:`kctx.export.export_model` and run in ONNX Runtime or the LiteRT
            interpreter (``litert_int8``: full-int8, calibrated on 8 random inputs).
        batch: batch size.
        repeats: timed calls.
        warmup: untimed calls before them.
        threads: ONNX Runtime / LiteRT threads (default: every core, as TensorFlow).
        isolate: run in a fresh process (on the JAX backend for ``keras_jax``).
    """
    if runtime not in RUNTIMES:
        raise ValueError(f"`runtime` must be one of {RUNTIMES}. Received: runtime={runtime!r}")
    if isolate:
        return run_worker("runtime", {"spec": spec, "runtime": runtime, "batch": batch,
                                      "repeats": repeats, "warmup": warmup, "threads": threads},
                          backend="jax" if runtime == "keras_jax" else "tensorflow")
    model = model_from_spec(spec)
    rng = np.random.default_rng(0)
    shape = tuple(model.input_shape[1:])
    x = rng.random((batch, *shape)).astype("float32")
    with tempfile.TemporaryDirectory() as folder:
        if runtime.startswith("keras"):
            model.compile(jit_compile=runtime != "keras_tf")
            function = model.predict_on_batch
            size = None
        else:
            from kctx.export import artifact_size, export_model, load_artifact

            format = "onnx" if runtime == "onnxruntime" else "litert"
            path = os.path.join(folder, "model.onnx" if format == "onnx" else "model.tflite")
            calibration = [rng.random((1, *shape)).astype("float32") for _ in range(8)]
            export_model(model, path, format=format,
                         quantize="int8" if runtime == "litert_int8" else "none",
                         representative_data=calibration)
            size = artifact_size(path)
            function = load_artifact(path, format, num_threads=threads or os.cpu_count())
        median, minimum = measure_latency(function, x, repeats=repeats, warmup=warmup)
    return {"median_ms": round(median, 3), "min_ms": round(minimum, 3), "artifact_bytes": size,
            "threads": threads or os.cpu_count()}
