"""Table 1 of Kronecker Attention Networks: Attn, Attn+Pool, KAO_KV and KAO_QKV.

Each operator is the parameter-free operator of the paper's Table 1 (one
head, no linear transforms, no score normalisation), profiled in its own
fresh process at batch × spatial² × channels = 8 × {14, 28, 56}² × 8:
MAdds counted from the traced graph, allocator peak memory during one call,
median CPU inference time, and the speed-up over Attn measured in the same run.
"""

from kctx.arguments import output_path, positive_int
from kctx.bench import macs_source, memory_measure, report
from kctx.layers import Attention2D, KroneckerAttention2D
from kctx.profile import profile_layer

# (MAdd in millions, memory MB, time ms, speed-up) from the paper, CPU.
PAPER_TABLE1 = {
    14: {"Attn": (0.63, 5.2, 5.8, 1.0), "Attn+Pool": (0.16, 1.5, 2.0, 3.0),
         "KAO_KV": (0.09, 0.9, 1.7, 3.5), "KAO_QKV": (0.01, 0.3, 0.8, 6.8)},
    28: {"Attn": (9.88, 79.9, 72.4, 1.0), "Attn+Pool": (2.47, 20.7, 20.9, 3.5),
         "KAO_KV": (0.71, 6.5, 7.1, 10.1), "KAO_QKV": (0.05, 0.9, 1.7, 40.9)},
    56: {"Attn": (157.55, 1262.6, 1541.1, 1.0), "Attn+Pool": (39.39, 318.7, 396.9, 3.9),
         "KAO_KV": (5.62, 48.2, 49.6, 31.1), "KAO_QKV": (0.21, 3.4, 5.1, 305.8)},
}


def kao_operators():
    """(label, layer) of the four Table 1 operators, parameter-free."""
    plain = dict(num_heads=1, projections=(), normalize_scores=False)
    return [
        ("Attn", Attention2D(**plain)),
        ("Attn+Pool", Attention2D(pool_size=2, **plain)),
        ("KAO_KV", KroneckerAttention2D(mode="kv", **plain)),
        ("KAO_QKV", KroneckerAttention2D(mode="qkv", **plain)),
    ]


def run_kao(sizes=(14, 28, 56), batch=8, channels=8, repeats=20, jit_compile=False, log=print):
    rows = []
    for size in sizes:
        shape = (batch, size, size, channels)
        for label, layer in kao_operators():
            log(f"profiling {label} at {shape} ...")
            result = profile_layer(layer, shape, modes=("infer",), repeats=repeats,
                                   jit_compile=jit_compile)
            row = {"operator": label, "input_shape": list(shape), **result}
            if batch == 8 and channels == 8 and size in PAPER_TABLE1:
                madd, memory, time_ms, speedup = PAPER_TABLE1[size][label]
                row["paper"] = {"madd_m": madd, "memory_mb": memory, "time_ms": time_ms,
                                "speedup": speedup}
            rows.append(row)
        reference = rows[-4]["infer_ms"]
        for row in rows[-4:]:
            row["speedup_vs_attn"] = reference / row["infer_ms"]
    return rows


def format_table(rows):
    header = (f"{'Input':<14} {'Operator':<10} {'MAdd/ex':>9} {'Memory MB':>10} {'Time ms':>9} "
              f"{'Speed-up':>9} | {'paper: time':>11} {'speed-up':>9}")
    lines = [header, "-" * len(header)]
    for r in rows:
        b, h, w, c = r["input_shape"]
        paper = r.get("paper", {})
        lines.append(
            f"{f'{b}×{h}²×{c}':<14} {r['operator']:<10} {r['macs'] / b / 1e6:>8.2f}m "
            f"{r['infer_mem_mb']:>10.1f} {r['infer_ms']:>9.2f} {r['speedup_vs_attn']:>8.1f}× | "
            f"{paper.get('time_ms', float('nan')):>11.1f} {paper.get('speedup', float('nan')):>8.1f}×")
    lines.append("")
    memory = memory_measure(rows)
    untracked = " (tensors under 256 KiB are not tracked)" if memory.startswith("TensorFlow") \
        else ""
    lines.append(f"MAdd per example (the paper's unit) counted from {macs_source(rows)}; "
                 f"memory: {memory} of one call{untracked}; time: median inference. Paper: "
                 "Table 1 (CPU).")
    return "\n".join(lines)


def main(args):
    rows = run_kao(sizes=args.sizes, batch=args.batch, channels=args.channels,
                   repeats=args.repeats, jit_compile=args.jit_compile)
    return report(rows, format_table(rows), args.json)


def add_arguments(parser):
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[14, 28, 56])
    parser.add_argument("--batch", type=positive_int, default=8)
    parser.add_argument("--channels", type=positive_int, default=8)
    parser.add_argument("--repeats", type=positive_int, default=20, help="timed inference calls")
    parser.add_argument("--jit-compile", action="store_true", help="compile with XLA")
    parser.add_argument("--json", type=output_path,
                        help="write the rows as a JSON list to this path")
