"""Poly-NL paper, Fig. 2: latency and peak memory of the non-local family on this CPU.

Every method is one layer profiled in its own fresh process
(:func:`kctx.profile.profile_layer`, inference, batch 1): a 1×1 convolution
(CONV, no attention), the non-local block (NL), the efficient non-local
block (E-NL), LatentGNN (L-GNN), Poly-NL, and kctx's Hamburger (NMF) and
KAO_KV blocks. Two sweeps: positions N = S² at fixed channels C, and
channels C at fixed N. TESA is not implemented (see the README).

NL and E-NL run at full width, with C×C embeddings as in Eq. 2 of the Poly-NL
paper (W_θ, W_φ, W_g ∈ R^{C×C}), like Poly-NL's W₁, W₂, W₃; the layers'
defaults are Wang et al.'s and Shen et al.'s C/2.
"""

from kctx.arguments import output_path, positive_int
from kctx.bench import macs_source, memory_measure, report
from kctx.profile import profile_layer

FULL_WIDTH = "C"  # replaced by the input channels

METHODS = (
    ("CONV", None, {}),
    ("NL", "non_local", {"inter_channels": FULL_WIDTH}),
    ("E-NL", "efficient_non_local", {"key_dim": FULL_WIDTH, "value_dim": FULL_WIDTH}),
    ("L-GNN", "latent_gnn", {}),
    ("Poly-NL", "poly_nl", {}),
    ("Ham", "ham_nmf", {}),
    ("KAO_KV", "kao_kv", {}),
)
GOAL_SIZE, GOAL_CHANNELS = 128, 256  # Poly-NL ≤ 1.5× CONV, NL ≥ 50× Poly-NL there


def _spec(block, kwargs, channels):
    if block is None:
        import keras

        return keras.layers.Conv2D(channels, 1, name="conv1x1")
    return {"block": block,
            "kwargs": {k: channels if v == FULL_WIDTH else v for k, v in kwargs.items()}}


def run_non_local(sizes=(16, 32, 64, 128), channels=256, channel_sweep=(64, 128, 256, 512),
                  sweep_size=64, repeats=10, methods=None, log=print):
    """Rows for both sweeps: one per (method, input shape)."""
    shapes = [("positions", (1, size, size, channels)) for size in sizes]
    shapes += [("channels", (1, sweep_size, sweep_size, c)) for c in channel_sweep]
    rows = []
    for sweep, shape in shapes:
        for label, block, kwargs in METHODS:
            if methods and label not in methods:
                continue
            log(f"profiling {label} at {shape} ...")
            result = profile_layer(_spec(block, kwargs, shape[-1]), shape, modes=("infer",),
                                   repeats=repeats)
            rows.append({"sweep": sweep, "method": label, "block": block or "conv1x1",
                         "input_shape": list(shape), "positions": shape[1] * shape[2],
                         "channels": shape[-1], **result})
    return rows


def goals(rows):
    """The issue's goals at N = 128², C = 256, from ``rows`` (None where not measured)."""
    at = {r["method"]: r["infer_ms"] for r in rows if r["input_shape"][1:] ==
          [GOAL_SIZE, GOAL_SIZE, GOAL_CHANNELS]}
    result = {}
    if "Poly-NL" in at and "CONV" in at:
        ratio = at["Poly-NL"] / at["CONV"]
        result["poly_nl_over_conv"] = {"ratio": ratio, "goal": "<= 1.5", "met": ratio <= 1.5}
    if "Poly-NL" in at and "NL" in at:
        ratio = at["NL"] / at["Poly-NL"]
        result["nl_over_poly_nl"] = {"ratio": ratio, "goal": ">= 50", "met": ratio >= 50}
    return result


def format_table(rows):
    header = (f"{'Sweep':<10} {'Input':<16} {'Method':<8} {'Params':>10} {'GMACs':>8} "
              f"{'Memory MB':>10} {'Time ms':>10} {'× CONV':>8}")
    lines = [header, "-" * len(header)]
    conv = {tuple(r["input_shape"]): r["infer_ms"] for r in rows if r["method"] == "CONV"}
    for r in rows:
        b, h, w, c = r["input_shape"]
        relative = r["infer_ms"] / conv[tuple(r["input_shape"])] if tuple(
            r["input_shape"]) in conv else float("nan")
        lines.append(f"{r['sweep']:<10} {f'N={h}², C={c}':<16} {r['method']:<8} "
                     f"{r['params']:>10,} {r['macs'] / 1e9:>8.3f} {r['infer_mem_mb']:>10.1f} "
                     f"{r['infer_ms']:>10.2f} {relative:>7.2f}×")
    lines.append("")
    lines.append(f"Inference, batch 1, median time; memory: {memory_measure(rows)} of one "
                 f"call; MACs counted from {macs_source(rows)}.")
    for name, goal in goals(rows).items():
        lines.append(f"goal {name} {goal['goal']}: measured {goal['ratio']:.2f} -> "
                     f"{'met' if goal['met'] else 'NOT met'}")
    return "\n".join(lines)


def plot(rows, path):
    """Fig. 2 style: time and memory versus N, time versus C (log scales), one PNG."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(15, 4.5))
    axes = figure.subplots(1, 3)
    panels = [("positions", "infer_ms", "positions N", "time (ms)"),
              ("positions", "infer_mem_mb", "positions N", "peak memory (MB)"),
              ("channels", "infer_ms", "channels C", "time (ms)")]
    for axis, (sweep, key, xlabel, ylabel) in zip(axes, panels):
        for label, _, _ in METHODS:
            points = [(r["positions"] if sweep == "positions" else r["channels"], r[key])
                      for r in rows if r["sweep"] == sweep and r["method"] == label]
            if points:
                axis.plot(*zip(*points), marker="o", label=label)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        axis.grid(True, alpha=0.3)
    axes[0].legend()
    figure.suptitle("Non-local blocks on this CPU (batch 1, inference)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return path


def main(args):
    rows = run_non_local(sizes=args.sizes, channels=args.channels,
                         channel_sweep=args.channel_sweep, sweep_size=args.sweep_size,
                         repeats=args.repeats, methods=args.methods)
    report(rows, format_table(rows), args.json)
    if args.plot:
        print(f"wrote {plot(rows, args.plot)}")
    return rows


def add_arguments(parser):
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[16, 32, 64, 128],
                        help="spatial sides S of the positions sweep (N = S²)")
    parser.add_argument("--channels", type=positive_int, default=GOAL_CHANNELS,
                        help="channels of the positions sweep")
    parser.add_argument("--channel-sweep", type=positive_int, nargs="*",
                        default=[64, 128, 256, 512], help="C of the channels sweep (none: skip it)")
    parser.add_argument("--sweep-size", type=positive_int, default=64,
                        help="S of the channels sweep")
    parser.add_argument("--repeats", type=positive_int, default=10, help="timed inference calls")
    parser.add_argument("--methods", nargs="+", choices=[m[0] for m in METHODS],
                        help="a subset of the methods")
    parser.add_argument("--json", type=output_path,
                        help="write the rows as a JSON list to this path")
    parser.add_argument("--plot", type=output_path, help="write the Fig. 2-style PNG to this path")
