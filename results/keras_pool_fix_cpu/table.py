"""The table of results/keras_pool_fix_cpu/run.sh's JSON: Keras' pooling as released against
kctx's fix, round by round."""

import json
import pathlib

HERE = pathlib.Path(__file__).parent


def cell(name):
    data = json.loads((HERE / name).read_text())
    if isinstance(data, list) and "context" in data[0]:  # gan.bench: a row per context block
        return " / ".join(f"{row['context']} {row['step_ms']:.0f}" for row in data)
    if isinstance(data, list):  # kctx.bench runtimes: a row per batch size
        return " / ".join(f"{row['median_ms']:.1f}"
                          for row in sorted(data, key=lambda row: row["batch"]))
    return f"{1000 * data['rows'][0]['seconds_per_image']:.1f}"  # kctx.bench fid


rows = [("FID Inception features, ms per image (batch 32)", "fid_torch"),
        ("KANet_KV 224x224 call, median ms (batch 1 / 8)", "kanet_kv_torch"),
        ("HamGAN 128x128 training step (D, G), batch 4, ms", "hamgan_train_step")]
rounds = sorted({path.stem.rsplit("_", 1)[1] for path in HERE.glob("*_fixed_*.json")})
print(f"{'PyTorch, eager':50} {'round':>5}  {'Keras as released':>24}  {'with the fix':>24}")
for title, stem in rows:
    for r in rounds:
        cells = [cell(f"{stem}_{form}_{r}.json") if (HERE / f"{stem}_{form}_{r}.json").exists()
                 else "-" for form in ("released", "fixed")]
        if cells != ["-", "-"]:
            print(f"{title:50} {r:>5}  {cells[0]:>24}  {cells[1]:>24}")
