"""PSF-Attn vs Transformer: training-step time and peak memory versus sequence length.

The two Adding-task models of ``sequence.train`` (:func:`kctx.models.sequence.psf_sequence_model`
and the Transformer of the same width), each profiled in its own fresh
process (:func:`kctx.profile.profile_layer`, one training step: forward,
gradients of every weight and of the input) at lengths 2⁸ … 2¹⁴. PSF-Attn
grows as n·log²n; the Transformer's attention scores as n², so it runs out of
memory first: a length whose estimated score memory exceeds ``--memory-limit-gb``
is reported as skipped instead of being run.
"""

from kctx.arguments import output_path, positive_float, positive_int
from kctx.bench import macs_source, memory_measure, report
from kctx.profile import profile_layer


def transformer_score_gb(length, batch, num_heads=1):
    """Scores, softmax and their gradient: three float32 (batch, heads, n, n) tensors."""
    return 3 * batch * num_heads * length * length * 4 / 2**30


def run_psf(lengths=tuple(2 ** k for k in range(8, 15)), batch=4, embed_dim=32, repeats=3,
            memory_limit_gb=16.0, log=print):
    from kctx.models.sequence import psf_sequence_model, transformer_sequence_model

    rows = []
    for length in lengths:
        for label, build in (("PSF-Attn", psf_sequence_model),
                             ("Transformer", transformer_sequence_model)):
            row = {"model": label, "length": length, "batch": batch}
            if label == "Transformer" and transformer_score_gb(length, batch) > memory_limit_gb:
                row["skipped"] = (f"attention scores need ≈{transformer_score_gb(length, batch):.0f}"
                                  f" GB > {memory_limit_gb:g} GB")
                rows.append(row)
                continue
            model = build(length, input_dim=2, outputs=1, embed_dim=embed_dim)
            log(f"profiling {label} at length {length} ...")
            try:
                result = profile_layer(model, (batch, length, 2), modes=("train",),
                                       repeats=repeats, warmup=1)
            except RuntimeError as error:  # e.g. killed for memory
                row["skipped"] = f"failed: {str(error).splitlines()[0][:120]}"
            else:
                row.update(params=result["params"], train_ms=result["train_ms"],
                           train_mem_mb=result["train_mem_mb"], train_macs=result["train_macs"],
                           memory_source=result["memory_source"], backend=result["backend"])
            rows.append(row)
    return rows


def format_table(rows):
    header = (f"{'Length':>7} {'Model':<12} {'Params':>10} {'Step ms':>10} {'Memory MB':>10} "
              f"{'GMACs':>8}")
    lines = [header, "-" * len(header)]
    for r in rows:
        if "skipped" in r:
            lines.append(f"{r['length']:>7} {r['model']:<12} {'':>10} {r['skipped']}")
            continue
        lines.append(f"{r['length']:>7} {r['model']:<12} {r['params']:>10,} {r['train_ms']:>10.1f} "
                     f"{r['train_mem_mb']:>10.1f} {r['train_macs'] / 1e9:>8.2f}")
    lines.append("")
    lines.append(f"One training step (batch in the JSON), median time; memory: "
                 f"{memory_measure(rows)}; MACs of forward + gradients from {macs_source(rows)}.")
    return "\n".join(lines)


def main(args):
    rows = run_psf(lengths=args.lengths, batch=args.batch, embed_dim=args.embed_dim,
                   repeats=args.repeats, memory_limit_gb=args.memory_limit_gb)
    return report(rows, format_table(rows), args.json)


def add_arguments(parser):
    parser.add_argument("--lengths", type=positive_int, nargs="+",
                        default=[2 ** k for k in range(8, 15)])
    parser.add_argument("--batch", type=positive_int, default=4)
    parser.add_argument("--embed-dim", type=positive_int, default=32)
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed training steps")
    parser.add_argument("--memory-limit-gb", type=positive_float, default=16.0,
                        help="skip Transformer lengths whose attention scores need more")
    parser.add_argument("--json", type=output_path,
                        help="write the rows as a JSON list to this path")
