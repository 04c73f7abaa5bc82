"""Inference latency of one model in one runtime: Keras (TensorFlow, XLA, JAX, PyTorch),
:func:`kctx.export.inference_function` (JAX, ``torch.export``, ``torch.compile``), ONNX
Runtime, LiteRT (float32, int8). Each measurement runs in a fresh process."""

import importlib
import os
import tempfile
import time

import keras
import numpy as np

from kctx.profile.layer_profile import layer_from_spec, measure_latency, run_worker

RUNTIMES = ("keras_tf", "keras_xla", "keras_jax", "jax_inference", "keras_torch",
            "torch_export", "torch_compile", "onnxruntime", "litert", "litert_int8")
RUNTIME_NAMES = {"keras_tf": "Keras-TF", "keras_xla": "Keras-TF XLA", "keras_jax": "Keras-JAX jit",
                 "jax_inference": "JAX constants", "keras_torch": "Keras-PyTorch",
                 "torch_export": "torch.export", "torch_compile": "torch.compile",
                 "onnxruntime": "ONNX Runtime", "litert": "LiteRT fp32",
                 "litert_int8": "LiteRT int8"}
# The Keras backend each runtime runs on (TensorFlow for the others).
RUNTIME_BACKENDS = {"keras_jax": "jax", "jax_inference": "jax", "keras_torch": "torch",
                    "torch_export": "torch", "torch_compile": "torch"}
# The runtimes that run kctx.export.inference_function(model, compile=...).
INFERENCE_FUNCTIONS = {"jax_inference": True, "torch_export": False, "torch_compile": True}


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
            backend, ``keras_jax``, ``jax.jit``), on PyTorch eager (``keras_torch``);
            :func:`kctx.export.inference_function` on JAX (``jax_inference``: the weights
            as the program's constants) or PyTorch (``torch_export``: the exported
            program, ``torch_compile``: compiled by Inductor), its outputs read back to
            NumPy as ``predict_on_batch``'s; or the model exported with
            :func:`kctx.export.export_model` and run in ONNX Runtime or the LiteRT
            interpreter (``litert_int8``: full-int8, calibrated on 8 random inputs).
        batch: batch size.
        repeats: timed calls.
        warmup: untimed calls before them, after the first call (timed apart as
            ``first_call_ms``: tracing, exporting and compiling where the runtime does).
        threads: ONNX Runtime / LiteRT threads (default: every core, as TensorFlow).
        isolate: run in a fresh process, on the runtime's backend
            (:data:`RUNTIME_BACKENDS`); ``False``: in this process, whose backend must be
            the runtime's.
    """
    if runtime not in RUNTIMES:
        raise ValueError(f"`runtime` must be one of {RUNTIMES}. Received: runtime={runtime!r}")
    backend = RUNTIME_BACKENDS.get(runtime, "tensorflow")
    if isolate:
        return run_worker("runtime", {"spec": spec, "runtime": runtime, "batch": batch,
                                      "repeats": repeats, "warmup": warmup, "threads": threads},
                          backend=backend)
    if keras.backend.backend() != backend:
        raise ValueError(f"The {runtime} runtime runs on KERAS_BACKEND={backend!r}; this "
                         f"process has {keras.backend.backend()!r}: use isolate=True. "
                         f"Received: runtime={runtime!r}, isolate=False")
    model = model_from_spec(spec)
    rng = np.random.default_rng(0)
    shape = tuple(model.input_shape[1:])
    x = rng.random((batch, *shape)).astype("float32")
    with tempfile.TemporaryDirectory() as folder:
        size = None
        if runtime in INFERENCE_FUNCTIONS:
            from kctx.export import inference_function

            infer = inference_function(model, compile=INFERENCE_FUNCTIONS[runtime])

            def function(x):
                return keras.tree.map_structure(keras.ops.convert_to_numpy, infer(x))
        elif runtime.startswith("keras"):
            model.compile(jit_compile=runtime not in ("keras_tf", "keras_torch"))
            function = model.predict_on_batch
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
        start = time.perf_counter()
        function(x)
        first_call_ms = (time.perf_counter() - start) * 1e3
        median, minimum = measure_latency(function, x, repeats=repeats, warmup=warmup)
    return {"median_ms": round(median, 3), "min_ms": round(minimum, 3), "artifact_bytes": size,
            "first_call_ms": round(first_call_ms, 3), "threads": threads or os.cpu_count()}
