"""Reproduce the rows of Table 3 of Geng et al. (ICLR 2021) that kctx implements.

Each method is profiled in its own fresh process (parameters, MACs counted
from the traced graph, median latency of inference and of a training step,
allocator peak memory), then compared with self-attention measured in the
same run and with the roofline 2·MACs / (measured fp32 matmul peak).
"""

from kctx.arguments import output_path, positive_int
from kctx.bench import macs_source, memory_measure, report
from kctx.profile import matmul_peak_gflops, profile_layer

# Paper, Table 3, input 1×512×128×128 (GPU: NVIDIA TITAN Xp). Params are in
# units of 2^20: SA's four 512×512 projections (1,048,576 weights) are its
# "1.00M", Hamburger's two breads (524,288) its "0.50M".
PAPER_TABLE3 = {
    "SA": dict(params_mi=1.00, macs_g=292.0, train_mem_mb=5253, infer_mem_mb=2148,
               train_ms=242.0, infer_ms=82.2),
    "Ham (CD)": dict(params_mi=0.50, macs_g=16.2, train_mem_mb=162, infer_mem_mb=102,
                     train_ms=20.0, infer_ms=13.0),
    "Ham (NMF)": dict(params_mi=0.50, macs_g=17.6, train_mem_mb=202, infer_mem_mb=98,
                      train_ms=15.6, infer_ms=7.7),
}


def table3_methods(channels):
    """(label, context-block name, kwargs) of every Table 3 row kctx has.

    Hamburger uses the paper's setting d = C, r = d / 8 (64 at C = 512), K = 6.
    Later operators append their rows here.
    """
    ham = dict(latent_dim=channels, rank=max(1, channels // 8), steps=6)
    return [
        ("SA", "self_attention", {}),
        ("Ham (CD)", "ham_cd", ham),
        ("Ham (NMF)", "ham_nmf", ham),
        ("Ham (VQ)", "ham_vq", ham),
    ]


def run_table3(size=128, channels=512, batch=1, repeats=10, train_repeats=5, methods=None,
               jit_compile=False, peak_sizes=(1024, 2048, 4096), log=print):
    """Profile the Table 3 methods; returns the list of row dicts. The roofline divides by
    the best fp32 matmul throughput over square matrices of ``peak_sizes``."""
    input_shape = (batch, size, size, channels)
    peak = matmul_peak_gflops(sizes=tuple(peak_sizes))
    log(
        f"fp32 matmul peak: {peak['peak_gflops']:.0f} GFLOP/s "
        f"(square sizes {', '.join(f'{k}: {v:.0f}' for k, v in peak['per_size_gflops'].items())})"
    )
    rows = []
    for label, block, kwargs in table3_methods(channels):
        if methods and label not in methods and block not in methods:
            continue
        log(f"profiling {label} at {input_shape} ...")
        result = profile_layer(
            {"block": block, "kwargs": kwargs},
            input_shape,
            repeats=repeats,
            train_repeats=train_repeats,
            jit_compile=jit_compile,
        )
        roofline_ms = 2 * result["macs"] / (peak["peak_gflops"] * 1e9) * 1e3
        row = {
            "method": label,
            "block": block,
            "block_kwargs": kwargs,
            **result,
            "params_mi": result["params"] / 2**20,
            "matmul_peak_gflops": peak["peak_gflops"],
            "roofline_ms": roofline_ms,
            "roofline_ratio": result["infer_ms"] / roofline_ms,
        }
        paper = PAPER_TABLE3.get(label)
        if paper and (size, channels, batch) == (128, 512, 1):
            row["paper"] = paper
        rows.append(row)
    reference = next((r for r in rows if r["method"] == "SA"), None)
    for row in rows:
        if reference is not None:
            row["infer_speedup_vs_sa"] = reference["infer_ms"] / row["infer_ms"]
            row["train_speedup_vs_sa"] = reference["train_ms"] / row["train_ms"]
    return rows


def format_table(rows):
    header = (
        f"{'Method':<10} {'Params':>9} {'Mi':>5} {'MACs':>8} {'Train MB':>9} {'Infer MB':>9} "
        f"{'Train ms':>9} {'Infer ms':>9} {'xSA inf':>8} {'xSA trn':>8} {'Roofl ms':>9} {'xRoofl':>7}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['method']:<10} {r['params']:>9,d} {r['params_mi']:>5.2f} {r['macs'] / 1e9:>7.2f}G "
            f"{r['train_mem_mb']:>9.0f} {r['infer_mem_mb']:>9.0f} {r['train_ms']:>9.1f} "
            f"{r['infer_ms']:>9.1f} {r.get('infer_speedup_vs_sa', float('nan')):>8.1f} "
            f"{r.get('train_speedup_vs_sa', float('nan')):>8.1f} {r['roofline_ms']:>9.1f} "
            f"{r['roofline_ratio']:>7.2f}"
        )
    papers = [r for r in rows if "paper" in r]
    if papers:
        lines.append("")
        lines.append("Paper (Table 3, TITAN Xp GPU; params in units of 2^20, MACs in 1e9):")
        for r in papers:
            p = r["paper"]
            lines.append(
                f"{r['method']:<10} {p['params_mi']:.2f}Mi {p['macs_g']:.1f}G  "
                f"train {p['train_mem_mb']}MB/{p['train_ms']}ms  infer {p['infer_mem_mb']}MB/"
                f"{p['infer_ms']}ms  | kctx params {100 * (r['params_mi'] / p['params_mi'] - 1):+.1f}%, "
                f"MACs {100 * (r['macs'] / 1e9 / p['macs_g'] - 1):+.1f}%"
            )
    lines.append("")
    lines.append(
        f"MACs are counted from {macs_source(rows)}. kctx's Hamburger applies the upper bread "
        "to the factors, (C·Dᵀ)·W_u = C·(Dᵀ·W_u), and reuses x·D₀ between the NMF code "
        "initialisation and the first update, so it executes fewer MACs than the paper's "
        f"implementation for the same output. Memory: {memory_measure(rows)} during one "
        "call (inputs and weights included), each method in a fresh process. Roofline: "
        "2·MACs / fp32 matmul peak (TensorFlow's)."
    )
    return "\n".join(lines)


def main(args):
    rows = run_table3(
        size=args.size,
        channels=args.channels,
        batch=args.batch,
        repeats=args.repeats,
        train_repeats=args.train_repeats,
        methods=args.methods,
        jit_compile=args.jit_compile,
        peak_sizes=args.peak_sizes,
    )
    return report(rows, format_table(rows), args.json)


def add_arguments(parser):
    parser.add_argument("--size", type=positive_int, default=128,
                        help="height = width (paper: 128)")
    parser.add_argument("--channels", type=positive_int, default=512, help="C = d (paper: 512)")
    parser.add_argument("--batch", type=positive_int, default=1)
    parser.add_argument("--repeats", type=positive_int, default=10, help="timed inference calls")
    parser.add_argument("--train-repeats", type=positive_int, default=5,
                        help="timed training steps")
    names = [name for label, block, _ in table3_methods(1) for name in (label, block)]
    parser.add_argument("--methods", nargs="+", choices=names,
                        help="a subset, by label or block name")
    parser.add_argument("--jit-compile", action="store_true", help="compile with XLA")
    parser.add_argument("--peak-sizes", type=positive_int, nargs="+", default=[1024, 2048, 4096],
                        help="square matmul sizes whose best fp32 throughput is the roofline's "
                             "peak (default 1024 2048 4096)")
    parser.add_argument("--json", type=output_path,
                        help="write the rows as a JSON list to this path")
