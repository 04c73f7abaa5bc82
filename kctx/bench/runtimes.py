"""Inference latency of the same models in ten CPU runtimes, one table.

Rows: the Ham (NMF) layer at 128×128×512 (r = 64, K = 6: Table 3's setting), KANet_KV
at 224×224 and SegNeXt-T at 512×512, at batch 1 and 8 (a workflow puts its own models beside
them through ``main(args, models)``); columns (:data:`kctx.profile.RUNTIMES`): Keras on
TensorFlow, with XLA, on JAX (jit) and on PyTorch; :func:`kctx.export.inference_function` on
JAX (the weights as constants), as PyTorch's exported program and compiled by
``torch.compile``; the model exported to ONNX Runtime, LiteRT float32 and LiteRT int8. Each cell is the median of
``--repeats`` calls after ``--warmup`` in a fresh process
(:func:`kctx.profile.runtime_latency`), random weights and inputs.
"""

from kctx.arguments import output_path, positive_int
from kctx.bench import report
from kctx.profile import RUNTIME_NAMES, RUNTIMES, runtime_latency

# {key: (title, spec)}: a spec names a kctx layer ("block") or a builder "module:function"
# run in the measuring process (kctx.profile.runtime_latency).
MODELS = {
    "ham": ("Ham (NMF) 128×128×512, r=64, K=6",
            {"block": "ham_nmf", "kwargs": {"rank": 64, "steps": 6, "seed": 0},
             "input_shape": [128, 128, 512]}),
    "kanet_kv": ("KANet_KV 224×224",
                 {"builder": "kctx.models:kanet",
                  "kwargs": {"variant": "kv", "input_shape": [224, 224, 3]}}),
    "segnext_t": ("SegNeXt-T 512×512 (150 classes)",
                  {"builder": "kctx.models:segnext",
                   "kwargs": {"variant": "t", "input_shape": [512, 512, 3]}}),
}


def run_runtimes(models=MODELS, runtimes=RUNTIMES, batches=(1, 8), repeats=10,
                 warmup=3, threads=None, log=print):
    """One row per (model, batch, runtime) of ``models`` ({key: (title, spec)})."""
    rows = []
    for model, (title, spec) in models.items():
        for batch in batches:
            for runtime in runtimes:
                row = {"model": model, "title": title, "batch": batch, "runtime": runtime}
                try:
                    row.update(runtime_latency(spec, runtime, batch, repeats, warmup, threads))
                    log(f"{title}, batch {batch}, {RUNTIME_NAMES[runtime]}: "
                        f"{row['median_ms']:.1f} ms")
                except RuntimeError as error:  # the runtime cannot run it: say so, go on
                    row["error"] = str(error).strip().splitlines()[-1][:300]
                    log(f"{title}, batch {batch}, {RUNTIME_NAMES[runtime]}: failed: {row['error']}")
                rows.append(row)
    return rows


def format_table(rows):
    runtimes = [r for r in RUNTIMES if any(row["runtime"] == r for row in rows)]
    header = f"{'Model':<34} {'Batch':>5} " + " ".join(f"{RUNTIME_NAMES[r]:>13}" for r in runtimes)
    lines = [header, "-" * len(header)]
    keys = []
    for row in rows:
        if (row["model"], row["batch"]) not in keys:
            keys.append((row["model"], row["batch"]))
    for model, batch in keys:
        cells = {row["runtime"]: row for row in rows
                 if row["model"] == model and row["batch"] == batch}
        title = cells[next(iter(cells))]["title"]
        text = []
        for runtime in runtimes:
            cell = cells.get(runtime)
            text.append(f"{'—' if cell is None else 'failed' if 'error' in cell else format(cell['median_ms'], '.1f'):>13}")
        lines.append(f"{title:<34} {batch:>5} " + " ".join(text))
    threads = {row.get("threads") for row in rows if "threads" in row}
    lines.append("")
    lines.append("Median ms per call, each cell in a fresh process; ONNX Runtime and LiteRT on "
                 f"{', '.join(map(str, sorted(threads)))} thread(s), TensorFlow, JAX and PyTorch on "
                 "their defaults (every core).")
    return "\n".join(lines)


def main(args, models=MODELS):
    rows = run_runtimes({key: models[key] for key in args.models}, tuple(args.runtimes),
                        tuple(args.batches), args.repeats, args.warmup, args.threads)
    return report(rows, format_table(rows), args.json)


def add_arguments(parser, models=MODELS):
    parser.add_argument("--models", nargs="+", default=list(models), choices=list(models))
    parser.add_argument("--runtimes", nargs="+", default=list(RUNTIMES), choices=list(RUNTIMES))
    parser.add_argument("--batches", nargs="+", type=positive_int, default=[1, 8])
    parser.add_argument("--repeats", type=positive_int, default=10, help="timed calls per cell")
    parser.add_argument("--warmup", type=positive_int, default=3, help="untimed calls first")
    parser.add_argument("--threads", type=positive_int,
                        help="ONNX Runtime / LiteRT threads (default: every core)")
    parser.add_argument("--json", type=output_path,
                        help="write the rows as a JSON list to this path")
