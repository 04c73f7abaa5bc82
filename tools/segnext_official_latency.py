"""Latency, parameters and MACs of the official SegNeXt (mmsegmentation 1.2.2) on CPU.

Run it with a Python that has PyTorch, mmengine, mmcv(-lite) and mmsegmentation (kctx
itself never imports torch; ``python -m kctx.bench segnext --official-python PYTHON``
runs this script in a subprocess, one variant per process, and reads its result):

    PYTHON tools/segnext_official_latency.py --variant t --size 512 --repeats 5 --threads 2

The model is built from mmseg's shipped ADE20K config
``configs/segnext/segnext_mscan-{t,s,b,l}_1xb16-adamw-160k_ade20k-512x512.py`` with
BatchNorm instead of SyncBN and no checkpoint (random weights: latency does not depend
on their values), in eval mode under ``torch.no_grad()`` with ``torch.set_num_threads``.
One timed call is the whole-image inference that kctx's ``segnext`` model holds:
normalisation of an RGB 0–255 image (the data preprocessor's mean / std), zero padding
to a multiple of 32 when the size needs it, ``EncoderDecoder.encode_decode`` (backbone,
LightHamHead, logits resized bilinearly to the padded size) and the crop. Median of
``--repeats`` calls after ``--warmup``.

After the timing, the MACs of the same call are counted twice:

* ``torch.utils.flop_counter.FlopCounterMode`` (its FLOPs / 2): convolutions (depthwise
  included) and matmuls (the NMF's ``bmm``) only — the ops kctx's profiler counts;
* mmengine's fvcore rules (``mmengine.analysis.FlopAnalyzer``, which reports MACs): the
  same plus BatchNorm / GroupNorm / LayerNorm (1–2 per element) and bilinear
  upsampling (4 per output element, the final 512×512×150 resize included) — the
  convention of the paper's 6.6 / 15.9 / 34.9 / 70.0 G (see ``fvcore_by_operator``).

``--layer-profile`` also times each layer kind (forward hooks on every module, after the
timed calls; the kinds are ``kctx.bench.segnext.LAYER_KINDS``).

Prints one line ``SEGNEXT_OFFICIAL_RESULT {json}`` (and writes the JSON to ``--json``).
mmcv-lite has no compiled ops; ``mmcv._ext`` is stubbed (SegNeXt uses none of them).
"""

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

# kctx.bench's CPU-load measurement and layer kinds, loaded by path: this environment has
# no Keras, which importing the kctx package would need.
_spec = importlib.util.spec_from_file_location(
    "standalone", Path(__file__).resolve().parents[1] / "kctx" / "bench" / "standalone.py")
_standalone = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_standalone)
cpu_jiffies, other_load = _standalone.cpu_jiffies, _standalone.other_load
depthwise_kind = _standalone.depthwise_kind
(CONV_1X1, CONV_3X3, ELEMENTWISE, LAYOUT, HEAD_RESIZE, HEAD_CONV, HEAD_NORM, HAMBURGER,
 UPSAMPLE, OVERHEAD) = (getattr(_standalone, name) for name in (
    "CONV_1X1", "CONV_3X3", "ELEMENTWISE", "LAYOUT", "HEAD_RESIZE", "HEAD_CONV", "HEAD_NORM",
    "HAMBURGER", "UPSAMPLE", "OVERHEAD"))

RESULT_MARKER = "SEGNEXT_OFFICIAL_RESULT "
CONFIG = "segnext_mscan-{}_1xb16-adamw-160k_ade20k-512x512.py"
MEAN = (123.675, 116.28, 103.53)
STD = (58.395, 57.12, 57.375)
SIZE_DIVISOR = 32


def module_kind(name, module):
    """The layer kind of a module of the official segmentor, by its name and type. A
    container module's own time (outside its children) is the element-wise work or the
    layout changes its ``forward`` does itself."""
    import torch.nn as nn

    kind = type(module).__name__
    head = name.startswith("decode_head")
    if name.startswith("decode_head.hamburger"):
        return HAMBURGER
    if isinstance(module, nn.Conv2d):
        if module.groups > 1 and module.groups == module.in_channels:
            return depthwise_kind(*module.kernel_size)
        if head:
            return HEAD_CONV
        return CONV_1X1 if tuple(module.kernel_size) == (1, 1) else CONV_3X3
    if isinstance(module, (nn.GroupNorm, nn.ReLU)) and head:
        return HEAD_NORM
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return "BatchNorm"
    if isinstance(module, nn.LayerNorm):
        return "LayerNorm"
    if isinstance(module, nn.GELU):
        return "GELU"
    if kind in ("MSCAAttention", "MSCASpatialAttention", "MSCABlock", "Mlp", "DropPath",
                "Dropout", "Dropout2d", "Identity"):
        return ELEMENTWISE  # clones, the branch sum, the gate, layer scales, residuals
    if kind in ("MSCAN", "OverlapPatchEmbed", "StemConv", "Sequential", "ModuleList"):
        return LAYOUT  # flatten / transpose / reshape / permute().contiguous()
    if kind == "LightHamHead":
        return HEAD_RESIZE
    if kind == "ConvModule" and head:
        return HEAD_CONV
    return "other"


def build(variant, num_classes):
    from official_mmseg import install_mmcv_ext_stub  # beside this script

    install_mmcv_ext_stub()
    import mmseg
    from mmengine.config import Config
    from mmseg.registry import MODELS
    from mmseg.utils import register_all_modules

    register_all_modules()
    folder = os.path.join(os.path.dirname(mmseg.__file__), ".mim", "configs", "segnext")
    config = Config.fromfile(os.path.join(folder, CONFIG.format(variant)))
    config.model.backbone.norm_cfg = dict(type="BN", requires_grad=True)  # not SyncBN
    config.model.backbone.pop("init_cfg", None)  # no download: random weights
    config.model.decode_head.num_classes = num_classes
    return MODELS.build(config.model).eval(), config


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=("t", "s", "b", "l"), default="t")
    parser.add_argument("--size", type=int, default=512, help="height = width")
    parser.add_argument("--num-classes", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--no-macs", action="store_true", help="skip the MAC counts")
    parser.add_argument("--layer-profile", action="store_true",
                        help="also time each layer kind (forward hooks), after the rest")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")

    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, _ = build(args.variant, args.num_classes)
    params = sum(p.numel() for p in model.parameters())
    size = args.size
    padded = -(-size // SIZE_DIVISOR) * SIZE_DIVISOR
    metas = [dict(img_shape=(padded, padded), pad_shape=(padded, padded),
                  ori_shape=(size, size))]
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    rng = np.random.default_rng(0)
    image = torch.from_numpy(rng.uniform(0, 255, (1, 3, size, size)).astype("float32"))

    def infer(x):
        x = (x - mean) / std
        if padded != size:
            x = F.pad(x, (0, padded - size, 0, padded - size))
        logits = model.encode_decode(x, metas)
        return logits[:, :, :size, :size]

    with torch.no_grad():
        start = time.perf_counter()
        output = infer(image)
        first_ms = (time.perf_counter() - start) * 1e3
        for _ in range(args.warmup):
            infer(image)
        times = []
        before = cpu_jiffies()
        load_before = os.getloadavg()
        for _ in range(args.repeats):
            start = time.perf_counter()
            infer(image)
            times.append((time.perf_counter() - start) * 1e3)
        after = cpu_jiffies()
    result = {
        "variant": args.variant, "size": size, "num_classes": args.num_classes,
        "output_shape": list(output.shape), "params": int(params),
        "median_ms": round(statistics.median(times), 3), "min_ms": round(min(times), 3),
        "times_ms": [round(t, 3) for t in times], "first_call_ms": round(first_ms, 1),
        "threads": torch.get_num_threads(), "repeats": args.repeats, "warmup": args.warmup,
        "loadavg_before": [round(v, 2) for v in load_before],
        **other_load(before, after),
        "versions": _versions(torch),
        "platform": platform.platform(),
    }
    if args.layer_profile:
        result.update(layer_profile(model, infer, image))
    if not args.no_macs:
        result.update(count_macs(model, infer, image))
    text = json.dumps(result)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    print(RESULT_MARKER + text, flush=True)
    return 0


def layer_profile(model, infer, image, calls=3):
    """Milliseconds per call of each layer kind (:func:`module_kind`): forward hooks on
    every module time it (its own time: its children's excluded); what no module runs
    (the final resize, the input normalisation) is :data:`UPSAMPLE`."""
    import torch

    stack, totals, top = [], {}, [0.0]
    kinds = {module: module_kind(name, module) for name, module in model.named_modules()
             if module is not model}

    def enter(module, args):
        stack.append([time.perf_counter(), 0.0])

    def leave(module, args, output):
        start, children = stack.pop()
        inclusive = time.perf_counter() - start
        totals[kinds[module]] = totals.get(kinds[module], 0.0) + inclusive - children
        if stack:
            stack[-1][1] += inclusive
        else:
            top[0] += inclusive

    handles = [h for module in kinds for h in (module.register_forward_pre_hook(enter),
                                               module.register_forward_hook(leave))]
    try:
        with torch.no_grad():
            infer(image)
            totals.clear()
            top[0] = 0.0
            start = time.perf_counter()
            for _ in range(calls):
                infer(image)
            call_ms = (time.perf_counter() - start) * 1e3 / calls
    finally:
        for handle in handles:
            handle.remove()
    layer_ms = {kind: seconds * 1e3 / calls for kind, seconds in totals.items()}
    layer_ms[UPSAMPLE] = layer_ms.get(UPSAMPLE, 0.0) + max(0.0, call_ms - top[0] * 1e3 / calls)
    return {"layer_profile": {"call_ms": round(call_ms, 2),
                              "layer_ms": {k: round(v, 3) for k, v in layer_ms.items()},
                              "calls": calls}}


def count_macs(model, infer, image):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    result = {}
    with torch.no_grad():
        counter = FlopCounterMode(display=False)
        with counter:
            infer(image)
        by_op = {str(op): int(flops) // 2
                 for op, flops in counter.get_flop_counts().get("Global", {}).items()}
        result["macs_flop_counter"] = int(counter.get_total_flops()) // 2
        result["macs_flop_counter_by_op"] = by_op
        try:  # fvcore's rules (mmengine.analysis) on the same call
            from mmengine.analysis import FlopAnalyzer

            class WholeImage(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.segmentor = model

                def forward(self, x):
                    return infer(x)

            analysis = FlopAnalyzer(WholeImage(), (image,))
            analysis.unsupported_ops_warnings(False)
            analysis.uncalled_modules_warnings(False)
            result["macs_fvcore"] = int(analysis.total())
            result["fvcore_by_operator"] = {k: int(v) for k, v in analysis.by_operator().items()}
            result["fvcore_unsupported_ops"] = {k: int(v) for k, v in
                                                analysis.unsupported_ops().items()}
        except Exception as error:  # noqa: BLE001 - optional, reported
            result["macs_fvcore_error"] = f"{type(error).__name__}: {error}"[:300]
    return result


def _versions(torch):
    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("mmseg", "mmcv", "mmengine", "numpy"):
        try:
            versions[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001
            versions[name] = None
    return versions


if __name__ == "__main__":
    sys.exit(main())
