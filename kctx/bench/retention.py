"""Memory a process keeps per model it builds and fits: a sweep of many models in one process.

Each row builds ``models`` small functional models (a 1×1 convolution, then the
context block) one after another in a fresh process, fits each for one step
and deletes it (optionally calling ``keras.backend.clear_session()``); the
resident memory after model 10 and after the last gives the memory kept per
model (:func:`kctx.profile.memory_kept_per_model`). TensorFlow's runtime keeps
state for every traced training function, and a block with a larger graph (the
hams unroll their K steps) keeps more: long sweeps belong in one process per
run, as ``studies`` and the workflow tests do.
"""

from kctx.arguments import output_path, positive_int
from kctx.bench import report
from kctx.profile import memory_kept_per_model

SHAPE = (8, 16, 16, 32)


def run_retention(blocks=("conv", "ham_nmf", "self_attention"), models=60,
                  clear_session=(False, True), log=print):
    rows = []
    for block in blocks:
        for clear in clear_session:
            row = {"block": block, "clear_session": clear, "models": models,
                   **memory_kept_per_model(block, models, SHAPE, clear_session=clear)}
            log(f"{block} (clear_session={clear}): {row['kept_mb_per_model']} MB per model")
            rows.append(row)
    return rows


def format_table(rows):
    header = f"{'Block':<16} {'clear_session':>13} {'RSS@10':>9} {'RSS@last':>9} {'MB/model':>9}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['block']:<16} {str(r['clear_session']):>13} "
                     f"{r['rss_mb_after_first']:>9.0f} {r['rss_mb_after_last']:>9.0f} "
                     f"{r['kept_mb_per_model']:>9.2f}")
    lines.append("")
    lines.append(f"Each row in a fresh process: build, compile (Adam), fit one step of batch "
                 f"{SHAPE[0]} at {SHAPE[1]}×{SHAPE[2]}×{SHAPE[3]}, delete; RSS in MB.")
    return "\n".join(lines)


def main(args):
    rows = run_retention(tuple(args.blocks), args.models)
    return report(rows, format_table(rows), args.json)


def add_arguments(parser):
    from kctx.layers import context_block_names

    parser.add_argument("--blocks", nargs="+", default=["conv", "ham_nmf", "self_attention"],
                        choices=["conv", *context_block_names()],
                        help="context block names, or conv for none")
    parser.add_argument("--models", type=positive_int, default=60,
                        help="models per process (more than 10)")
    parser.add_argument("--json", type=output_path,
                        help="write the rows as a JSON list to this path")
