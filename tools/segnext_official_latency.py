"""Latency, parameters and MACs of the official SegNeXt (mmsegmentation 1.2.2), on CPU or GPU.

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

On a GPU (``--device cuda``, what ``python -m kctx.bench segnext-gpu`` runs): every batch
of ``--batches`` is timed (``--batch-repeats`` / ``--batch-warmup`` beyond batch 1), each
call until ``torch.cuda.synchronize()``, with ``torch.backends.cudnn.benchmark = True``
(mmseg's runner sets it); ``--dtype bfloat16`` runs the call under
``torch.autocast("cuda", torch.bfloat16)``. ``--train-step`` times one training step
instead (the config's loss, backward, the config's paramwise AdamW through mmengine's
``build_optim_wrapper``); ``--hamburger`` times the LightHamHead's ``Hamburger`` module
alone at 1×C×H×W (inference and a training step of the mean square of its output).
Launched by :func:`kctx.bench.standalone.run_in_turn`, the process prepares, then waits
for its turn on the device before timing.

Prints one line ``SEGNEXT_OFFICIAL_RESULT {json}`` (and writes the JSON to ``--json``).
mmcv-lite has no compiled ops; ``mmcv._ext`` is stubbed (SegNeXt uses none of them).
"""

import argparse
import importlib.util
import json
import os
import platform
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
time_synced, wait_for_turn = _standalone.time_synced, _standalone.wait_for_turn
cuda_graph, torch_profile = _standalone.cuda_graph, _standalone.torch_profile
torch_census = _standalone.torch_census
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


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=("t", "s", "b", "l"), default="t")
    parser.add_argument("--size", type=int, default=512, help="height = width")
    parser.add_argument("--num-classes", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="bfloat16: under torch.autocast")
    parser.add_argument("--batches", type=int, nargs="+", default=[1],
                        help="batch sizes to time (the first gives the top-level numbers)")
    parser.add_argument("--batch-repeats", type=int, default=None,
                        help="timed calls at batches above 1 (default: --repeats)")
    parser.add_argument("--batch-warmup", type=int, default=None)
    parser.add_argument("--cuda-graph", action="store_true",
                        help="on a GPU, also time each batch's call replayed as a CUDA graph")
    parser.add_argument("--profile", action="store_true",
                        help="also profile each batch's call (torch.profiler: busy GPU time, "
                             "kernels, the top operators)")
    parser.add_argument("--train-step", action="store_true",
                        help="time a training step (loss, backward, AdamW) instead")
    parser.add_argument("--hamburger", type=int, nargs=4, metavar=("B", "C", "H", "W"),
                        help="time the LightHamHead's Hamburger alone at this input instead")
    parser.add_argument("--rank", type=int, default=64, help="r of --hamburger's NMF")
    parser.add_argument("--no-macs", action="store_true", help="skip the MAC counts")
    parser.add_argument("--layer-profile", action="store_true",
                        help="also time each layer kind (forward hooks), after the rest")
    parser.add_argument("--json", help="also write the result here")
    return parser.parse_args(argv)


class Device:
    """Where the model runs, how a call is waited for, and the dtype context."""

    def __init__(self, name, dtype):
        import torch

        self.torch, self.name, self.dtype = torch, name, dtype
        self.cuda = name.startswith("cuda")
        if self.cuda:
            torch.backends.cudnn.benchmark = True  # mmseg's env_cfg

    def synchronize(self, outputs=None):
        if self.cuda:
            self.torch.cuda.synchronize()
        return outputs

    def autocast(self):
        import contextlib

        if self.dtype == "bfloat16":
            return self.torch.autocast(self.name.split(":")[0], dtype=self.torch.bfloat16)
        return contextlib.nullcontext()

    def peak_memory_mb(self):
        if not self.cuda:
            return None
        return round(self.torch.cuda.max_memory_allocated() / 2**20, 1)

    def reset_peak_memory(self):
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()

    def describe(self):
        if not self.cuda:
            return {"platform": "cpu", "device_kind": platform.processor() or "cpu"}
        properties = self.torch.cuda.get_device_properties(0)
        return {"platform": "cuda", "device_kind": properties.name,
                "memory_gb": round(properties.total_memory / 1e9, 1),
                "multiprocessors": properties.multi_processor_count}


def main(argv=None):
    args = parse_args(argv)
    warnings.filterwarnings("ignore")

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = Device(args.device, args.dtype)
    if args.hamburger:
        result = hamburger_cell(args, device)
    elif args.train_step:
        result = train_step_cell(args, device)
    else:
        result = inference_cells(args, device)
    result.update(device=device.describe(), dtype=args.dtype, versions=_versions(torch),
                  platform=platform.platform())
    text = json.dumps(result)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    print(RESULT_MARKER + text, flush=True)
    return 0


def timed_cell(args, device, call, batch):
    """The first call's ms, then :func:`time_synced` (with the CPU load and the device
    allocator's peak) of ``call`` at ``batch``."""
    repeats, warmup = args.repeats, args.warmup
    if batch > 1:
        repeats = args.batch_repeats or repeats
        warmup = args.batch_warmup if args.batch_warmup is not None else warmup
    device.reset_peak_memory()
    start = time.perf_counter()
    device.synchronize(call())
    first_ms = (time.perf_counter() - start) * 1e3
    before, load_before = cpu_jiffies(), os.getloadavg()
    timed = time_synced(call, device.synchronize, repeats, warmup)
    return {"batch": batch, **timed, "first_call_ms": round(first_ms, 1),
            "images_per_s": round(batch * 1e3 / timed["median_ms"], 2),
            "peak_memory_mb": device.peak_memory_mb(),
            "loadavg_before": [round(v, 2) for v in load_before],
            **other_load(before, cpu_jiffies())}


def draw_dictionaries_on_the_gpu():
    """mmseg's NMF draws its random dictionary on the CPU at every call
    (``torch.rand(...).to(device)`` in ``NMF2D._build_bases``), a host-to-device copy that
    CUDA-graph capture refuses. For the graph column only, draw it on the GPU (the same
    uniform distribution, then the same normalisation); the eager column keeps mmseg's
    code as it is."""
    import torch
    import torch.nn.functional as F
    from mmseg.models.decode_heads.ham_head import NMF2D

    def build_bases(self, B, S, D, R, device=None):
        return F.normalize(torch.rand((B * S, D, R), device=device), dim=1)

    NMF2D._build_bases = build_bases


def inference_cells(args, device):
    import numpy as np
    import torch
    import torch.nn.functional as F

    model, _ = build(args.variant, args.num_classes)
    model = model.to(device.name)
    params = sum(p.numel() for p in model.parameters())
    size = args.size
    padded = -(-size // SIZE_DIVISOR) * SIZE_DIVISOR
    metas = [dict(img_shape=(padded, padded), pad_shape=(padded, padded),
                  ori_shape=(size, size))]
    mean = torch.tensor(MEAN, device=device.name).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device.name).view(1, 3, 1, 1)

    def infer(x):
        with device.autocast():
            x = (x - mean) / std
            if padded != size:
                x = F.pad(x, (0, padded - size, 0, padded - size))
            logits = model.encode_decode(x, metas * x.shape[0])
            return logits[:, :, :size, :size]

    images = {}
    for batch in args.batches:
        rng = np.random.default_rng(batch)
        images[batch] = torch.from_numpy(
            rng.uniform(0, 255, (batch, 3, size, size)).astype("float32")).to(device.name)
    wait_for_turn()
    cells = {}
    graphs = {}
    with torch.no_grad():
        for batch in args.batches:
            cells[str(batch)] = timed_cell(args, device, lambda: infer(images[batch]), batch)
            cells[str(batch)]["torch_census"] = torch_census(lambda: infer(images[batch]),
                                                             inputs=[images[batch]])
        if args.cuda_graph and device.cuda:
            draw_dictionaries_on_the_gpu()
            for batch in args.batches:
                try:
                    graphs[str(batch)] = timed_cell(
                        args, device, cuda_graph(lambda: infer(images[batch])), batch)
                except Exception as error:  # noqa: BLE001 - that column says so
                    graphs[str(batch)] = {"error": f"{type(error).__name__}: {error}"[:500]}
        if args.profile:
            profiles = {}
            for batch in args.batches:
                try:
                    profiles[str(batch)] = torch_profile(lambda: infer(images[batch]),
                                                         device.synchronize)
                except Exception as error:  # noqa: BLE001 - a profile is extra
                    profiles[str(batch)] = {"error": f"{type(error).__name__}: {error}"}
        output = infer(images[args.batches[0]])
    first = cells[str(args.batches[0])]
    result = {
        "variant": args.variant, "size": size, "num_classes": args.num_classes,
        "output_shape": list(output.shape), "params": int(params),
        "median_ms": first["median_ms"], "min_ms": first["min_ms"],
        "times_ms": first["times_ms"], "first_call_ms": first["first_call_ms"],
        "threads": torch.get_num_threads(), "repeats": args.repeats, "warmup": args.warmup,
        "loadavg_before": first["loadavg_before"], "others_cpu_pct": first["others_cpu_pct"],
        "steal_pct": first["steal_pct"], "cells": cells,
    }
    if graphs:
        result["cells_graph"] = graphs
    if args.profile:
        result["profiles"] = profiles
    image = images[args.batches[0]]
    if args.layer_profile:
        result.update(layer_profile(model, infer, image))
    if not args.no_macs:
        result.update(count_macs(model, infer, image))
    return result


def train_step_cell(args, device):
    """One training step of the official segmentor at ``--batches[0]``: ``model.loss``
    (the decode head's cross-entropy, labels 255 ignored), backward and the config's
    ``optim_wrapper`` (AdamW with the paramwise options) through mmengine."""
    import numpy as np
    import torch
    from mmengine.optim import build_optim_wrapper
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample

    from mmengine.optim.optimizer import default_constructor

    model, config = build(args.variant, args.num_classes)
    model = model.to(device.name).train()
    # mmengine asks whether mmcv's compiled ops exist (to treat its DCN layers) through
    # pkgutil, which the stand-in mmcv._ext (no __spec__) makes raise: they don't.
    default_constructor.mmcv_full_available = lambda: False
    wrapper = build_optim_wrapper(model, config.optim_wrapper)
    batch, size = args.batches[0], args.size
    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.normal(size=(batch, 3, size, size)).astype("float32")
                              ).to(device.name)
    labels = torch.from_numpy(rng.integers(0, args.num_classes, (batch, 1, size, size))
                              ).to(device.name)
    samples = []
    for i in range(batch):
        sample = SegDataSample(metainfo=dict(img_shape=(size, size), pad_shape=(size, size),
                                             ori_shape=(size, size)))
        sample.gt_sem_seg = PixelData(data=labels[i])
        samples.append(sample)

    def step():
        with device.autocast():
            losses = model.loss(images, samples)
        loss, _ = model.parse_losses(losses)
        wrapper.update_params(loss)
        return loss

    wait_for_turn()
    cell = timed_cell(args, device, step, batch)
    return {"variant": args.variant, "size": size, "num_classes": args.num_classes,
            "train_step": True, "optimizer": str(config.optim_wrapper.get("optimizer")),
            "params": int(sum(p.numel() for p in model.parameters())), "cells": {str(batch): cell},
            **{k: cell[k] for k in ("median_ms", "min_ms", "times_ms", "first_call_ms")}}


def hamburger_cell(args, device):
    """The LightHamHead's ``Hamburger`` module (mmseg) at B×C×H×W: inference (eval mode,
    K = 7) and a training step (train mode, K = 6, the mean square of the output,
    backward through all steps, no optimizer) of random inputs."""
    import numpy as np
    import torch
    from official_mmseg import install_mmcv_ext_stub

    install_mmcv_ext_stub()
    from mmseg.models.decode_heads.ham_head import Hamburger

    batch, channels, height, width = args.hamburger
    ham_kwargs = dict(MD_S=1, MD_R=args.rank, train_steps=6, eval_steps=7, inv_t=100,
                      rand_init=True)
    module = Hamburger(channels, ham_kwargs, norm_cfg=dict(type="GN", num_groups=32,
                                                            requires_grad=True))
    module = module.to(device.name)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(batch, channels, height, width)).astype("float32")
                         ).to(device.name)

    def infer():
        with torch.no_grad(), device.autocast():
            return module(x)

    def train():
        with device.autocast():
            loss = module(x).float().square().mean()
        loss.backward()
        return loss

    wait_for_turn()
    module.eval()
    inference = timed_cell(args, device, infer, batch)
    module.train()
    training = timed_cell(args, device, train, batch)
    return {"block": "mmseg Hamburger (LightHamHead)", "input_shape": list(args.hamburger),
            "rank": args.rank, "params": int(sum(p.numel() for p in module.parameters())),
            "inference": inference, "train_step": training}


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
