"""The table of results/keras_conv_fix_cpu/run.sh's JSON: each measurement's median ms,
Keras' convolution as released against kctx's fix, round by round."""

import json
import pathlib

HERE = pathlib.Path(__file__).parent


def median_ms(name):
    data = json.loads((HERE / name).read_text())
    if isinstance(data, list):  # gan.bench: a row per context block
        return " / ".join(f"{row['context']} {row['step_ms']:.1f}" for row in data)
    if "cells" in data:  # kctx.bench.segnext_gpu
        return f"{data['cells']['1']['median_ms']:.1f}"
    return f"{data['step_ms']:.1f}"  # segmentation.bench --train-step


rows = [("SegNeXt-T call, 512x512, batch 1", "segnext_t_call"),
        ("SegNeXt-T training step, batch 2 of 128x128", "segnext_t_train_step"),
        ("HamGAN 128x128 training step (D, G), batch 4", "hamgan_train_step")]
rounds = sorted({path.stem.rsplit("_", 1)[1] for path in HERE.glob("*_fixed_*.json")})
print(f"{'ms (median)':46} {'round':>5}  {'Keras as released':>28}  {'with the fix':>28}")
for title, stem in rows:
    for r in rounds:
        cells = [median_ms(f"{stem}_{form}_{r}.json") if (HERE / f"{stem}_{form}_{r}.json")
                 .exists() else "-" for form in ("released", "fixed")]
        if cells != ["-", "-"]:
            print(f"{title:46} {r:>5}  {cells[0]:>28}  {cells[1]:>28}")
