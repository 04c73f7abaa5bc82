"""Why JAX is slower than TensorFlow on this CPU: where the digits HamGAN's JAX train step spends
its time, by XLA operation kind, and the convolutions alone on both backends.

    python tools/jax_cpu_profile.py [--context none] [--batch-size 64] [--steps 5] [--json PATH]
    python tools/jax_cpu_profile.py --convolutions [--json PATH]

The first form (the JAX backend)
builds the GAN as ``gan.bench`` does, compiles its stateless ``train_step`` with ``jax.jit``,
traces ``--steps`` steps with ``jax.profiler.trace(create_perfetto_trace=True)`` and sums the
trace's XLA operation events by the JAX operation they come from (the compiled module's
metadata): forward convolutions, their gradients, matrix products, transposes and copies,
reductions, the rest.

``--convolutions`` times forward + both gradients (``jit``-compiled on JAX, a ``tf.function`` on
TensorFlow, each backend in its own process, median of 10) of the three convolution kinds of
the workflows' networks on a (64, 16, 16, 96) map: 3×3 depthwise (MobileNetV2 / KANets), 1×1
and 3×3 dense convolutions (96 → 96). Prints tables; ``--json`` writes them. Run from the
repository root (the GAN profile imports ``gan``).
"""

import argparse
import collections
import gzip
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

if "--convolutions" not in sys.argv:
    os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import keras  # noqa: E402

from gan.bench import _batch, _step_function  # noqa: E402
from gan.configs import get_config  # noqa: E402
from gan.models import build_gan  # noqa: E402

def op_names(hlo_text):
    """{instruction name: the JAX operations it computes} of a compiled module: its own
    ``op_name`` metadata, or for a fusion those of the convolutions, dots and other operations
    of the computation it calls (a YNNPACK fusion carries no metadata of its own)."""
    bodies, current = {}, None
    for line in hlo_text.splitlines():
        header = re.match(r"^(?:ENTRY )?%?([\w.-]+) .*\{$", line)
        if header:
            current = header.group(1)
            bodies[current] = []
        elif current is not None:
            bodies[current].append(line)
    names = {}
    for lines in bodies.values():
        for line in lines:
            match = re.match(r"^\s+(?:ROOT )?%?([\w.-]+) = ", line)
            if not match:
                continue
            called = re.search(r"calls=%?([\w.-]+)", line)
            own = re.search(r'op_name="([^"]+)"', line)
            inner = []
            for body_line in bodies.get(called.group(1), []) if called else []:
                operation = re.search(r" (convolution|dot)\(", body_line)
                if operation:
                    name = re.search(r'op_name="([^"]+)"', body_line)
                    inner.append(name.group(1) if name else f"{operation.group(1)} (fused)")
            names[match.group(1)] = " ".join(inner) or (own.group(1) if own else "")
    return names


def kind_of(event, op_name):
    """The kind of work of one executed XLA operation, from its JAX operation."""
    if "conv_general_dilated" in op_name:
        return "convolution, backward" if "transpose(" in op_name else "convolution, forward"
    if "convolution (fused)" in op_name:  # YNNPACK fusions keep no metadata: gradients here
        return "convolution, backward"
    if "dot_general" in op_name or "dot (fused)" in op_name:
        return "matrix product"
    if event.startswith(("transpose", "copy")) or "transpose_copy" in event:
        return "transpose / copy"
    if "reduce" in event:
        return "reduction"
    return "element-wise and other"


def xla_events(trace_dir):
    """(name, duration µs) of the complete events on the XLA CPU threads of a perfetto trace."""
    path = next(pathlib.Path(trace_dir).rglob("perfetto_trace.json.gz"))
    trace = json.loads(gzip.open(path).read())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    threads = {(e.get("pid"), e.get("tid")): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    for event in events:
        if event.get("ph") != "X" or "dur" not in event:
            continue
        yield event["name"], float(event["dur"]), threads.get((event.get("pid"), event.get("tid")), "")


CONVOLUTIONS = {
    "3×3 depthwise": lambda: keras.layers.DepthwiseConv2D(3, padding="same"),
    "1×1, 96 → 96": lambda: keras.layers.Conv2D(96, 1),
    "3×3, 96 → 96": lambda: keras.layers.Conv2D(96, 3, padding="same"),
}


SHIFTED = "3×3 depthwise as 9 shifted multiply-adds"


def convolution_times(repeats=10):
    """{kind: median ms} of forward + gradients of each convolution on this process's backend."""
    import numpy as np
    from keras import ops

    x = np.random.default_rng(0).standard_normal((64, 16, 16, 96)).astype("float32")
    times = {}
    for kind, make in CONVOLUTIONS.items():
        layer = make()
        layer.build(x.shape)
        if keras.backend.backend() == "jax":
            def loss(kernel, inputs, layer=layer):
                weights = [kernel] + ([layer.bias.value] if layer.bias is not None else [])
                return ops.sum(layer.stateless_call(weights, [], inputs)[0] ** 2)

            gradients = jax.jit(jax.grad(loss, argnums=(0, 1)))
            run = lambda: jax.block_until_ready(gradients(layer.kernel.value, x))  # noqa: E731
        else:
            import tensorflow as tf

            @tf.function
            def gradients(inputs, layer=layer):
                with tf.GradientTape() as tape:
                    tape.watch(inputs)
                    loss = tf.reduce_sum(layer(inputs) ** 2)
                return tape.gradient(loss, [layer.kernel, inputs])

            inputs = tf.constant(x)
            run = lambda: [t.numpy() for t in gradients(inputs)]  # noqa: E731
        run()
        run()
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            samples.append((time.perf_counter() - start) * 1e3)
        times[kind] = statistics.median(samples)
    if keras.backend.backend() == "jax":  # the depthwise one as nine shifted multiply-adds
        import jax.numpy as jnp

        kernel = np.random.default_rng(1).standard_normal((3, 3, 96, 1)).astype("float32")

        def shifted(kernel, inputs):
            padded = jnp.pad(inputs, ((0, 0), (1, 1), (1, 1), (0, 0)))
            height, width = inputs.shape[1:3]
            outputs = sum(padded[:, i:i + height, j:j + width, :] * kernel[i, j, :, 0]
                          for i in range(3) for j in range(3))
            return jnp.sum(outputs ** 2)

        gradients = jax.jit(jax.grad(shifted, argnums=(0, 1)))
        for _ in range(2):
            jax.block_until_ready(gradients(kernel, x))
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            jax.block_until_ready(gradients(kernel, x))
            samples.append((time.perf_counter() - start) * 1e3)
        times[SHIFTED] = statistics.median(samples)
    return times


def compare_convolutions(json_path=None):
    results = {}
    for backend in ("tensorflow", "jax"):
        completed = subprocess.run(
            [sys.executable, __file__, "--convolution-times"], capture_output=True, text=True,
            env={**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"},
            check=True)
        results[backend] = json.loads(completed.stdout.strip().splitlines()[-1])
    print("Forward + gradients of one convolution on a (64, 16, 16, 96) map, median of 10:")
    print(f"{'convolution':<16}{'TensorFlow ms':>15}{'JAX ms':>10}{'JAX / TF':>10}")
    for kind in CONVOLUTIONS:
        tf_ms, jax_ms = results["tensorflow"][kind], results["jax"][kind]
        print(f"{kind:<16}{tf_ms:>15.2f}{jax_ms:>10.2f}{jax_ms / tf_ms:>10.1f}")
    print(f"{SHIFTED} (JAX only): {results['jax'][SHIFTED]:.2f} ms, "
          f"{results['jax'][SHIFTED] / results['tensorflow']['3×3 depthwise']:.1f}× "
          "TensorFlow's depthwise convolution")
    if json_path:
        pathlib.Path(json_path).write_text(json.dumps(results, indent=1) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", default="none")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--convolutions", action="store_true",
                        help="time the convolutions alone on both backends")
    parser.add_argument("--convolution-times", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.convolutions:
        return compare_convolutions(args.json)
    if args.convolution_times:  # one backend, in its own process
        return print(json.dumps(convolution_times()))
    assert keras.backend.backend() == "jax", "run with KERAS_BACKEND=jax"
    config = get_config("digits", batch_size=args.batch_size)
    batch = {k: v.numpy() for k, v in _batch(config, args.batch_size).items()}
    keras.utils.set_random_seed(0)
    gan = build_gan(config, args.context)
    state = tuple(tuple(variable.value for variable in variables) for variables in (
        gan.trainable_variables, gan.non_trainable_variables, gan.optimizer.variables,
        gan.metrics_variables))
    origin = op_names(jax.jit(gan.train_step).lower(state, batch).compile().as_text())
    step = _step_function(gan, batch, jit_compile=True)
    for _ in range(3):
        step(batch)
    with tempfile.TemporaryDirectory() as trace_dir:
        start = time.perf_counter()
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            for _ in range(args.steps):
                step(batch)
        wall_ms = (time.perf_counter() - start) * 1e3 / args.steps
        totals, names = collections.Counter(), collections.defaultdict(collections.Counter)
        for name, duration, thread in xla_events(trace_dir):
            if name.startswith(("$", "Thunk", "PjRt", "jit_", "Execute", "XlaModule")):
                continue
            kind = kind_of(name, origin.get(name, ""))
            totals[kind] += duration
            names[kind][(origin.get(name) or name).split("/")[-2:][0]] += duration
    busy = sum(totals.values())
    rows = [{"kind": kind, "ms_per_step": totals[kind] / 1e3 / args.steps,
             "share": totals[kind] / busy,
             "largest": [n for n, _ in names[kind].most_common(3)]}
            for kind, _ in sorted(totals.items(), key=lambda item: -item[1])]
    print(f"digits HamGAN ({args.context}), batch {args.batch_size}, JAX {jax.__version__}: "
          f"{wall_ms:.0f} ms per traced step; XLA operation time summed over threads:")
    print(f"{'kind':<18}{'ms/step':>10}{'share':>8}  largest events")
    for row in rows:
        print(f"{row['kind']:<18}{row['ms_per_step']:>10.1f}{row['share']:>8.1%}  "
              f"{', '.join(row['largest'])}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"wall_ms": wall_ms, "rows": rows},
                                                      indent=1))


if __name__ == "__main__":
    main()
