"""Parameters, MACs, latency and peak memory of a layer at an input shape.

Latency is the median over repeats of one inference call (``training=False``)
and of one training step (forward with ``training=True`` plus the gradients
with respect to the input and every trainable weight), on the backend asked for:
each a traced ``tf.function`` on TensorFlow, a ``jax.jit`` program on JAX, the
eager call and ``torch.autograd.grad`` on PyTorch. On TensorFlow, peak memory is read
from its CPU allocator (``tf.config.experimental.get_memory_info``, the CPU analogue of PyTorch's
``max_memory_allocated`` that the papers report on GPU): the peak bytes held
by tensors during one call, inputs and weights included (the oneDNN CPU
allocator keeps no statistics for tensors under 256 KiB, so for tiny layers
this is a lower bound; at benchmark sizes those are noise). Each profile runs in
a fresh Python process (``isolate=True``) so that allocator pools, caches and
other layers cannot leak into the numbers. TensorFlow's default CPU allocator
keeps statistics only where oneDNN is on (CPUs with AVX-512 VNNI and later), so
the fresh process runs with the caching allocator, ``TF_CPU_ALLOCATOR_USE_BFC=true``,
which keeps them on any CPU (unless the environment sets it). Where the
allocator has no stats (in process, without that variable), the growth of the
process's peak resident set is used instead, after the C library has handed its
freed memory back to the system. On JAX and PyTorch it is the CUDA allocator's peak
(PyTorch) or the device's (JAX) where the device keeps one, else that resident set's growth.
"""

import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import time

import keras
import numpy as np

_RESULT_MARKER = "KCTX_PROFILE_RESULT "


def _tf():
    import tensorflow as tf

    return tf


def layer_from_spec(spec):
    """A layer from a ``Layer``, a ``{"block": name, "kwargs": {...}}`` dict or a
    serialized Keras object (``keras.saving.serialize_keras_object``)."""
    if isinstance(spec, keras.layers.Layer):
        return spec
    if isinstance(spec, dict) and "block" in spec:
        from kctx.layers import context_block

        return context_block(spec["block"], **spec.get("kwargs", {}))
    return keras.saving.deserialize_keras_object(spec)


def count_params(layer):
    """``(trainable, non_trainable)`` scalar counts of a built layer."""
    trainable = sum(int(np.prod(w.shape)) for w in layer.trainable_weights)
    non_trainable = sum(
        int(np.prod(w.shape))
        for w in layer.non_trainable_weights
        if "seed_generator" not in w.path
    )
    return trainable, non_trainable


def inference_function(layer, jit_compile=False):
    tf = _tf()
    return tf.function(lambda x: layer(x, training=False), jit_compile=jit_compile)


def train_step_function(layer, jit_compile=False):
    """Forward (training=True) and gradients w.r.t. the input and the weights,
    for the loss ⟨y, g⟩ with a fixed random cotangent g; returns the loss and the
    gradients, as a training step computes both (without the loss, a forward product whose
    output only the loss reads would be pruned from the graph, and from its count)."""
    tf = _tf()

    def step(x, cotangent):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * cotangent)
        return loss, tape.gradient(loss, [x] + list(layer.trainable_variables))

    return tf.function(step, jit_compile=jit_compile)


def _status_mb(key):
    with open("/proc/self/status") as f:
        match = re.search(rf"{key}:\s+(\d+)", f.read())
    return int(match.group(1)) / 1024.0


def _trim_c_heap():
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def measure_peak_memory(function, *args):
    """Peak MB held while ``function(*args)`` runs (already traced and warmed up).

    Returns ``(megabytes, source)`` with source ``"allocator"`` (TensorFlow CPU
    allocator peak) or ``"rss"`` (growth of the peak resident set, used where the
    allocator keeps no statistics or saw none of the call's tensors).
    """
    tf = _tf()
    try:
        tf.config.experimental.reset_memory_stats("CPU:0")
        function(*args)
        peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
        if peak > 0:
            return peak / 2**20, "allocator"
        # Every tensor of the call went to the allocator's untracked small-size
        # pool (or the inputs alias NumPy memory): fall through to the RSS.
    except ValueError:
        pass
    return _resident_set_growth(function, *args)


def _resident_set_growth(function, *args):
    """``(MB, "rss")``: the growth of the peak resident set during ``function(*args)``."""
    # Warm-up calls freed their tensors to the C library, which keeps the pages:
    # hand them back, or this call reuses them and the resident set never grows.
    _trim_c_heap()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    before = _status_mb("VmRSS")
    function(*args)
    return _status_mb("VmHWM") - before, "rss"


def measure_latency(function, *args, repeats=10, warmup=2):
    """Median and minimum wall time (ms) of ``function(*args)`` over ``repeats``."""
    for _ in range(warmup):
        function(*args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function(*args)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), min(times)


def _device_peak_memory(function, *args):
    """Peak MB of ``function(*args)`` on JAX or PyTorch (already compiled and warmed up):
    PyTorch's CUDA allocator's peak over the call, JAX's device peak since the process
    started (an accelerator's ``peak_bytes_in_use``), else the resident set's growth."""
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        if any(getattr(arg, "is_cuda", False) for arg in args):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            function(*args)
            return torch.cuda.max_memory_allocated() / 2**20, "cuda_allocator"
    elif backend == "jax":
        import jax

        device = jax.devices()[0]
        stats = device.memory_stats() if device.platform != "cpu" else None
        if stats and "peak_bytes_in_use" in stats:
            function(*args)
            return jax.device_get(device.memory_stats()["peak_bytes_in_use"]) / 2**20, \
                "device_peak_since_start"
    return _resident_set_growth(function, *args)


def _backend_functions(layer, jit_compile):
    """``(infer(x), step(x, cotangent), the step to count MACs of)`` on JAX or PyTorch, each
    returning when the device has finished: on JAX both ``jax.jit`` programs of the
    layer's ``stateless_call`` (the step: ``jax.grad`` of ⟨y, g⟩ with respect to the weights
    and the input, with the loss: ``jax.value_and_grad``); on PyTorch the eager call under
    ``torch.no_grad()`` and ``torch.autograd.grad`` of the same loss."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]
        # stateless_call gives its keywords to call() as they are (__call__ drops a
        # `training` that call() does not take).
        takes_training = getattr(layer, "_call_has_training_arg", True)

        def call(weights, x, training):
            options = {"training": training} if takes_training else {}
            return layer.stateless_call(weights, non_trainable, x, **options)[0]

        def forward(weights, x, cotangent):
            return jnp.sum(call(weights, x, True).astype("float32") * cotangent)

        gradient = jax.value_and_grad(forward, argnums=(0, 1))
        infer_program = jax.jit(lambda weights, x: call(weights, x, False))
        step_program = jax.jit(gradient)

        def infer(x):
            return jax.block_until_ready(infer_program(trainable, x))

        def step(x, cotangent):
            return jax.block_until_ready(step_program(trainable, x, cotangent))

        return infer, step, lambda x, cotangent: gradient(trainable, x, cotangent)
    import torch

    if jit_compile:
        raise ValueError("`jit_compile=True` on PyTorch would be torch.compile, which the "
                         "profiler does not measure: profile the eager layer, or time "
                         "kctx.export.inference_function. Received: jit_compile=True")
    weights = [v.value for v in layer.trainable_variables]

    def synchronized(result):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return result

    def infer(x):
        with torch.no_grad():
            return synchronized(layer(x, training=False))

    def loss(x, cotangent):
        return torch.sum(layer(x, training=True).float() * cotangent)

    def step(x, cotangent):
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            value = loss(x, cotangent)
            return synchronized((value, torch.autograd.grad(value, [x, *weights],
                                                            allow_unused=True)))

    def counted_step(x, cotangent):
        # The same products through backward(): FlopCounterMode's module hooks refuse
        # autograd.grad; the gradients it leaves in .grad are dropped.
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            loss(x, cotangent).backward(inputs=[x, *weights])
        for weight in weights:
            weight.grad = None

    return infer, step, counted_step


def _torch_step_macs(step, x, cotangent):
    """MACs of a PyTorch training step (forward and backward) as ``count_torch_macs``
    counts a forward's (which it runs without gradients), its ``TapDepthwiseConv2D``
    layers run as their convolution as ``count_macs`` traces them."""
    from kctx.layers.depthwise import as_convolutions
    from kctx.profile.macs import _torch_flop_counter

    with _torch_flop_counter() as counter, as_convolutions():
        step(x, cotangent)
    return counter.get_total_flops() // 2


def _profile_on_backend(layer, x, rng, input_shape, modes, repeats, train_repeats, warmup,
                        jit_compile, result):
    """:func:`_profile_here`'s measures on JAX or PyTorch."""
    from kctx.profile.macs import count_macs

    backend = keras.backend.backend()
    infer, step, counted_step = _backend_functions(layer, jit_compile)
    result["jit_compile"] = backend == "jax"  # JAX runs XLA programs
    if "infer" in modes:
        result["macs"] = count_macs(lambda t: layer(t, training=False), input_shape)
        infer(x)
        result["infer_mem_mb"], result["memory_source"] = _device_peak_memory(infer, x)
        result["infer_ms"], result["infer_ms_min"] = measure_latency(
            infer, x, repeats=repeats, warmup=warmup)
    if "train" in modes:
        out_shape = tuple(layer.compute_output_shape(input_shape))
        cotangent = keras.ops.convert_to_tensor(
            rng.standard_normal(out_shape).astype("float32"))
        if backend == "jax":
            result["train_macs"] = count_macs(counted_step, input_shape, out_shape)
        else:
            result["train_macs"] = _torch_step_macs(counted_step, x, cotangent)
        step(x, cotangent)
        result["train_mem_mb"], result["memory_source"] = _device_peak_memory(step, x,
                                                                              cotangent)
        result["train_ms"], result["train_ms_min"] = measure_latency(
            step, x, cotangent, repeats=train_repeats or repeats, warmup=warmup)
    return result


def _profile_here(spec, input_shape, modes, repeats, train_repeats, warmup, jit_compile, seed):
    from kctx.profile.macs import count_macs

    keras.utils.set_random_seed(seed)
    layer = layer_from_spec(spec)
    input_shape = tuple(int(d) for d in input_shape)
    layer.build(input_shape)
    rng = np.random.default_rng(seed)
    trainable, non_trainable = count_params(layer)
    result = {
        "layer": type(layer).__name__,
        "backend": keras.backend.backend(),
        "input_shape": list(input_shape),
        "params": trainable,
        "non_trainable_params": non_trainable,
        "jit_compile": bool(jit_compile),
    }
    if keras.backend.backend() != "tensorflow":
        x = keras.ops.convert_to_tensor(rng.standard_normal(input_shape).astype("float32"))
        return _profile_on_backend(layer, x, rng, input_shape, modes, repeats, train_repeats,
                                   warmup, jit_compile, result)
    tf = _tf()
    x = tf.constant(rng.standard_normal(input_shape).astype("float32"))
    if "infer" in modes:
        result["macs"] = count_macs(lambda t: layer(t, training=False), input_shape)
        infer = inference_function(layer, jit_compile)
        infer(x)
        result["infer_mem_mb"], result["memory_source"] = measure_peak_memory(infer, x)
        result["infer_ms"], result["infer_ms_min"] = measure_latency(
            infer, x, repeats=repeats, warmup=warmup
        )
    if "train" in modes:
        out_shape = tuple(layer.compute_output_shape(input_shape))
        cotangent = tf.constant(rng.standard_normal(out_shape).astype("float32"))
        step = train_step_function(layer, jit_compile)
        step_spec = (tf.TensorSpec(input_shape), tf.TensorSpec(out_shape))
        from kctx.layers.depthwise import TapDepthwiseConv2D, as_convolutions
        from kctx.profile.macs import count_graph_macs

        if any(isinstance(inner, TapDepthwiseConv2D) for inner in layer._flatten_layers()):
            with as_convolutions():  # counted as their convolutions, timed as they run
                graph = train_step_function(layer, jit_compile).get_concrete_function(
                    *step_spec).graph
        else:
            graph = step.get_concrete_function(*step_spec).graph
        result["train_macs"] = count_graph_macs(graph)
        step(x, cotangent)
        result["train_mem_mb"], result["memory_source"] = measure_peak_memory(step, x, cotangent)
        result["train_ms"], result["train_ms_min"] = measure_latency(
            step, x, cotangent, repeats=train_repeats or repeats, warmup=warmup
        )
    return result


def _spec_for_worker(spec):
    if isinstance(spec, keras.layers.Layer):
        return {"serialized": keras.saving.serialize_keras_object(spec),
                "module": type(spec).__module__}
    return {"serialized": spec, "module": None}


def profile_layer(
    layer,
    input_shape,
    modes=("infer", "train"),
    repeats=10,
    train_repeats=None,
    warmup=2,
    jit_compile=False,
    isolate=True,
    seed=0,
    timeout=None,
    backend=None,
):
    """Profile a layer at ``input_shape`` (batch included), on a Keras backend.

    Args:
        layer: a ``keras.layers.Layer`` (unbuilt or built: its config is used),
            or a ``{"block": name, "kwargs": {...}}`` context-block spec.
        input_shape: full static input shape, e.g. ``(1, 128, 128, 512)``.
        modes: any of ``"infer"`` and ``"train"``.
        repeats: timed repeats of an inference call (median reported).
        train_repeats: timed repeats of a training step (default ``repeats``).
        warmup: untimed calls after tracing.
        jit_compile: compile the functions with XLA.
        isolate: run in a fresh Python process (needed for a peak memory that
            is not polluted by earlier work; the layer must be serializable
            and its class importable).
        seed: seed of weights and inputs.
        timeout: seconds before the isolated process is killed.
        backend: ``"tensorflow"``, ``"jax"`` or ``"torch"``: the backend measured (default
            this process's; another needs ``isolate=True``). TensorFlow: ``tf.function``
            (XLA with ``jit_compile``), its CPU allocator's peak memory. JAX: ``jax.jit``
            programs of the layer's ``stateless_call``, always XLA, the step ``jax.grad``.
            PyTorch: the eager call and ``torch.autograd.grad`` (``jit_compile`` refused),
            the CUDA allocator's peak on a GPU. Elsewhere the memory is the resident set's
            growth (``memory_source``); each call returns when the device has finished.

    Returns:
        A dict with ``backend``, ``params``, ``non_trainable_params``, ``macs``,
        ``train_macs``, ``infer_ms``, ``train_ms`` (medians), ``*_ms_min``,
        ``infer_mem_mb``, ``train_mem_mb`` and ``memory_source``.

    Example:
        >>> from kctx.layers import Hamburger
        >>> result = profile_layer(Hamburger(rank=4, steps=3), (1, 8, 8, 32), repeats=1,
        ...                        warmup=1, isolate=False)
        >>> result["macs"]  # Table 3's count at N = 64, C = d = 32, r = 4, K = 3
        145920
        >>> result["train_macs"] > result["macs"] and result["infer_ms"] > 0
        True
    """
    modes = tuple(modes)
    unknown = set(modes) - {"infer", "train"}
    if unknown:
        raise ValueError(f"`modes` must be among ('infer', 'train'). Received: modes={modes!r}")
    here = keras.backend.backend()
    backend = here if backend is None else backend
    if backend not in ("tensorflow", "jax", "torch"):
        raise ValueError(f"`backend` must be 'tensorflow', 'jax' or 'torch'. "
                         f"Received: backend={backend!r}")
    if not isolate and backend != here:
        raise ValueError(f"Profiling on {backend} in this {here} process: Keras picks its "
                         f"backend at import, so use isolate=True (a fresh {backend} process). "
                         f"Received: backend={backend!r}, isolate=False")
    if not isolate:
        spec = layer if not isinstance(layer, keras.layers.Layer) else layer.__class__.from_config(
            layer.get_config()
        )
        return _profile_here(spec, input_shape, modes, repeats, train_repeats, warmup,
                             jit_compile, seed)
    request = {
        "spec": _spec_for_worker(layer),
        "input_shape": list(input_shape),
        "modes": list(modes),
        "repeats": repeats,
        "train_repeats": train_repeats,
        "warmup": warmup,
        "jit_compile": jit_compile,
        "seed": seed,
    }
    # The caching allocator keeps the statistics the peak is read from on any CPU.
    return run_worker("profile", request, timeout=timeout, backend=backend,
                      defaults={"TF_CPU_ALLOCATOR_USE_BFC": "true"})


def matmul_peak_gflops(sizes=(1024, 2048, 4096), repeats=5, isolate=True):
    """Measured fp32 matmul throughput: the best median GFLOP/s over square sizes."""
    if isolate:
        return run_worker("matmul_peak", {"sizes": list(sizes), "repeats": repeats})
    tf = _tf()
    best = 0.0
    per_size = {}
    for n in sizes:
        a = tf.random.normal((n, n))
        b = tf.random.normal((n, n))
        matmul = tf.function(lambda a, b: tf.matmul(a, b))
        median_ms, _ = measure_latency(matmul, a, b, repeats=repeats, warmup=2)
        gflops = 2 * n**3 / (median_ms * 1e-3) / 1e9
        per_size[str(n)] = gflops
        best = max(best, gflops)
    return {"peak_gflops": best, "per_size_gflops": per_size}


def memory_kept_per_model(block, models=60, shape=(8, 16, 16, 32), clear_session=False,
                          first=10, isolate=True):
    """Resident memory a process keeps per model it builds and fits (MB).

    Builds ``models`` functional models one after another (a 1×1 convolution, then
    ``context_block(block)``; ``block="conv"`` for none), compiles each with Adam, fits
    it one step on ``shape`` and deletes it (then ``keras.backend.clear_session()`` if
    asked). Returns the RSS after model ``first`` and after the last, and their
    difference per model. ``isolate`` runs it in a fresh process.
    """
    if models <= first:
        raise ValueError(f"`models` must be more than {first}. Received: models={models}")
    if isolate:
        return run_worker("retention", {"block": block, "models": models, "shape": list(shape),
                                        "clear_session": clear_session, "first": first})
    import gc

    x = np.random.default_rng(0).uniform(size=shape).astype("float32")
    readings = {}
    for index in range(models):
        inputs = keras.Input(tuple(shape[1:]))
        hidden = keras.layers.Conv2D(shape[-1], 1)(inputs)
        if block != "conv":
            hidden = layer_from_spec({"block": block})(hidden)
        model = keras.Model(inputs, hidden)
        model.compile(optimizer="adam", loss="mse")
        model.fit(x, x, epochs=1, batch_size=shape[0], verbose=0)
        del model
        if clear_session:
            keras.backend.clear_session()
        gc.collect()
        if index + 1 in (first, models):
            readings[index + 1] = _status_mb("VmRSS")
    return {"rss_mb_after_first": round(readings[first], 1),
            "rss_mb_after_last": round(readings[models], 1),
            "kept_mb_per_model": round((readings[models] - readings[first]) / (models - first), 2)}


def run_worker(task, request, timeout=None, backend="tensorflow", defaults=None):
    """Run ``task`` in a fresh ``python -m kctx.profile.worker`` process on ``backend``,
    with the environment variables ``defaults`` where the environment does not set them."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for key, value in (defaults or {}).items():
        env.setdefault(key, value)
    env["KERAS_BACKEND"] = backend
    completed = subprocess.run(
        [sys.executable, "-m", "kctx.profile.worker", task],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    for line in completed.stdout.splitlines():
        if line.startswith(_RESULT_MARKER):
            return json.loads(line[len(_RESULT_MARKER):])
    raise RuntimeError(
        f"profiling worker ({task}) failed with exit code {completed.returncode}:\n"
        + completed.stderr[-4000:]
    )
