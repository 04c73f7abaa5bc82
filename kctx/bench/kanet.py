"""Tables 2–4 of Kronecker Attention Networks: parameters and MAdds of the KANet family.

Every model is built at 224×224×3 with 1,000 classes and its multiply-adds are
counted from the traced inference graph (convolutions, depthwise
convolutions, matrix products, einsums; one image).
"""

import keras

from kctx.arguments import output_path, positive_int
from kctx.bench import report
from kctx.models import KANET_FAMILY, kanet_family_model
from kctx.profile import count_macs

# (params in millions, MAdd in millions) reported by the paper.
PAPER = {
    "MobileNetV2": (3.47, 300), "KANet_KV": (3.44, 288), "KANet_QKV": (3.44, 281),
    "AttnNet": (3.44, 365), "AttnNet+Pool": (3.44, 300), "MobileNetV2+KAO": (3.46, 298),
    "KANet w/o KAO": (3.46, 298),
}


def run_kanet(size=224, num_classes=1000, models=None, log=print):
    """A row per model of ``models`` (keys of ``KANET_FAMILY``; default all of them, in the
    tables' order): its label, parameters and MAdds, and at 224² with 1,000 classes the
    paper's numbers."""
    unknown = sorted(set(models or ()) - set(KANET_FAMILY))
    if unknown:
        raise ValueError(f"models must be keys of KANET_FAMILY ({', '.join(KANET_FAMILY)}). "
                         f"Received: models={list(models)}")
    rows = []
    for name, (label, _, _) in KANET_FAMILY.items():
        if models is not None and name not in models:
            continue
        keras.backend.clear_session()
        model = kanet_family_model(name, num_classes=num_classes, input_shape=(size, size, 3))
        macs = count_macs(lambda x: model(x, training=False), (1, size, size, 3))
        row = {"model": label, "params": int(model.count_params()), "madds": int(macs)}
        if (size, num_classes) == (224, 1000):
            row["paper"] = {"params_m": PAPER[label][0], "madds_m": PAPER[label][1]}
        log(f"{label}: {row['params']:,} params, {row['madds'] / 1e6:.1f}M MAdds")
        rows.append(row)
    return rows


def format_table(rows):
    header = f"{'Model':<17} {'Params':>11} {'MAdd':>9} | {'paper params':>12} {'paper MAdd':>10}"
    lines = [header, "-" * len(header)]
    for r in rows:
        paper = r.get("paper", {})
        lines.append(
            f"{r['model']:<17} {r['params']:>11,d} {r['madds'] / 1e6:>8.1f}M | "
            f"{paper.get('params_m', float('nan')):>11.2f}M {paper.get('madds_m', float('nan')):>9.0f}M")
    lines.append("")
    lines.append("MAdds of one image from the traced graph (convolutions and matrix products). "
                 "The paper's MobileNetV2 count (3.47M) differs from Keras' (3,538,984), which "
                 "ours equals.")
    return "\n".join(lines)


def main(args):
    rows = run_kanet(size=args.size, num_classes=args.num_classes, models=args.models)
    return report(rows, format_table(rows), args.json)


def add_arguments(parser):
    parser.add_argument("--size", type=positive_int, default=224)
    parser.add_argument("--num-classes", type=positive_int, default=1000)
    parser.add_argument("--models", nargs="+", choices=list(KANET_FAMILY),
                        help="count these models only (default: all seven)")
    parser.add_argument("--json", type=output_path,
                        help="write the rows as a JSON list to this path")
