"""The Hamburger paper's Table 3 blocks on a GPU, against the device's own ceilings.

``python -m kctx.bench.gpu_blocks --json PATH`` (with ``KERAS_BACKEND=jax`` or ``torch``)
measures, in one process:

* the **ceilings** of the device as this backend reaches them: the copy bandwidth (a
  1 GiB float32 array read and written once, ``x + 1``: bytes read + written per second)
  and the float32 / bfloat16 matrix-product rates (8192³);
* each block of :func:`kctx.bench.table3.table3_methods` (self-attention and the
  Hamburger with NMF, CD and VQ at d = C, r = C / 8, K = 6) and SegNeXt's light
  Hamburger (``ham_nmf_light``, r = C / 8) at the paper's 1 × 128 × 128 × 512 input:
  inference (``training=False``) and a training step (the gradient of the mean square
  of the output with respect to the weights), median of the timed calls, each ended by
  the device's synchronisation;
* against the ceilings: the **bandwidth floor** (the input read once and the output and
  weights written / read once, over the copy bandwidth) and, on JAX, XLA's cost analysis
  of the compiled call (FLOPs and bytes accessed) with the rates they imply.

Run by ``tools/gpu_measurements.py`` (which also runs the official LightHam module
beside it); it takes turns with the other measuring processes
(:func:`kctx.bench.standalone.wait_for_turn`).
"""

import argparse
import inspect
import json
import time

import numpy as np

from kctx.bench.segnext_gpu import Runner, device_description, xla_cost
from kctx.bench.standalone import package_versions, time_synced, wait_for_turn
from kctx.bench.table3 import PAPER_TABLE3, table3_methods


def blocks(channels):
    """(label, context-block name, kwargs): Table 3's rows and the light Hamburger."""
    return table3_methods(channels) + [
        ("LightHam (NMF)", "ham_nmf_light", dict(rank=max(1, channels // 8)))]


def ceilings(runner, copy_mib=1024, matmul_size=8192, repeats=20):
    """The copy bandwidth (GB/s, bytes read + written) and matrix-product rates (TFLOP/s)
    this backend reaches on its device."""
    import keras

    elements = copy_mib * 2**20 // 4
    x = runner.to_device(np.ones(elements, np.float32))
    result = {}
    if runner.backend == "jax":
        import jax

        add = jax.jit(lambda x: x + 1.0)
        timed = time_synced(lambda: add(x), runner.synchronize, repeats, 3)
    else:
        import torch

        out = torch.empty_like(x)
        timed = time_synced(lambda: torch.add(x, 1.0, out=out), runner.synchronize, repeats, 3)
    result["copy_gb_per_s"] = round(2 * elements * 4 / (timed["median_ms"] * 1e-3) / 1e9, 1)
    del x
    n = matmul_size
    for dtype in ("float32", "bfloat16"):
        rng = np.random.default_rng(0)
        a = runner.to_device(rng.normal(size=(n, n)).astype(np.float32))
        b = runner.to_device(rng.normal(size=(n, n)).astype(np.float32))
        a, b = keras.ops.cast(a, dtype), keras.ops.cast(b, dtype)
        if runner.backend == "jax":
            import jax

            product = jax.jit(lambda a, b: a @ b)
            timed = time_synced(lambda: product(a, b), runner.synchronize, repeats, 3)
        else:
            timed = time_synced(lambda: a @ b, runner.synchronize, repeats, 3)
        result[f"matmul_{dtype}_tflops"] = round(2 * n**3 / (timed["median_ms"] * 1e-3) / 1e12,
                                                 1)
    if runner.backend == "torch":
        import torch

        result["torch_matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
        result["torch_cudnn_allow_tf32"] = torch.backends.cudnn.allow_tf32
    return result


def _prepare_block(runner, block, kwargs, shape):
    """``(inference, train_step, info)`` for a context block on an input of ``shape``."""
    import keras

    from kctx.layers import context_block

    keras.utils.set_random_seed(0)
    layer = context_block(block, **kwargs)
    layer.build(shape)
    x = runner.to_device(np.random.default_rng(1).normal(size=shape).astype(np.float32))
    params = int(sum(int(np.prod(v.shape)) for v in layer.trainable_weights))
    if runner.backend == "jax":
        import jax

        trainable = [v.value for v in layer.trainable_variables]
        fixed = [v.value for v in layer.non_trainable_variables]
        # stateless_call passes keyword arguments to `call` as they are (`__call__` drops
        # `training` where `call` takes none).
        takes_training = "training" in inspect.signature(layer.call).parameters

        def mode(training):
            return {"training": training} if takes_training else {}

        def infer(trainable, fixed, x):
            return layer.stateless_call(trainable, fixed, x, **mode(False))[0]

        def loss(trainable, fixed, x):
            y, _ = layer.stateless_call(trainable, fixed, x, **mode(True))
            return keras.ops.mean(keras.ops.square(keras.ops.cast(y, "float32")))

        info = {}
        start = time.perf_counter()
        infer_compiled = jax.jit(infer).lower(trainable, fixed, x).compile()
        info["infer_compile_s"] = round(time.perf_counter() - start, 2)
        info["infer_xla"] = xla_cost(infer_compiled)
        start = time.perf_counter()
        train_compiled = jax.jit(jax.value_and_grad(loss)).lower(trainable, fixed, x).compile()
        info["train_compile_s"] = round(time.perf_counter() - start, 2)
        info["train_xla"] = xla_cost(train_compiled)
        return (lambda: infer_compiled(trainable, fixed, x),
                lambda: train_compiled(trainable, fixed, x), dict(info, params=params))
    import torch

    def inference():
        with torch.no_grad():
            return layer(x, training=False)

    def train_step():
        layer.zero_grad(set_to_none=True)
        y = layer(x, training=True)
        value = torch.mean(torch.square(y.float()))
        value.backward()
        return value

    return inference, train_step, {"params": params}


def block_cells(channels=512, size=128, batch=1, repeats=50, warmup=10, json_path=None,
                names=None, copy_mib=1024, matmul_size=8192, compile_only=False):
    """Measure the ceilings and every block (see the module's docstring);
    ``compile_only``: prepare (and on JAX compile) every block, then return."""
    import keras

    runner = Runner()
    shape = (batch, size, size, channels)
    prepared = []
    for label, block, kwargs in blocks(channels):
        if names and label not in names and block not in names:
            continue
        try:
            prepared.append((label, block, kwargs, *_prepare_block(runner, block, kwargs,
                                                                   shape)))
        except Exception as error:  # noqa: BLE001 - that row says so
            prepared.append((label, block, kwargs, None, None,
                             {"error": f"{type(error).__name__}: {error}"[:300]}))
    if compile_only:
        return {"prepared": [label for label, *_ in prepared]}
    wait_for_turn()
    result = {"framework": keras.backend.backend(), "input_shape": list(shape),
              "device": device_description(),
              "versions": package_versions(("keras", "jax", "jaxlib", "torch")),
              "ceilings": ceilings(runner, copy_mib, matmul_size), "rows": []}
    bandwidth = result["ceilings"]["copy_gb_per_s"] * 1e9
    input_bytes = int(np.prod(shape)) * 4
    for label, block, kwargs, inference, train_step, info in prepared:
        row = {"method": label, "block": block, "block_kwargs": kwargs, **info}
        if inference is not None:
            for mode, call in (("infer", inference), ("train", train_step)):
                runner.reset_peak_memory()
                start = time.perf_counter()
                runner.synchronize(call())
                first_ms = (time.perf_counter() - start) * 1e3
                timed = time_synced(call, runner.synchronize, repeats, warmup)
                row[mode] = {**timed, "first_call_ms": round(first_ms, 1),
                             "peak_memory_mb": runner.peak_memory_mb()}
                xla = info.get(f"{mode}_xla") or {}
                seconds = timed["median_ms"] * 1e-3
                if "flops" in xla:
                    row[mode]["xla_tflops_per_s"] = round(xla["flops"] / seconds / 1e12, 2)
                if "bytes_accessed" in xla:
                    row[mode]["xla_gb_per_s"] = round(xla["bytes_accessed"] / seconds / 1e9, 1)
            # Bandwidth floor of inference: the input read once, the output written once,
            # the weights read once.
            floor_bytes = 2 * input_bytes + 4 * info["params"]
            row["infer"]["floor_bytes"] = floor_bytes
            row["infer"]["bandwidth_floor_ms"] = round(floor_bytes / bandwidth * 1e3, 4)
            row["infer"]["times_bandwidth_floor"] = round(
                row["infer"]["median_ms"] / row["infer"]["bandwidth_floor_ms"], 1)
        paper = PAPER_TABLE3.get(label)
        if paper and shape == (1, 128, 128, 512):
            row["paper_titan_xp"] = paper
        result["rows"].append(row)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
    return result


def format_table(results):
    """One table of every backend's rows (``results``: what :func:`block_cells` returned
    per backend)."""
    header = (f"{'Backend':<7} {'Block':<15} {'infer ms':>9} {'train ms':>9} {'floor ms':>9} "
              f"{'×floor':>7} {'XLA TFLOP/s':>11} {'XLA GB/s':>9} {'paper inf/trn ms':>17}")
    lines = [header, "-" * len(header)]
    for result in results:
        for row in result.get("rows", []):
            if "infer" not in row:
                lines.append(f"{result['framework']:<7} {row['method']:<15} failed: "
                             f"{row.get('error', '')[:60]}")
                continue
            infer, train = row["infer"], row["train"]
            paper = row.get("paper_titan_xp")
            lines.append(
                f"{result['framework']:<7} {row['method']:<15} {infer['median_ms']:>9.3f} "
                f"{train['median_ms']:>9.3f} {infer['bandwidth_floor_ms']:>9.4f} "
                f"{infer['times_bandwidth_floor']:>7.1f} "
                f"{infer.get('xla_tflops_per_s', float('nan')):>11.1f} "
                f"{infer.get('xla_gb_per_s', float('nan')):>9.0f} "
                + (f"{paper['infer_ms']:>8.1f}/{paper['train_ms']:<8.1f}" if paper else ""))
    for result in results:
        c = result.get("ceilings", {})
        if c:
            lines.append(f"{result['framework']}: copy {c['copy_gb_per_s']:.0f} GB/s, matmul "
                         f"float32 {c['matmul_float32_tflops']:.0f} / bfloat16 "
                         f"{c['matmul_bfloat16_tflops']:.0f} TFLOP/s")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kctx.bench.gpu_blocks",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--channels", type=int, default=512)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--blocks", nargs="+", help="a subset, by label or block name")
    parser.add_argument("--copy-mib", type=int, default=1024,
                        help="size of the array the copy bandwidth is measured on")
    parser.add_argument("--matmul-size", type=int, default=8192,
                        help="n of the n×n×n products the matmul rates are measured on")
    parser.add_argument("--compile-only", action="store_true",
                        help="prepare and compile, then exit (fills JAX's compilation cache)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    result = block_cells(args.channels, args.size, args.batch, args.repeats, args.warmup,
                         args.json, args.blocks, args.copy_mib, args.matmul_size,
                         args.compile_only)
    if not args.compile_only:
        print(format_table([result]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
