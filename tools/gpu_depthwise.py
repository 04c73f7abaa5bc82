"""MSCAN's depthwise convolutions on a GPU: XLA's, a sum of shifted taps, and PyTorch's.

SegNeXt's MSCAN spends most of its layers in depthwise convolutions (per block: a 5×5,
the 1×7 / 7×1, 1×11 / 11×1 and 1×21 / 21×1 strips, and the MLP's 3×3 at mlp_ratio × the
width). This script times each of them at one stage's shape (batch 16 of 512² images by
default: 128², 64², 32², 16² feature maps) and adds them up over a whole MSCAN forward
pass (each stage's depth), in three forms:

* ``jax_xla``: ``lax.conv_general_dilated`` with ``feature_group_count = C``, NHWC (what
  ``keras.layers.DepthwiseConv2D`` runs on JAX);
* ``jax_taps``: the same convolution as a sum over the kh·kw taps of shifted slices of
  the zero-padded input times each tap's per-channel weight, which XLA fuses into one
  element-wise kernel;
* ``torch``: ``torch.nn.functional.conv2d(groups=C)`` in NCHW (mmseg's layout), and
  ``torch_nhwc`` the same in PyTorch's channels-last memory format.

Run on a machine with JAX, Keras and PyTorch on one GPU:

    python tools/gpu_depthwise.py --json results/gpu/depthwise.json

It prints a table (ms per convolution and the MSCAN totals) and checks that the taps
form equals XLA's convolution.
"""

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

# kctx.bench.standalone (standard library only) by its path.
_spec = importlib.util.spec_from_file_location(
    "standalone", Path(__file__).resolve().parents[1] / "kctx" / "bench" / "standalone.py")
_standalone = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_standalone)

# MSCAN-T: stage widths, depths, MLP ratios (mmseg's mscan_t).
VARIANTS = {"t": ((32, 64, 160, 256), (3, 3, 5, 2), (8, 8, 4, 4)),
            "l": ((64, 128, 320, 512), (3, 5, 27, 3), (8, 8, 4, 4))}
STRIPS = ((5, 5), (1, 7), (7, 1), (1, 11), (11, 1), (1, 21), (21, 1))


def convolutions(variant, size):
    """(stage, kernel, channels, side, count per forward pass) of MSCAN's depthwise convs."""
    widths, depths, ratios = VARIANTS[variant]
    rows = []
    for stage, (width, depth, ratio) in enumerate(zip(widths, depths, ratios)):
        side = size // 2 ** (stage + 2)
        for kernel in STRIPS:
            rows.append((stage + 1, kernel, width, side, depth))
        rows.append((stage + 1, (3, 3), width * ratio, side, depth))
    return rows


def median_ms(call, synchronize, repeats, warmup):
    """The median wall ms of ``synchronize(call())`` (kctx.bench.standalone's timing)."""
    return _standalone.time_synced(call, synchronize, repeats, warmup)["median_ms"]


def jax_times(rows, batch, dtype, repeats, warmup):
    import jax
    import jax.numpy as jnp
    import numpy as np

    def xla(x, w):
        return jax.lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=x.shape[-1])

    # kctx's own op (TapDepthwiseConv2D's path on JAX GPUs), on the JAX backend of Keras.
    os.environ.setdefault("KERAS_BACKEND", "jax")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kctx.ops.depthwise import depthwise_conv_taps as taps

    # (kh, kw, 1, C) for XLA's HWIO; Keras' depthwise layout (kh, kw, C, 1) for the taps.
    forms = {"jax_xla": jax.jit(xla),
             "jax_taps": jax.jit(lambda x, w: taps(x, jnp.swapaxes(w, 2, 3)))}
    rng = np.random.default_rng(0)
    out = []
    for stage, kernel, channels, side, count in rows:
        x = jnp.asarray(rng.normal(size=(batch, side, side, channels)), dtype)
        w = jnp.asarray(rng.normal(size=(*kernel, 1, channels)) / kernel[0] / kernel[1],
                        dtype)
        row = {}
        for name, form in forms.items():
            row[name] = median_ms(lambda: form(x, w), jax.block_until_ready, repeats, warmup)
        a = np.asarray(forms["jax_xla"](x, w), np.float32)
        b = np.asarray(forms["jax_taps"](x, w), np.float32)
        row["taps_max_rel_diff"] = float(np.abs(a - b).max() / (np.abs(a).max() + 1e-30))
        out.append(row)
    return out


def torch_times(rows, batch, dtype, repeats, warmup):
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.benchmark = True
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    generator = torch.Generator().manual_seed(0)
    out = []
    for stage, kernel, channels, side, count in rows:
        x = torch.randn(batch, channels, side, side, generator=generator).to("cuda", torch_dtype)
        w = torch.randn(channels, 1, *kernel, generator=generator).to("cuda", torch_dtype)
        padding = (kernel[0] // 2, kernel[1] // 2)
        row = {}
        with torch.no_grad():
            for name, (xx, ww) in {"torch": (x, w), "torch_nhwc": (
                    x.to(memory_format=torch.channels_last),
                    w.to(memory_format=torch.channels_last))}.items():
                row[name] = median_ms(lambda: F.conv2d(xx, ww, padding=padding,
                                                       groups=channels),
                                      lambda _: torch.cuda.synchronize(), repeats, warmup)
        out.append(row)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="t", choices=sorted(VARIANTS))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--frameworks", nargs="+", default=["jax", "torch"])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    rows = convolutions(args.variant, args.size)
    result = {"command": "python tools/gpu_depthwise.py " + " ".join(argv or []),
              "variant": args.variant, "batch": args.batch, "size": args.size, "dtypes": {}}
    for dtype in args.dtypes:
        cells = [{"stage": s, "kernel": f"{k[0]}x{k[1]}", "channels": c, "side": side,
                  "count": n} for s, k, c, side, n in rows]
        for framework, times in (("jax", jax_times), ("torch", torch_times)):
            if framework not in args.frameworks:
                continue
            try:
                for cell, timed in zip(cells, times(rows, args.batch, dtype, args.repeats,
                                                    args.warmup)):
                    cell.update(timed)
            except Exception as error:  # noqa: BLE001 - the other framework still runs
                result.setdefault("errors", {})[f"{framework}/{dtype}"] = repr(error)[:500]
        forms = [f for f in ("jax_xla", "jax_taps", "torch", "torch_nhwc") if f in cells[0]]
        totals = {f: round(sum(c[f] * c["count"] for c in cells), 3) for f in forms}
        result["dtypes"][dtype] = {"cells": cells, "mscan_totals_ms": totals}
        print(f"\n{dtype}, batch {args.batch}, MSCAN-{args.variant.upper()} at "
              f"{args.size}²: ms per depthwise convolution")
        print(f"{'stage':>5} {'kernel':>7} {'C':>5} {'side':>5} {'×':>3} "
              + " ".join(f"{f:>11}" for f in forms))
        for c in cells:
            print(f"{c['stage']:>5} {c['kernel']:>7} {c['channels']:>5} {c['side']:>5} "
                  f"{c['count']:>3} " + " ".join(f"{c[f]:>11.4f}" for f in forms))
        print("MSCAN total (each × its count): "
              + ", ".join(f"{f} {t:.2f} ms" for f, t in totals.items()))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
