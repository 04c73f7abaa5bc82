"""Why ``kctx.ops.depthwise_conv_taps`` writes its gradients out: the training step of each
depthwise convolution of ``kctx.bench.depthwise.CONFIGS`` on JAX in three forms.

    KERAS_BACKEND=jax python tools/depthwise_gradient_forms.py [--configs ...] [--json PATH]

Forms: XLA's grouped convolution (``keras.ops.depthwise_conv``); the sum of taps
differentiated by JAX (the kh·kw kernel-gradient reductions side by side); the sum of taps
with its written-out gradients (``depthwise_conv_taps``, kctx's). Each is ``jax.jit`` of the
gradients of Σ y·g with respect to x and the kernel: the median of ``--repeats`` calls and
its compiled program's temporary buffers (``memory_analysis()``). Run from the repository
root.
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from kctx.bench.depthwise import CONFIGS  # noqa: E402
from kctx.ops.depthwise import _padding, _sum_of_taps, depthwise_conv_taps  # noqa: E402


def taps_differentiated_by_jax(x, kernel, strides, padding="same"):
    """The forward pass of ``depthwise_conv_taps``, its gradients JAX's."""
    (kh, kw), (s, t) = kernel.shape[:2], strides
    top, bottom, height = _padding(x.shape[1], kh, s, padding)
    left, right, width = _padding(x.shape[2], kw, t, padding)
    padded = jnp.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    return _sum_of_taps(padded, kernel[..., 0], height, width, s, t)


FORMS = {
    "XLA convolution": lambda x, k, strides: keras.ops.depthwise_conv(x, k, strides, "same"),
    "taps, JAX's gradients": taps_differentiated_by_jax,
    "taps, written-out gradients": lambda x, k, strides: depthwise_conv_taps(
        x, k, strides=strides),
}


def measure(form, shape, kernel_size, strides, repeats):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=shape).astype("float32"))
    kernel = jnp.asarray(rng.normal(size=(*kernel_size, shape[-1], 1)).astype("float32"))
    f = FORMS[form]
    g = jnp.asarray(rng.normal(size=f(x, kernel, (strides, strides)).shape).astype("float32"))
    step = jax.jit(jax.grad(lambda x, k: jnp.sum(f(x, k, (strides, strides)) * g),
                            argnums=(0, 1)))
    compiled = step.lower(x, kernel).compile()
    jax.block_until_ready(compiled(x, kernel))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(x, kernel))
        times.append(time.perf_counter() - start)
    return {"step_ms": statistics.median(times) * 1e3,
            "temp_mb": compiled.memory_analysis().temp_size_in_bytes / 2**20}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    rows = []
    print(f"{'Configuration':<18} " + " | ".join(f"{form:>28}" for form in FORMS))
    print(f"{'':<18} " + " | ".join(f"{'step ms':>14}{'temp MB':>14}" for _ in FORMS))
    for name in args.configs:
        kernel_size, strides, _, shape = CONFIGS[name]
        row = {"config": name, "input_shape": list(shape), "backend": jax.default_backend()}
        for form in FORMS:
            row[form] = measure(form, shape, kernel_size, strides, args.repeats)
        rows.append(row)
        print(f"{name:<18} " + " | ".join(
            f"{row[form]['step_ms']:>14.2f}{row[form]['temp_mb']:>14.1f}" for form in FORMS))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
