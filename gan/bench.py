"""``python -m gan.bench``: training-step time of the 128×128 SAGAN with each context block.

The HamGAN paper (Geng et al., ICLR 2021, Sec. 3.5) reports that HamGAN costs
about 7% over the same network without a context block, less than half of
self-attention's overhead. This benchmark times one full ``train_step`` (a D
step then a G step, both Adam updates) of the ``imagenet128_hamgan_baby``
architecture with ``none``, ``ham_nmf`` and ``self_attention`` in one process,
interleaving the timed steps so that machine noise hits all three alike, and
prints the overhead over ``none``.

The step runs on the Keras backend of the process: TensorFlow's ``train_step`` in a
``tf.function`` (``--jit-compile`` for XLA), on JAX the stateless step ``jax.jit``
compiles (XLA always), as ``fit`` runs them, or on PyTorch the eager step (autograd, as
``fit`` runs it there). A timed step ends when the device has finished it (on a GPU:
``block_until_ready``, ``torch.cuda.synchronize``). ``--backends tensorflow jax torch``
times each backend in its own process, one after the other, into one table. Only the
TensorFlow backend needs TensorFlow installed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import keras
import numpy as np

from gan.configs import get_config
from gan.models import CONTEXTS, build_gan
from kctx.arguments import output_path, positive_int
from kctx.bench import report
from kctx.bench.standalone import wait_for_turn

BACKENDS = ("tensorflow", "jax", "torch")


def _batch(config, batch_size, seed=0):
    """A batch as the data pipeline gives it, as tensors of the process's backend
    (NumPy arrays on JAX, which ``jax.jit`` puts on the device)."""
    rng = np.random.default_rng(seed)
    size, channels = config.resolution, config.image_channels
    batch = {
        "images": rng.uniform(-1, 1, (batch_size, size, size, channels)).astype("float32"),
        "labels": rng.integers(0, config.num_classes, batch_size).astype("int32"),
        "z_d": rng.normal(size=(batch_size, config.latent_dim)).astype("float32"),
        "z_g": rng.normal(size=(batch_size, config.latent_dim)).astype("float32"),
        "labels_d": rng.integers(0, config.num_classes, batch_size).astype("int32"),
        "labels_g": rng.integers(0, config.num_classes, batch_size).astype("int32"),
    }
    if keras.backend.backend() == "jax":
        return batch
    return {key: keras.ops.convert_to_tensor(value) for key, value in batch.items()}


def _step_function(gan, batch, jit_compile):
    """``step(batch)``: one train step that returns when its results are computed."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(gan.train_step, jit_compile=jit_compile)
    if backend == "torch":
        import torch

        def step(batch):
            logs = gan.train_step(batch)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            return logs

        return step
    import jax

    state = [tuple(variable.value for variable in variables) for variables in (
        gan.trainable_variables, gan.non_trainable_variables, gan.optimizer.variables,
        gan.metrics_variables)]
    jitted = jax.jit(gan.train_step, donate_argnums=0)  # as Keras's JAX trainer runs it

    def step(batch):
        logs, state[:] = jitted(tuple(state), batch)
        jax.block_until_ready(logs)
        return logs

    return step


def run_gan_bench(config="imagenet128_hamgan_baby", contexts=CONTEXTS, batch_size=4, repeats=5,
                  warmup=2, jit_compile=False, seed=0, log=print):
    """Median train-step time per context; rows as dicts (``overhead_vs_none`` in %)."""
    config = get_config(config, batch_size=batch_size)
    batch = _batch(config, batch_size, seed)
    steps, rows = {}, {}
    for context in contexts:
        keras.utils.set_random_seed(seed)
        gan = build_gan(config, context)
        step = _step_function(gan, batch, jit_compile)
        start = time.perf_counter()
        step(batch)
        compile_s = time.perf_counter() - start
        for _ in range(warmup - 1):
            step(batch)
        steps[context] = step
        rows[context] = {
            "context": context, "config": config.name, "batch_size": batch_size,
            "backend": keras.backend.backend(),
            "jit_compile": bool(jit_compile or keras.backend.backend() == "jax"),
            "device": _device(),
            "g_params": int(gan.generator.count_params()),
            "d_params": int(gan.discriminator.count_params()),
            "first_step_s": round(compile_s, 2), "times_ms": [],
        }
        log(f"built {context}: G {rows[context]['g_params']:,} / D "
            f"{rows[context]['d_params']:,} params, first step {compile_s:.1f} s")
    wait_for_turn()  # under tools' run_in_turn: time while no other process does
    for _ in range(repeats):  # interleaved: each round times every context once
        for context, step in steps.items():
            start = time.perf_counter()
            step(batch)
            rows[context]["times_ms"].append((time.perf_counter() - start) * 1e3)
    for row in rows.values():
        row["step_ms"] = statistics.median(row["times_ms"])
    if "none" in rows:
        base = rows["none"]["step_ms"]
        for row in rows.values():
            row["overhead_vs_none"] = 100.0 * (row["step_ms"] / base - 1.0)
    return list(rows.values())


def _device():
    """What the step ran on: ``cpu`` or the GPU's name."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.devices()[0].device_kind
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    import tensorflow as tf

    return "gpu" if tf.config.list_logical_devices("GPU") else "cpu"


def format_table(rows):
    header = (f"{'Backend':<11} {'Context':<16} {'G params':>12} {'D params':>12} "
              f"{'Step ms':>9} {'vs none':>8}")
    lines = [header, "-" * len(header)]
    for r in rows:
        overhead = r.get("overhead_vs_none")
        lines.append(
            f"{r.get('backend', 'tensorflow'):<11} {r['context']:<16} {r['g_params']:>12,d} "
            f"{r['d_params']:>12,d} {r['step_ms']:>9.0f} "
            f"{'' if overhead is None else f'{overhead:+.1f}%':>8}")
    lines.append("")
    lines.append(
        f"One train_step (D step + G step, Adam) of {rows[0]['config']} at batch "
        f"{rows[0]['batch_size']}, median of {len(rows[0]['times_ms'])} interleaved runs. "
        "Paper (TPU): HamGAN +7% over no context block, under half of attention's overhead.")
    return "\n".join(lines)


def _other_backends(backends, argv):
    """Rows of ``python -m gan.bench ARGV`` run with each of ``backends`` in its own
    process (KERAS_BACKEND), in order."""
    rows = []
    for backend in backends:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "rows.json")
            subprocess.run([sys.executable, "-m", "gan.bench", *argv, "--json", path],
                           env={**os.environ, "KERAS_BACKEND": backend}, check=True)
            with open(path) as file:
                rows += json.load(file)
    return rows


def _without_options(argv, options):
    """``argv`` without the given options and their values."""
    kept, skipping = [], False
    for item in argv:
        if item.startswith("--"):
            skipping = item.split("=")[0] in options
            if skipping:
                continue
        elif skipping:
            continue
        kept.append(item)
    return kept


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m gan.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="imagenet128_hamgan_baby")
    parser.add_argument("--contexts", nargs="+", default=list(CONTEXTS), choices=CONTEXTS)
    parser.add_argument("--batch-size", type=positive_int, default=4)
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed steps per context")
    parser.add_argument("--warmup", type=positive_int, default=2,
                        help="untimed steps (incl. tracing; at least 1)")
    parser.add_argument("--jit-compile", action="store_true", help="compile the step with XLA")
    parser.add_argument("--json", type=output_path, help="write the rows to this JSON file")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS,
                        help="time each Keras backend in its own process, into one table "
                             "(default: this process's backend)")
    args = parser.parse_args(argv)
    if args.backends:
        forwarded = [item for item in (argv if argv is not None else sys.argv[1:])]
        forwarded = _without_options(forwarded, ("--backends", "--json"))
        rows = _other_backends(args.backends, forwarded)
    else:
        rows = run_gan_bench(args.config, args.contexts, args.batch_size, args.repeats,
                             args.warmup, args.jit_compile)
    report(rows, format_table(rows), args.json)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    raise SystemExit(main())
