"""The table of results/keras_tree_fix_cpu/run.sh's JSON: Keras' tree functions on PyTorch
as released, with kctx's cycle fix (007cb53), and with its short cut, round by round."""

import json
import pathlib

HERE = pathlib.Path(__file__).parent
FORMS = ("released", "cycle", "shortcut")
ROWS = [("SegNeXt-T call, 64x64, batch 1, median ms", "segnext_t_64"),
        ("SegNeXt-T call, 512x512, batch 1, median ms", "segnext_t_512"),
        ("SegNeXt-T training step, batch 2 of 128x128, median ms", "segnext_t_train")]


def milliseconds(path):
    data = json.loads(path.read_text())
    return data["step_ms"] if "step_ms" in data else data["cells"]["1"]["median_ms"]


print(f"{'PyTorch, eager':56} {'round':>5}" + "".join(f"{form:>10}" for form in FORMS))
for title, stem in ROWS:
    for path in sorted(HERE.glob(f"{stem}_shortcut_*.json")):
        r = path.stem.rsplit("_", 1)[1]
        cells = [HERE / f"{stem}_{form}_{r}.json" for form in FORMS]
        print(f"{title:56} {r:>5}" + "".join(
            f"{milliseconds(cell):10.1f}" if cell.exists() else f"{'-':>10}" for cell in cells))
