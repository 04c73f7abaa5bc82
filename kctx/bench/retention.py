"""Memory a process keeps per model it builds and fits: a sweep of many models in one process.

Each row builds ``models`` small functional models (a 1×1 convolution, then the
context block) one after another in a fresh process, fits each for one step
and deletes it (optionally calling ``keras.backend.clear_session()``); the
resident memory after model 10 and after the last gives the memory kept per
model. TensorFlow's runtime keeps state for every traced training function,
and a block with a larger graph (the hams unroll their K steps) keeps more:
long sweeps belong in one process per run, as ``studies`` and the workflow
tests do.
"""

import concurrent.futures
import multiprocessing

from kctx.bench import output_path, positive_int, report
from kctx.profile.layer_profile import _status_mb

SHAPE = (8, 16, 16, 32)
FIRST = 10  # models before the first reading (imports, first traces)


def measure(block, models, clear_session):
    """One row, in this process: RSS after model ``FIRST`` and after the last (MB)."""
    import gc

    import keras
    import numpy as np

    from kctx.layers import context_block

    x = np.random.default_rng(0).uniform(size=SHAPE).astype("float32")
    readings = {}
    for index in range(models):
        inputs = keras.Input(SHAPE[1:])
        hidden = keras.layers.Conv2D(SHAPE[-1], 1)(inputs)
        if block != "conv":
            hidden = context_block(block)(hidden)
        model = keras.Model(inputs, hidden)
        model.compile(optimizer="adam", loss="mse")
        model.fit(x, x, epochs=1, batch_size=SHAPE[0], verbose=0)
        del model
        if clear_session:
            keras.backend.clear_session()
        gc.collect()
        if index + 1 in (FIRST, models):
            readings[index + 1] = _status_mb("VmRSS")
    kept = (readings[models] - readings[FIRST]) / (models - FIRST)
    return {"block": block, "clear_session": clear_session, "models": models,
            "rss_mb_after_10": round(readings[FIRST], 1),
            "rss_mb_after_last": round(readings[models], 1), "kept_mb_per_model": round(kept, 2)}


def run_retention(blocks=("conv", "ham_nmf", "self_attention"), models=60,
                  clear_session=(False, True), log=print):
    if models <= FIRST:
        raise ValueError(f"`models` must be more than {FIRST}. Received: models={models}")
    rows = []
    context = multiprocessing.get_context("spawn")
    for block in blocks:
        for clear in clear_session:
            with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as fresh:
                row = fresh.submit(measure, block, models, clear).result()
            log(f"{block} (clear_session={clear}): {row['kept_mb_per_model']} MB per model")
            rows.append(row)
    return rows


def format_table(rows):
    header = f"{'Block':<16} {'clear_session':>13} {'RSS@10':>9} {'RSS@last':>9} {'MB/model':>9}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['block']:<16} {str(r['clear_session']):>13} {r['rss_mb_after_10']:>9.0f} "
                     f"{r['rss_mb_after_last']:>9.0f} {r['kept_mb_per_model']:>9.2f}")
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
                        help=f"models per process (more than {FIRST})")
    parser.add_argument("--json", type=output_path,
                        help="write the rows as a JSON list to this path")
