#!/usr/bin/env python
"""Write SegNeXt (MSCAN backbone + LightHamHead) reference fixtures from the
official PyTorch code, for the numerical tests of kctx's Keras port.

Run with an environment that has torch, mmengine, mmcv (mmcv-lite is enough)
and mmsegmentation 1.x::

    python tools/segnext_fixtures.py \
        --segnext-repo /path/to/Visual-Attention-Network/SegNeXt

``--segnext-repo`` is a checkout of https://github.com/Visual-Attention-Network/SegNeXt
or its git directory (bare or not; files are then read with ``git show``).
Without it the parts that need the original (mmcv 1.x era) code -- the
original key layout in ``manifest.json``, ``tiny_original.pth`` and the
original-code cross-check -- are skipped with a message.

Everything is written to ``tests/fixtures/segnext/`` (``--out``); see the
README.md there for the formats:

* ``manifest.json`` -- key layouts / settings of the four ADE20K models (and
  the original repo's), statistics and checks of the fixtures;
* ``tiny_mmseg.pth`` / ``tiny_original.pth`` -- a reduced-width SegNeXt, mmseg
  1.x and original-repo layout (identical tensors);
* ``tiny_imagenet.pth`` -- that model's backbone as a backbone-only "ImageNet"
  checkpoint (identical backbone tensors) plus a 1000-class ``head``;
* ``tiny_outputs.npz`` -- official outputs of the tiny model, including the
  full-resolution logits and the backbone's stage outputs;
* ``mscan_t_mmseg.pth`` / ``mscan_t_outputs.npz`` -- real-size SegNeXt-T and
  its official outputs (stage outputs and pre-upsampling head logits only).

To keep the files small, every weight tensor with more than
STRIDED_THRESHOLD (256) elements and at least two non-singleton dimensions,
in every checkpoint, is an overlapping ``torch.as_strided`` view of its own
small random storage (see ``WeightFactory``).  Each segmentor checkpoint is
saved, loaded back and the reference outputs are computed by a fresh model
holding exactly the loaded tensors.

Deterministic: fixed seeds, fixed checkpoint metadata, single-threaded torch;
rerunning gives byte-identical files.
"""

import argparse
import collections
import contextlib
import copy
import io
import json
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "segnext"

NMF_SEED = 0  # seed of the fixed NMF dictionary (kctx's seeded Hamburger)
WEIGHT_SEED = 20230210
IMAGE_SEED = 1234
FAKE_ITERS = 160000  # meta / num_batches_tracked of the fake "trained" models
FAKE_TIME = "20230210_140244"

MMSEG_CONFIGS = {
    v: f"segnext_mscan-{v}_1xb16-adamw-160k_ade20k-512x512.py" for v in "tsbl"
}
ORIG_NAMES = {"t": "tiny", "s": "small", "b": "base", "l": "large"}
ORIG_ADE = {
    v: f"local_configs/segnext/{n}/segnext.{n}.512x512.ade.160k.py"
    for v, n in ORIG_NAMES.items()
}
ORIG_CITY = {
    v: f"local_configs/segnext/{n}/segnext.{n}.1024x1024.city.160k.py"
    for v, n in ORIG_NAMES.items()
}

# The reduced-width model of tiny_mmseg.pth / tiny_original.pth.
TINY_BACKBONE = dict(
    embed_dims=[16, 32, 64, 96], depths=[1, 1, 2, 1], mlp_ratios=[4, 4, 2, 2],
    drop_path_rate=0.1)
TINY_HEAD = dict(
    in_channels=[32, 64, 96], channels=64, ham_channels=64, num_classes=7)
TINY_MD = dict(MD_R=8, train_steps=6, eval_steps=7)
TINY_IMAGES_SHAPE = (2, 70, 90, 3)
MSCAN_T_IMAGES_SHAPE = (1, 64, 64, 3)


# --------------------------------------------------------------------------
# Environment: mmseg imports mmcv's compiled ops, which mmcv-lite lacks.


from official_mmseg import install_mmcv_ext_stub  # noqa: E402

install_mmcv_ext_stub()

import torch  # noqa: E402
from torch_weights import STRIDED_THRESHOLD, WeightFactory  # noqa: E402,F401
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mmcv  # noqa: E402
import mmengine  # noqa: E402
import mmseg  # noqa: E402
from mmengine.config import Config  # noqa: E402
from mmengine.logging import MessageHub  # noqa: E402
from mmengine.runner.checkpoint import save_checkpoint, weights_to_cpu  # noqa: E402
from mmseg.datasets import ADE20KDataset  # noqa: E402
from mmseg.models.decode_heads import ham_head as mmseg_ham_head  # noqa: E402
from mmseg.registry import MODELS  # noqa: E402
from mmseg.structures import SegDataSample  # noqa: E402
from mmseg.utils import register_all_modules  # noqa: E402

register_all_modules()
torch.set_num_threads(1)
MMSEG_CONFIG_DIR = Path(mmseg.__file__).parent / ".mim" / "configs" / "segnext"


def log(*args):
    print(*args, flush=True)


# --------------------------------------------------------------------------
# The fixed NMF dictionary.


def nmf_bases(d, r, seed=NMF_SEED):
    """The dictionary kctx's seeded Hamburger uses: shape (1, d, r)."""
    rng = np.random.default_rng(seed)
    raw = rng.uniform(size=(1, d, r))
    bases = raw / np.maximum(np.linalg.norm(raw, axis=-2, keepdims=True), 1e-12)
    return bases.astype(np.float32)


@contextlib.contextmanager
def fixed_nmf_bases(nmf_class, bases):
    """Make ``nmf_class._build_bases`` (official: fresh ``torch.rand`` bases,
    L2-normalised over D, on every call) return ``bases`` (1, D, R) repeated
    over the batch."""
    fixed = torch.from_numpy(bases)
    original = nmf_class.__dict__["_build_bases"]

    def _build_bases(self, B, S, D, R, *args, **kwargs):
        assert (S, D, R) == (1,) + tuple(fixed.shape[1:]), (S, D, R, fixed.shape)
        return fixed.repeat(B * S, 1, 1)

    nmf_class._build_bases = _build_bases
    try:
        yield
    finally:
        nmf_class._build_bases = original


# --------------------------------------------------------------------------
# Random weights.


def classify(module, name):
    """Which distribution a state_dict entry ``module.name`` is drawn from."""
    if name.startswith("layer_scale"):
        return "layer_scale", None
    if isinstance(module, (nn.Conv2d, nn.Linear)):
        if name == "weight":
            return "weight", module.weight[0].numel()
        if name == "bias":
            return "bias", None
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return {"weight": ("norm_weight", None), "bias": ("bias", None),
                "running_mean": ("running_mean", None),
                "running_var": ("running_var", None),
                "num_batches_tracked": ("num_batches_tracked", None)}[name]
    if isinstance(module, (nn.GroupNorm, nn.LayerNorm)):
        return {"weight": ("norm_weight", None), "bias": ("bias", None)}[name]
    raise ValueError(f"no rule for {type(module).__name__}.{name}")


def randomize_(model, factory):
    """Assign random values to every parameter and buffer in the state_dict."""
    done = set()
    for key in model.state_dict().keys():
        mod_name, _, name = key.rpartition(".")
        module = model.get_submodule(mod_name) if mod_name else model
        kind, fan_in = classify(module, name)
        old = module._parameters.get(name)
        if old is None:
            old = module._buffers[name]
        if kind == "num_batches_tracked":
            value = torch.tensor(FAKE_ITERS, dtype=old.dtype)
        else:
            value = factory.make(kind, old.shape, fan_in)
        if name in module._parameters:
            module._parameters[name].data = value
        else:
            module._buffers[name] = value
        done.add(key)
    assert done == set(model.state_dict().keys())


# --------------------------------------------------------------------------
# mmseg 1.x models.


def mmseg_config(variant):
    return Config.fromfile(str(MMSEG_CONFIG_DIR / MMSEG_CONFIGS[variant]))


def build_mmseg(model_cfg):
    cfg = copy.deepcopy(model_cfg)
    cfg.backbone.pop("init_cfg", None)
    return MODELS.build(cfg)


def tiny_mmseg_model_cfg():
    cfg = copy.deepcopy(mmseg_config("t").model)
    cfg.backbone.update(TINY_BACKBONE)
    cfg.decode_head.update(TINY_HEAD)
    cfg.decode_head.ham_kwargs.update(TINY_MD)
    return cfg


def shapes_of(state_dict):
    return {k: list(v.shape) for k, v in state_dict.items()}


def param_count(model):
    return sum(p.numel() for p in model.parameters())


def plain(obj):
    """ConfigDict / tuple -> JSON-friendly plain python."""
    if hasattr(obj, "to_dict"):
        obj = obj.to_dict()
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


BACKBONE_KEYS = ("embed_dims", "depths", "mlp_ratios", "drop_rate",
                 "drop_path_rate", "attention_kernel_sizes",
                 "attention_kernel_paddings", "act_cfg", "norm_cfg")
HEAD_KEYS = ("in_channels", "in_index", "channels", "ham_channels", "ham_kwargs",
             "dropout_ratio", "norm_cfg", "align_corners", "num_classes")


def settings_of(model_cfg):
    bb, hd = model_cfg.backbone, model_cfg.decode_head
    out = dict(
        backbone={k: plain(bb[k]) for k in BACKBONE_KEYS if k in bb},
        decode_head={k: plain(hd[k]) for k in HEAD_KEYS if k in hd},
        test_cfg=plain(model_cfg.test_cfg),
    )
    dp = model_cfg.get("data_preprocessor")
    if dp is not None:
        out["data_preprocessor"] = dict(
            mean=plain(dp.mean), std=plain(dp.std), bgr_to_rgb=dp.bgr_to_rgb,
            pad_val=dp.pad_val, seg_pad_val=dp.seg_pad_val,
            size=plain(dp.get("size")),
            size_divisor=(dp.get("test_cfg") or {}).get("size_divisor"),
            test_cfg=plain(dp.get("test_cfg")))
    return out


# --------------------------------------------------------------------------
# The official mmseg 1.x inference path.


def official_predict(model, images_rgb, bases):
    """Whole-image inference exactly as mmseg 1.2.2's ``test_step``.

    ``images_rgb``: (N, H, W, 3) float32 RGB with integer values 0..255.  They
    are handed to the model as the test pipeline would (LoadImageFromFile ->
    BGR uint8, PackSegInputs -> CHW tensor; no Resize: the images are taken
    as already at their test scale), so the config's SegDataPreProcessor does
    its own bgr_to_rgb flip back to RGB, normalises, pads bottom/right to
    size_divisor=32 with 0 (after normalisation), and
    ``EncoderDecoder.predict`` resizes the head logits bilinearly
    (align_corners=False) to the padded shape, crops the padding and resizes
    to ori_shape (an identity resize here).
    """
    n, h, w, _ = images_rgb.shape
    inputs = [torch.from_numpy(np.ascontiguousarray(
        img[..., ::-1].transpose(2, 0, 1))).to(torch.uint8) for img in images_rgb]
    data_samples = [SegDataSample(metainfo=dict(
        img_path=f"image_{i}.png", ori_shape=(h, w), img_shape=(h, w),
        scale_factor=(1.0, 1.0), flip=False, flip_direction=None,
        reduce_zero_label=True)) for i in range(n)]
    captured = {}
    backbone, head = model.backbone, model.decode_head
    bb_forward, head_forward = backbone.forward, head.forward

    def bb_wrapped(x):
        captured["preprocessed"] = x
        outs = bb_forward(x)
        captured["stages"] = outs
        return outs

    def head_wrapped(inputs):
        out = head_forward(inputs)
        captured["head_logits"] = out
        return out

    backbone.forward, head.forward = bb_wrapped, head_wrapped
    try:
        with torch.no_grad(), fixed_nmf_bases(mmseg_ham_head.NMF2D, bases):
            results = model.test_step(dict(inputs=inputs, data_samples=data_samples))
    finally:
        del backbone.forward, head.forward
    logits = torch.stack([r.seg_logits.data for r in results])
    return dict(
        logits=logits,
        stages=captured["stages"],
        head_logits=captured["head_logits"],
        preprocessed=captured["preprocessed"],
        padded_shape=tuple(captured["preprocessed"].shape[2:]),
        pred=torch.stack([r.pred_sem_seg.data[0] for r in results]),
    )


def nhwc(t):
    return t.detach().permute(0, 2, 3, 1).contiguous().numpy().astype(np.float32)


def random_images(shape, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=shape).astype(np.float32)


def save_outputs(path, images, out, bases, eval_steps, rank, full_logits):
    """``full_logits``: also store the full-resolution (cropped) logits."""
    arrays = dict(images=images)
    if full_logits:
        arrays["logits"] = nhwc(out["logits"])
    arrays.update(
        head_logits=nhwc(out["head_logits"]),
        padded_shape=np.asarray(out["padded_shape"], np.int32),
        bases=bases,
        eval_steps=np.asarray(eval_steps, np.int32),
        rank=np.asarray(rank, np.int32),
    )
    for i, s in enumerate(out["stages"]):
        arrays[f"stage{i + 1}"] = nhwc(s)
    np.savez_compressed(path, **arrays)


def describe(t):
    t = t.detach().double()
    return dict(mean=round(t.mean().item(), 4), std=round(t.std().item(), 4),
                absmax=round(t.abs().max().item(), 4))


def sensitivity(model, images, bases, reference):
    """Relative change of the logits when a part of the model is removed."""
    ref = reference["logits"]
    ref_pred = reference["pred"]

    def compare(m):
        out = official_predict(m, images, bases)
        d = out["logits"] - ref
        return dict(rel_l2=round((d.norm() / ref.norm()).item(), 4),
                    max_abs=round(d.abs().max().item(), 4),
                    argmax_agree=round((out["pred"] == ref_pred).float().mean().item(), 4))

    results = {}
    m = copy.deepcopy(model)
    for name, p in m.named_parameters():
        if "layer_scale" in name:
            p.data = torch.zeros_like(p)
    results["zero_layer_scales"] = compare(m)

    m = copy.deepcopy(model)
    for mod_name, mod in m.named_modules():
        if mod_name.rsplit(".", 1)[-1] in ("conv0_1", "conv0_2", "conv1_1",
                                           "conv1_2", "conv2_1", "conv2_2"):
            mod.weight.data = torch.zeros_like(mod.weight)
            mod.bias.data = torch.zeros_like(mod.bias)
    results["zero_msca_strip_branches"] = compare(m)

    m = copy.deepcopy(model)
    m.decode_head.hamburger.ham.forward = lambda x, *a, **k: torch.zeros_like(x)
    results["zero_nmf_output"] = compare(m)

    m = copy.deepcopy(model)
    for mod in m.modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            mod.running_mean = torch.zeros_like(mod.running_mean)
            mod.running_var = torch.ones_like(mod.running_var)
    results["reset_bn_running_stats"] = compare(m)

    other = official_predict(model, images, nmf_bases(bases.shape[1], bases.shape[2], 1))
    d = other["logits"] - ref
    results["other_nmf_dictionary_seed1"] = dict(
        rel_l2=round((d.norm() / ref.norm()).item(), 4),
        max_abs=round(d.abs().max().item(), 4))
    return results


# --------------------------------------------------------------------------
# Checkpoint containers.


def ade_dataset_meta(num_classes):
    meta = ADE20KDataset.METAINFO
    return dict(classes=tuple(meta["classes"][:num_classes]),
                palette=[list(p) for p in meta["palette"][:num_classes]],
                label_map=None, reduce_zero_label=True)


def message_hub_state(name, iters):
    hub = MessageHub.get_instance(name)
    for i, (lr, loss) in enumerate([(6.0e-7, 1.2345), (3.0e-7, 1.1875),
                                    (1.5e-9, 0.9531)]):
        hub.update_scalar("train/lr", lr)
        hub.update_scalar("train/loss", loss)
        hub.update_scalar("train/decode.loss_ce", loss)
        hub.update_scalar("train/decode.acc_seg", 71.5 + i)
    hub.update_info("iter", iters - 1)
    hub.update_info("epoch", 0)
    hub.update_info("max_iters", iters)
    return hub.state_dict()


def save_mmengine_checkpoint(path, model, cfg_text, experiment_name, num_classes):
    """The container mmengine's Runner.save_checkpoint (CheckpointHook) writes,
    minus optimizer / param_schedulers (as in released checkpoints)."""
    meta = dict(
        epoch=0, iter=FAKE_ITERS, cfg=cfg_text, seed=0,
        experiment_name=experiment_name, time=FAKE_TIME,
        mmengine_version=mmengine.__version__,
        dataset_meta=ade_dataset_meta(num_classes),
        mmseg_version=mmseg.__version__)
    checkpoint = {
        "meta": meta,
        "state_dict": weights_to_cpu(model.state_dict()),
        "message_hub": message_hub_state(experiment_name, FAKE_ITERS),
    }
    save_checkpoint(checkpoint, str(path))


def same_tensor(a, b):
    """Same dtype, shape, strides, storage offset and storage contents."""
    def whole_storage(t):
        n = t.untyped_storage().nbytes() // t.element_size()
        return t.as_strided((n,), (1,), 0)
    return (a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
            and a.storage_offset() == b.storage_offset()
            and a.untyped_storage().nbytes() == b.untyped_storage().nbytes()
            and torch.equal(whole_storage(a), whole_storage(b)))


def save_and_reload(path, model, model_cfg, cfg_text, experiment_name, num_classes):
    """Save ``model`` as an mmengine checkpoint, load the file back and build a
    fresh eval-mode model whose parameters / buffers ARE the loaded tensors
    (``load_state_dict(strict=True, assign=True)``), so every reference output
    is computed with exactly the weights in the file."""
    save_mmengine_checkpoint(path, model, cfg_text, experiment_name, num_classes)
    sd = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
    ref = model.state_dict()
    assert list(sd) == list(ref)
    assert all(same_tensor(sd[k], ref[k]) for k in sd)
    fresh = build_mmseg(model_cfg)
    fresh.load_state_dict(sd, strict=True, assign=True)
    fresh.eval()
    live = fresh.state_dict()
    assert all(live[k] is sd[k] or (live[k].data_ptr() == sd[k].data_ptr()
                                    and live[k].stride() == sd[k].stride())
               for k in sd)
    return fresh, sd


def storage_report(sd):
    """How many tensors are strided views, and the stored vs viewed sizes."""
    strided = [t for t in sd.values() if not t.is_contiguous()]
    return dict(
        tensors=len(sd), strided_views=len(strided),
        stored_elements=sum(t.untyped_storage().nbytes() // t.element_size()
                            for t in sd.values()),
        viewed_elements=sum(t.numel() for t in sd.values()))


# --------------------------------------------------------------------------
# The original SegNeXt repository (mmcv 1.x / mmseg 0.24.1 era) code.


class SegNeXtRepo:
    """Reads files of a SegNeXt checkout or git directory."""

    def __init__(self, path, rev="HEAD"):
        self.path = Path(path)
        self.rev = rev
        self.git = not (self.path / "mmseg" / "models" / "backbones" / "mscan.py").is_file()
        self.commit = None
        try:
            self.commit = subprocess.run(
                ["git", "-C", str(self.path), "rev-parse", rev if self.git else "HEAD"],
                check=True, capture_output=True, text=True).stdout.strip()
        except (subprocess.CalledProcessError, FileNotFoundError):
            if self.git:
                raise SystemExit(f"{path}: neither a SegNeXt checkout nor a git directory")

    def read(self, rel):
        if not self.git:
            return (self.path / rel).read_text()
        return subprocess.run(["git", "-C", str(self.path), "show", f"{self.rev}:{rel}"],
                              check=True, capture_output=True, text=True).stdout

    def files(self, prefix):
        if not self.git:
            return [str(p.relative_to(self.path)) for p in (self.path / prefix).rglob("*.py")]
        out = subprocess.run(["git", "-C", str(self.path), "ls-tree", "-r", "--name-only",
                              self.rev, prefix], check=True, capture_output=True, text=True)
        return out.stdout.split()

    def config(self, rel):
        """mmengine Config of a local_configs/ file (bases resolved)."""
        with tempfile.TemporaryDirectory() as tmp:
            for f in self.files("local_configs"):
                dst = Path(tmp) / f
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_text(self.read(f))
            return Config.fromfile(str(Path(tmp) / rel))


class _Registry:
    """Stand-in for mmcv 1.x's Registry (only what the original code uses)."""

    def __init__(self, name):
        self.name, self.modules = name, {}

    def register_module(self, name=None, force=False, module=None):
        def register(cls):
            self.modules[name or cls.__name__] = cls
            return cls
        return register(module) if module is not None else register

    def build(self, cfg):
        cfg = dict(cfg)
        return self.modules[cfg.pop("type")](**cfg)


class _StubLoss(nn.Module):
    """Stand-in for mmseg 0.x's CrossEntropyLoss (no parameters / buffers)."""

    def __init__(self, **cfg):
        super().__init__()
        self.cfg = cfg


def _identity_decorator(*args, **kwargs):
    return lambda fn: fn


def load_original_code(repo):
    """Exec the original mscan.py / ham_head.py / decode_head.py /
    segmentors (base.py, encoder_decoder.py) / ops/wrappers.py with small
    stubs standing in for the mmcv 1.x / mmseg 0.x modules they import.

    mmcv 1.x stand-ins: ``mmcv.cnn.build_norm_layer``, ``ConvModule`` and
    ``mmcv.cnn.bricks.DropPath`` are mmcv-lite 2.1's (same module / attribute
    names as in 1.x), ``mmcv.runner.BaseModule`` is mmengine's BaseModule,
    ``auto_fp16`` / ``force_fp32`` are no-op decorators,
    ``mmcv.cnn.utils.weight_init`` is mmengine.model.weight_init.  mmseg 0.x
    stand-ins: a dict registry for ``mmseg.models.builder``, a parameter-free
    module for ``build_loss``, ``mmseg.core.add_prefix``.
    """
    from mmengine.model import BaseModule
    from mmengine.model import weight_init

    def module(name, package=False, **attrs):
        m = types.ModuleType(name)
        m.__package__ = name if package else name.rpartition(".")[0]
        if package:
            m.__path__ = []
        m.__dict__.update(attrs)
        return m

    runner = module("mmcv.runner", BaseModule=BaseModule, auto_fp16=_identity_decorator,
                    force_fp32=_identity_decorator)
    wi = module("mmcv.cnn.utils.weight_init", constant_init=weight_init.constant_init,
                normal_init=weight_init.normal_init,
                trunc_normal_init=weight_init.trunc_normal_init)
    registry = _Registry("models")
    builder = module(
        "mmseg.models.builder", MODELS=registry, BACKBONES=registry, NECKS=registry,
        HEADS=registry, LOSSES=registry, SEGMENTORS=registry,
        build_backbone=registry.build, build_neck=registry.build,
        build_head=registry.build, build_segmentor=registry.build,
        build_loss=lambda cfg: _StubLoss(**cfg))

    def add_prefix(inputs, prefix):
        return {f"{prefix}.{k}": v for k, v in inputs.items()}

    def build_pixel_sampler(cfg, **kwargs):
        raise NotImplementedError("pixel samplers are not stubbed")

    def accuracy(*args, **kwargs):
        raise NotImplementedError("accuracy is not stubbed")

    fakes = {
        "mmcv.runner": runner,
        "mmcv.cnn.utils.weight_init": wi,
        "mmseg": module("mmseg", package=True, __version__="0.24.1"),
        "mmseg.core": module("mmseg.core", package=True, add_prefix=add_prefix,
                             build_pixel_sampler=build_pixel_sampler),
        "mmseg.ops": module("mmseg.ops", package=True),
        "mmseg.models": module("mmseg.models", package=True, builder=builder),
        "mmseg.models.builder": builder,
        "mmseg.models.losses": module("mmseg.models.losses", package=True,
                                      accuracy=accuracy),
        "mmseg.models.backbones": module("mmseg.models.backbones", package=True),
        "mmseg.models.decode_heads": module("mmseg.models.decode_heads", package=True),
        "mmseg.models.segmentors": module("mmseg.models.segmentors", package=True),
    }
    sources = [
        ("mmseg.ops.wrappers", "mmseg/ops/wrappers.py"),
        ("mmseg.models.backbones.mscan", "mmseg/models/backbones/mscan.py"),
        ("mmseg.models.decode_heads.decode_head", "mmseg/models/decode_heads/decode_head.py"),
        ("mmseg.models.decode_heads.ham_head", "mmseg/models/decode_heads/ham_head.py"),
        ("mmseg.models.segmentors.base", "mmseg/models/segmentors/base.py"),
        ("mmseg.models.segmentors.encoder_decoder",
         "mmseg/models/segmentors/encoder_decoder.py"),
    ]
    saved = {k: v for k, v in sys.modules.items()
             if k == "mmseg" or k.startswith("mmseg.") or k in fakes}
    loaded = {}
    try:
        for k in saved:
            del sys.modules[k]
        sys.modules.update(fakes)
        for name, rel in sources:
            m = module(name)
            m.__file__ = f"SegNeXt@{repo.commit or repo.rev}:{rel}"
            sys.modules[name] = m
            exec(compile(repo.read(rel), m.__file__, "exec"), m.__dict__)
            loaded[name] = m
            if name == "mmseg.ops.wrappers":
                fakes["mmseg.ops"].resize = m.resize
                fakes["mmseg.ops"].Upsample = m.Upsample
    finally:
        for k in list(sys.modules):
            if k == "mmseg" or k.startswith("mmseg.") or k in fakes:
                del sys.modules[k]
        sys.modules.update(saved)
    return types.SimpleNamespace(
        registry=registry, modules=loaded,
        NMF2D=loaded["mmseg.models.decode_heads.ham_head"].NMF2D)


def build_original(code, model_cfg):
    cfg = plain(model_cfg)
    cfg["backbone"].pop("init_cfg", None)
    with contextlib.redirect_stdout(io.StringIO()):  # NMF2D prints its args
        return code.registry.build(cfg)


def tiny_original_config(repo):
    """The original tiny ADE20K config with the reduced-width model."""
    full = repo.config(ORIG_ADE["t"])
    cfg = copy.deepcopy(full.model)
    cfg.backbone.update(TINY_BACKBONE)
    cfg.decode_head.update(TINY_HEAD)
    cfg.decode_head.ham_kwargs = dict(MD_R=TINY_MD["MD_R"],
                                      TRAIN_STEPS=TINY_MD["train_steps"],
                                      EVAL_STEPS=TINY_MD["eval_steps"])
    full.model = cfg
    return full


def mmseg_to_original_key(key):
    """The only renaming: mmseg 1.x dropped the DWConv wrapper of the MLP."""
    return key.replace(".mlp.dwconv.", ".mlp.dwconv.dwconv.")


def to_original_state_dict(sd):
    return collections.OrderedDict((mmseg_to_original_key(k), v) for k, v in sd.items())


def original_layout_report(code, repo, manifest):
    """Original-repo key layouts of the 4 ADE20K + 4 Cityscapes models, and a
    check that the mmseg -> original key map is exact (order, shapes)."""
    for v in "tsbl":
        entry = manifest["variants"][v]
        ocfg = repo.config(ORIG_ADE[v])
        model = build_original(code, ocfg.model)
        osd = model.state_dict()
        entry["original_config"] = ORIG_ADE[v]
        entry["original_settings"] = settings_of(ocfg.model)
        entry["original_state_dict"] = shapes_of(osd)
        entry["original_param_count"] = param_count(model)
        mapped = [[mmseg_to_original_key(k), s] for k, s in entry["state_dict"].items()]
        assert mapped == [[k, list(t.shape)] for k, t in osd.items()], v
        ccfg = repo.config(ORIG_CITY[v])
        city = build_original(code, ccfg.model)
        csd = city.state_dict()
        manifest["cityscapes"]["variants"][v] = dict(
            original_config=ORIG_CITY[v],
            num_classes=ccfg.model.decode_head.num_classes,
            test_cfg=plain(ccfg.model.test_cfg),
            param_count=param_count(city),
            state_dict_shape_differences={
                k: [list(osd[k].shape), list(t.shape)]
                for k, t in csd.items() if list(t.shape) != list(osd[k].shape)},
            model_config_differences_vs_ade=config_diff(plain(ocfg.model),
                                                        plain(ccfg.model)),
            other_config_differences_vs_ade=sorted(
                k for k in config_diff(plain(ocfg), plain(ccfg))
                if not k.startswith("model.")),
        )
        manifest["cityscapes"]["original_test_pipelines"] = dict(
            ade20k=plain(ocfg.test_pipeline), cityscapes=plain(ccfg.test_pipeline))
        assert list(csd) == list(osd)


def config_diff(a, b, prefix=""):
    """Leaves that differ between two config dicts: {path: [a, b]}."""
    out = {}
    for k in sorted(set(a) | set(b), key=str):
        path = f"{prefix}{k}"
        va, vb = a.get(k, "<absent>"), b.get(k, "<absent>")
        if isinstance(va, dict) and isinstance(vb, dict):
            out.update(config_diff(va, vb, path + "."))
        elif va != vb:
            out[path] = [va, vb]
    return out


def original_forward(model, nmf_class, x, bases):
    with torch.no_grad(), fixed_nmf_bases(nmf_class, bases):
        stages = model.backbone(x)
        logits = model.encode_decode(x, None)
    return stages, logits


def check_against_original(code, orig_model, sd_mmseg, out, bases):
    """Load the mmseg-layout weights into the original code (original key
    layout, strict) and compare its encode_decode (whole inference on the
    same preprocessed padded batch) with mmseg's pre-crop logits."""
    missing = orig_model.load_state_dict(to_original_state_dict(sd_mmseg), strict=True)
    assert not missing.missing_keys and not missing.unexpected_keys
    orig_model.eval()
    stages, logits = original_forward(orig_model, code.NMF2D, out["preprocessed"], bases)
    ref = F.interpolate(out["head_logits"], size=out["padded_shape"], mode="bilinear",
                        align_corners=False)
    h, w = out["logits"].shape[2:]
    res = dict(
        max_abs_diff_logits_padded=float((logits - ref).abs().max()),
        max_abs_diff_logits_cropped=float((logits[:, :, :h, :w] - out["logits"]).abs().max()),
        max_abs_diff_stages=[float((a - b).abs().max()) for a, b in zip(stages, out["stages"])],
    )
    return res


def check_imagenet_loading(model_cfg, path, sd_ref, out_ref):
    """Load the file the way the config's init_cfg=Pretrained does and compare
    with the segmentor's backbone tensors ``sd_ref`` and stage outputs."""
    bcfg = copy.deepcopy(model_cfg.backbone)
    bcfg.init_cfg = dict(type="Pretrained", checkpoint=str(path))
    backbone = MODELS.build(bcfg)
    # mmengine's loader reports key mismatches as WARNINGs on the current
    # logger; capture them (and silence its per-parameter INFO lines).
    import logging
    from mmengine.logging import MMLogger
    buf = io.StringIO()
    logger = MMLogger.get_current_instance()
    handler = logging.StreamHandler(buf)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            backbone.init_weights()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    ref = {k[len("backbone."):]: v for k, v in sd_ref.items()
           if k.startswith("backbone.")}
    sd = backbone.state_dict()
    assert set(sd) == set(ref)
    equal = all(torch.equal(sd[k], ref[k]) for k in sd)
    backbone.eval()
    with torch.no_grad():
        stages = backbone(out_ref["preprocessed"])
    diff = max(float((a - b).abs().max()) for a, b in zip(stages, out_ref["stages"]))
    msgs = [line for line in buf.getvalue().splitlines()
            if "key" in line or "unexpected" in line or "missing" in line]
    return dict(all_backbone_tensors_loaded_equal=equal, stage_max_abs_diff=diff,
                loader_messages=msgs)


# --------------------------------------------------------------------------
# The fixtures, one step each.


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--segnext-repo", type=Path, default=None,
                        help="checkout or git dir of Visual-Attention-Network/SegNeXt")
    parser.add_argument("--segnext-rev", default="HEAD")
    return parser.parse_args(argv)


def original_repository(path, rev):
    """``(repo, code)``: the original SegNeXt repository at ``path`` and its model code,
    or ``(None, None)`` without ``--segnext-repo``."""
    if path is None:
        log("--segnext-repo not given: skipping the original-repository layout "
            "(manifest original_* entries, tiny_original.pth, cross-checks)")
        return None, None
    repo = SegNeXtRepo(path, rev)
    code = load_original_code(repo)
    log(f"original SegNeXt code loaded from {path} @ {repo.commit}")
    return repo, code


def new_manifest(repo):
    """The manifest's first entries: versions, the key mapping, the Cityscapes note."""
    return dict(
        versions=dict(python=sys.version.split()[0], torch=torch.__version__,
                      numpy=np.__version__, mmseg=mmseg.__version__,
                      mmengine=mmengine.__version__, mmcv=mmcv.__version__),
        segnext_repo_commit=repo.commit if repo else None,
        key_mapping=dict(
            mmseg_to_original=[[".mlp.dwconv.", ".mlp.dwconv.dwconv."]],
            note="apply to every state_dict key (prefix backbone. / none for "
                 "backbone-only checkpoints); no other key, shape or order "
                 "difference; established by building both models"),
        variants={},
        cityscapes=dict(
            note="mmseg 1.2.2 ships no SegNeXt Cityscapes config; the original "
                 "repo's local_configs/segnext/*/segnext.*.1024x1024.city.160k.py "
                 "differ from its ADE20K configs in the model only by num_classes "
                 "(19) and test_cfg (slide 1024x1024, stride 768); so the "
                 "Cityscapes model = the ADE20K variant with num_classes=19 "
                 "(conv_seg (19, channels, 1, 1)); see variants.*",
            variants={}),
    )


def describe_variants(manifest, repo, code):
    """manifest ``variants``: the four ADE20K configs in mmseg 1.x layout (and, with the
    original code, in the original repository's layout and its Cityscapes models)."""
    for v in "tsbl":
        cfg = mmseg_config(v)
        model = build_mmseg(cfg.model)
        entry = dict(config=MMSEG_CONFIGS[v],
                     pretrained_checkpoint=cfg.model.backbone.init_cfg.checkpoint,
                     param_count=param_count(model),
                     **settings_of(cfg.model))
        entry["state_dict"] = shapes_of(model.state_dict())
        manifest["variants"][v] = entry
        log(f"mmseg {v}: {entry['param_count']} parameters, {len(entry['state_dict'])} keys")
    if code is not None:
        original_layout_report(code, repo, manifest)


def reference_outputs(name, model, sd, images, bases, eval_steps, rank, path, full_logits,
                      settings=None):
    """Write the official outputs of ``model`` (state dict ``sd``) on ``images`` to
    ``path`` (:func:`save_outputs`) and return them with the fixture's checks: parameter
    count (``settings`` next when given), storage, statistics of the outputs (the logits
    as ``logits_not_stored`` without ``full_logits``) and the sensitivity."""
    out = official_predict(model, images, bases)
    save_outputs(path, images, out, bases, eval_steps, rank, full_logits=full_logits)
    checks = dict(param_count=param_count(model))
    if settings is not None:
        checks["settings"] = settings
    logits = "logits" if full_logits else "logits_not_stored"
    checks.update(storage=storage_report(sd), padded_shape=list(out["padded_shape"]),
                  **{logits: describe(out["logits"])},
                  head_logits=describe(out["head_logits"]),
                  stages=[describe(s) for s in out["stages"]])
    if full_logits:
        log(f"{name} logits", checks["logits"])
    else:
        log(f"{name} logits (not stored)", checks["logits_not_stored"])
        log(f"{name} head_logits", checks["head_logits"])
    checks["sensitivity"] = sensitivity(model, images, bases, out)
    log(f"{name} sensitivity", json.dumps(checks["sensitivity"]))
    return out, checks


def compare_with_original(name, code, model_cfg, sd, out, bases):
    """The original code's model of ``model_cfg`` and how its outputs with the weights
    ``sd`` compare with the official ``out`` (:func:`check_against_original`)."""
    model = build_original(code, model_cfg)
    result = check_against_original(code, model, sd, out, bases)
    log(f"{name} vs original code", result)
    return model, result


def write_tiny(out_dir, repo, code, manifest):
    """tiny_mmseg.pth, tiny_outputs.npz and, with the original code, tiny_original.pth:
    the reduced-width model. Returns its config, state dict, outputs and checks."""
    tcfg = tiny_mmseg_model_cfg()
    tiny_random = build_mmseg(tcfg)
    randomize_(tiny_random, WeightFactory(WEIGHT_SEED))
    full_cfg = mmseg_config("t")
    full_cfg.model = tcfg
    tiny, sd_tiny = save_and_reload(
        out_dir / "tiny_mmseg.pth", tiny_random, tcfg, full_cfg.pretty_text,
        "segnext_tiny_fixture", TINY_HEAD["num_classes"])
    del tiny_random
    bases_tiny = nmf_bases(TINY_HEAD["ham_channels"], TINY_MD["MD_R"])
    manifest["tiny"] = dict(state_dict=shapes_of(sd_tiny))
    out_tiny, checks = reference_outputs(
        "tiny", tiny, sd_tiny, random_images(TINY_IMAGES_SHAPE, IMAGE_SEED), bases_tiny,
        TINY_MD["eval_steps"], TINY_MD["MD_R"], out_dir / "tiny_outputs.npz",
        full_logits=True, settings=settings_of(tcfg))
    if code is not None:
        ocfg = tiny_original_config(repo)
        otiny, checks["original_code"] = compare_with_original(
            "tiny", code, ocfg.model, sd_tiny, out_tiny, bases_tiny)
        osd = write_tiny_original(out_dir / "tiny_original.pth", otiny, ocfg, repo, sd_tiny)
        manifest["tiny"]["original_state_dict"] = shapes_of(osd)
    return tcfg, sd_tiny, out_tiny, checks


def write_tiny_original(path, otiny, ocfg, repo, sd_tiny):
    """The original model's own state_dict (key order, _metadata), its values replaced
    by the very tensors (strided views) of tiny_mmseg.pth, saved as the original
    repository's checkpoints are; returns that state dict."""
    osd = otiny.state_dict()
    assert list(osd) == [mmseg_to_original_key(k) for k in sd_tiny]
    for k, t in sd_tiny.items():
        osd[mmseg_to_original_key(k)] = t
    orig_meta = dict(
        mmseg_version="0.24.1+" + (repo.commit or "")[:7], config=ocfg.pretty_text,
        CLASSES=ade_dataset_meta(TINY_HEAD["num_classes"])["classes"],
        PALETTE=ade_dataset_meta(TINY_HEAD["num_classes"])["palette"],
        mmcv_version="1.5.0", time="Sat Sep 10 14:02:44 2022",
        iter=FAKE_ITERS, epoch=1)
    torch.save({"meta": orig_meta, "state_dict": weights_to_cpu(osd)}, path)
    reloaded = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
    assert list(reloaded) == list(osd)
    for k, t in sd_tiny.items():
        assert same_tensor(t, reloaded[mmseg_to_original_key(k)]), k
    return osd


def write_tiny_imagenet(out_dir, tcfg, sd_tiny, out_tiny):
    """tiny_imagenet.pth: an ImageNet-style backbone-only checkpoint of the tiny
    backbone. Exactly the backbone tensors (same strided views) of tiny_mmseg.pth, so
    stage1..stage4 of tiny_outputs.npz are its reference outputs too. Returns its
    checks."""
    bsd = collections.OrderedDict(
        (k[len("backbone."):], v) for k, v in sd_tiny.items() if k.startswith("backbone."))
    head = nn.Linear(TINY_BACKBONE["embed_dims"][-1], 1000)
    randomize_(head, WeightFactory(WEIGHT_SEED + 2))
    bsd["head.weight"], bsd["head.bias"] = head.weight.detach(), head.bias.detach()
    torch.save(bsd, out_dir / "tiny_imagenet.pth")
    reloaded = torch.load(out_dir / "tiny_imagenet.pth", map_location="cpu",
                          weights_only=True)
    assert list(reloaded) == list(bsd)
    assert all(same_tensor(bsd[k], reloaded[k]) for k in bsd)
    checks = dict(
        storage=storage_report(reloaded),
        **check_imagenet_loading(tcfg, out_dir / "tiny_imagenet.pth", sd_tiny, out_tiny))
    assert checks["all_backbone_tensors_loaded_equal"]
    assert checks["stage_max_abs_diff"] == 0.0
    log("imagenet checkpoint via init_cfg", checks)
    return checks


def write_mscan_t(out_dir, repo, code):
    """mscan_t_mmseg.pth and mscan_t_outputs.npz: the real-size SegNeXt-T. Returns its
    checks."""
    cfg_t = mmseg_config("t")
    t_random = build_mmseg(cfg_t.model)
    randomize_(t_random, WeightFactory(WEIGHT_SEED + 1))
    model_t, sd_t = save_and_reload(
        out_dir / "mscan_t_mmseg.pth", t_random, cfg_t.model, cfg_t.pretty_text,
        "segnext_mscan-t_1xb16-adamw-160k_ade20k-512x512", 150)
    del t_random
    hk = cfg_t.model.decode_head.ham_kwargs
    bases_t = nmf_bases(cfg_t.model.decode_head.ham_channels, hk.MD_R)
    out_t, checks = reference_outputs(
        "mscan_t", model_t, sd_t, random_images(MSCAN_T_IMAGES_SHAPE, IMAGE_SEED + 1),
        bases_t, hk.eval_steps, hk.MD_R, out_dir / "mscan_t_outputs.npz", full_logits=False)
    if code is not None:
        _, checks["original_code"] = compare_with_original(
            "mscan_t", code, repo.config(ORIG_ADE["t"]).model, sd_t, out_t, bases_t)
    return checks


def write_manifest(path, manifest):
    """``manifest`` as JSON, one line per numeric list (shapes), to keep the file small
    and diffable."""
    text = json.dumps(manifest, indent=1)
    text = re.sub(r"\[\s*(-?[\d.e+-]+(?:,\s*-?[\d.e+-]+)*)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]",
                  text)
    assert json.loads(text) == json.loads(json.dumps(manifest))
    with open(path, "w") as f:
        f.write(text + "\n")


def main(argv=None):
    args = parse_args(argv)
    out_dir = args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    repo, code = original_repository(args.segnext_repo, args.segnext_rev)
    manifest = new_manifest(repo)
    describe_variants(manifest, repo, code)
    tcfg, sd_tiny, out_tiny, tiny_checks = write_tiny(out_dir, repo, code, manifest)
    manifest["fixtures"] = dict(
        tiny=tiny_checks,
        tiny_imagenet=write_tiny_imagenet(out_dir, tcfg, sd_tiny, out_tiny),
        mscan_t=write_mscan_t(out_dir, repo, code))
    manifest["notes"] = PIPELINE_NOTES
    write_manifest(out_dir / "manifest.json", manifest)
    for p in sorted(out_dir.iterdir()):
        log(f"{p.name}: {p.stat().st_size} bytes")


PIPELINE_NOTES = [
    "mmseg 1.2.2 test path: SegDataPreProcessor flips BGR->RGB, casts to float, "
    "normalises ((x-mean)/std), THEN pads bottom/right to a multiple of 32 with "
    "pad_val=0 (so the padding is 0 in normalised space = the mean colour); "
    "EncoderDecoder.predict -> decode_head.predict_by_feat resizes the stride-8 "
    "head logits bilinearly (align_corners=False) to pad_shape (because img_shape "
    "is a tuple, not a torch.Size), postprocess_result crops the padding and "
    "resizes (bilinear, align_corners=False) to ori_shape.",
    "Original repo (mmseg 0.24.1) ADE20K test pipeline instead RESIZES the image "
    "to a multiple of 32 (ResizeToMultiple) and has no padding; its inference "
    "returns softmax probabilities resized to ori_shape. Cityscapes: slide "
    "inference 1024x1024 stride 768, no ResizeToMultiple.",
    "NMF2D sets inv_t = 1 in __init__ (the config's inv_t=100 is overridden); "
    "coef init = softmax(x^T bases) over R; eval uses eval_steps=7 multiplicative "
    "updates, then one more coef update (compute_coef); eps 1e-6 in denominators; "
    "bases are torch.rand L2-normalised over D, fresh on every forward (rand_init).",
    "Hamburger: relu(ham_in(x)) (1x1 conv with bias, no norm) -> NMF -> ham_out "
    "(1x1 conv no bias + GroupNorm(32)) -> relu(x + .); squeeze/align are 1x1 conv "
    "(no bias) + GN(32) + ReLU; stage 2-4 features are resized bilinearly "
    "(align_corners=False) to stage-2 size and concatenated; dropout2d 0.1 "
    "before conv_seg (inactive in eval).",
    "eps: BatchNorm 1e-5, GroupNorm 1e-5, stage LayerNorm 1e-5 (nn.LayerNorm "
    "default); GELU is exact (erf, approximate='none').",
    "MSCAN: StemConv = conv3x3 s2 p1 -> BN -> GELU -> conv3x3 s2 p1 -> BN; "
    "stages 2-4 OverlapPatchEmbed = conv3x3 s2 p1 -> BN; block: x + ls1 * "
    "attn(BN(x)), x + ls2 * mlp(BN(x)); attn = proj_1 -> GELU -> MSCA -> proj_2 "
    "+ shortcut (shortcut is the BN output); MSCA: a = dw5x5(u); a + "
    "(dw1x7->dw7x1)(a) + (dw1x11->dw11x1)(a) + (dw1x21->dw21x1)(a) -> conv1x1 -> "
    "* u; mlp = fc1 -> dw3x3 -> GELU -> fc2; LayerNorm over channels at the end "
    "of each stage.",
]


if __name__ == "__main__":
    main()
