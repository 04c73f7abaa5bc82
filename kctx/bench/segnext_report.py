"""The SegNeXt benchmark's report: its rows as text tables, with the notes that say
how each number was taken."""

import statistics
import textwrap

from kctx.bench.segnext_layer_profile import LAYER_KINDS
from kctx.bench.segnext_run import GOAL, NOT_RUN, RUNTIME_NAMES, RUNTIMES


def _ms(cell):
    if cell is None:
        return "—"
    if "error" in cell:
        return "failed"
    if cell.get("status") == NOT_RUN:
        return NOT_RUN
    return format(cell["median_ms"], ".1f")


def _g(value):
    return "—" if value is None else format(value / 1e9, ".2f")


def _paper(paper, key):
    return format(paper[key], ".1f") if key in paper else "—"


def _notes(*paragraphs):
    return [textwrap.fill(text, 100) for text in paragraphs]


def format_table(rows):
    """The rows of :func:`kctx.bench.segnext_run.run_segnext` as a table with its notes:
    parameters and MACs beside the paper's and the official model's, the latency of each
    runtime, kctx's best over the official time."""
    runtimes = [r for r in RUNTIMES if any(r in row["runtimes"] for row in rows)]
    header = (f"{'Model':<9} {'Params M':>8} {'paper':>5} | {'GMACs':>6} {'off.':>6} "
              f"{'fvcore':>6} {'paper':>5} | "
              + " ".join(f"{RUNTIME_NAMES[r]:>12}" for r in runtimes)
              + f" {RUNTIME_NAMES['official']:>12} | {'best/off.':>9}")
    lines = [header, "-" * len(header)]
    for row in rows:
        paper = row.get("paper", {})
        official = row["official"]
        ratio = "—" if row["ratio"] is None else \
            f"{row['ratio']:.2f}{'' if row['meets_goal'] else ' !'}"
        lines.append(
            f"{'SegNeXt-' + row['variant'].upper():<9} {row['params'] / 1e6:>8.2f} "
            f"{_paper(paper, 'params_m'):>5} | {_g(row['macs']):>6} "
            f"{_g(official.get('macs_flop_counter')):>6} {_g(official.get('macs_fvcore')):>6} "
            f"{_paper(paper, 'gflops'):>5} | "
            + " ".join(f"{_ms(row['runtimes'].get(r)):>12}" for r in runtimes)
            + f" {_ms(official):>12} | {ratio:>9}")
    lines.append("")
    size = rows[0]["size"] if rows else 512
    cells = [c for row in rows for c in [*row["runtimes"].values(), row["official"]]
             if "median_ms" in c]
    threads = sorted({c["threads"] for c in cells if "threads" in c})
    repeats = sorted({len(c["times_ms"]) for c in cells if "times_ms" in c})
    others = [c["others_cpu_pct"] for c in cells if c.get("others_cpu_pct") is not None]
    notes = [
        f"Latency: batch 1, {size}×{size} RGB 0–255 → logits at {size}×{size}, median ms of "
        f"{'/'.join(map(str, repeats)) or '—'} calls after warm-up, each cell in a fresh "
        f"process on {'/'.join(map(str, threads)) or '—'} thread(s) (TensorFlow: intra-op, "
        "1 inter-op; ONNX Runtime, LiteRT: num_threads; PyTorch: set_num_threads). "
        "Keras-TF: model.predict_on_batch (compiled tf.function; XLA: jit_compile=True); "
        "ONNX Runtime, LiteRT: kctx.export's float32 artifacts. Official PT: mmseg 1.2.2 "
        "encode_decode with the normalisation, eval, no_grad ('not run' without "
        "--official-python)."]
    if others:
        notes.append(f"Load: other processes used at most {max(others):.1f}% of the CPU "
                     "(all cores) while a cell was timed (median "
                     f"{statistics.median(others):.1f}%).")
    notes += [
        "Params: trainable (= PyTorch's parameters(); Keras' count_params() adds "
        "BatchNorm's moving statistics). GMACs: kctx's profiler on the traced graph (Conv2D, "
        "depthwise convs, MatMul/Einsum: the Hamburger's breads and NMF; no resizes, norms "
        "or element-wise ops). off.: the official model under FlopCounterMode (FLOPs / 2: "
        "convs incl. depthwise, bmm), the same op classes. fvcore: mmengine's fvcore rules "
        "on the official model, which add the norms and 4 per bilinear-upsampled element: "
        "the paper's convention. kctx applies the upper bread to the NMF's factors, "
        "(W·D)·C instead of W·(D·C), which saves d²·(n − r) MACs (n positions, d "
        "channels, r atoms), and reuses x·D₀ between the code initialisation and the first "
        "update: it counts fewer MACs than the "
        "official model for the same output.",
        f"best/off.: kctx's fastest runtime / official (goal ≤ {GOAL}; '!': missed)."]
    lines += _notes(*notes)
    return "\n".join(lines)


def format_layer_profile(rows):
    """Per variant, ms per call of each layer kind: Keras-TF and the official model."""
    lines = []
    for row in rows:
        profile = row.get("layer_profile")
        if not profile:
            continue
        keras_side = (profile.get("keras") or {}).get("layer_ms", {})
        official = (profile.get("official") or {}).get("layer_ms", {})
        header = (f"SegNeXt-{row['variant'].upper()} layer profile {'':<23} "
                  f"{'Keras-TF ms':>11} {'Official ms':>11} {'ratio':>6}")
        lines += ["", header, "-" * len(header)]
        kinds = [k for k in LAYER_KINDS if k in keras_side or k in official]
        for kind in kinds:
            ours, theirs = keras_side.get(kind), official.get(kind)
            ratio = f"{ours / theirs:.2f}" if ours and theirs and theirs > 0.05 else "—"
            lines.append(f"{kind:<49} {_num(ours):>11} {_num(theirs):>11} {ratio:>6}")
        ours_total = (profile.get("keras") or {}).get("call_ms")
        theirs_total = (profile.get("official") or {}).get("call_ms")
        ratio = f"{ours_total / theirs_total:.2f}" if ours_total and theirs_total else "—"
        lines.append(f"{'call (profiled)':<49} {_num(ours_total):>11} {_num(theirs_total):>11} "
                     f"{ratio:>6}")
    if lines:
        lines += [""] + _notes(
            "Layer profile: ms per call. Keras-TF: TensorFlow's profiler on predict_on_batch, "
            "each op given to the innermost layer whose name scope holds it (fused ops to "
            "the layer of their last op); 'outside the layers' is the rest of the call "
            "(executor, the logits' copy to NumPy). Official: forward hooks on every module "
            "(a container's own time is its element-wise / layout work); what no module "
            "runs is the final resize. Both profiled calls are slower than the timed ones.")
    return "\n".join(lines)


def _num(value):
    return "—" if value is None else f"{value:.1f}"
