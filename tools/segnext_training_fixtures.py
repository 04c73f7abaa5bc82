#!/usr/bin/env python
"""Write the SegNeXt training-step fixtures from the official code (mmsegmentation 1.2.2):
what kctx's segmentation training step must reproduce (tests/test_segnext_training.py).

Run with the tools' environment (torch, mmengine, mmcv-lite 2.1.0, mmsegmentation 1.2.2;
see tools/segnext_fixtures.py)::

    python tools/segnext_training_fixtures.py

The model is the reduced SegNeXt of ``tests/fixtures/segnext`` (MSCAN with embed dims
16 / 32 / 64 / 96 and depths 1 / 1 / 2 / 1, the LightHamHead at 64 channels, r = 8, 7
classes) in training mode, built from mmseg's shipped
``segnext_mscan-t_1xb16-adamw-160k_ade20k-512x512`` config with BatchNorm for SyncBN,
the official initialisation (``init_weights``) and, so that a step is a deterministic
function of its inputs, no drop path and no dropout before the classifier (both
random). Three steps on three batches of two 64×64 images (uniform RGB 0–255, normalised
with the config's mean and std; labels uniform over the classes with a fifth of the
pixels 255, ignored), each: ``model.loss`` (the decode head's logits resized
bilinearly to the labels, cross-entropy as the config's ``CrossEntropyLoss``), backward,
then the config's ``optim_wrapper`` (AdamW, lr 6e-5, weight decay 0.01, mmengine's
paramwise ``custom_keys``) through ``build_optim_wrapper`` and mmengine's ``PolyLR``
(power 1, to 0 at 160k iterations; the config's linear warm-up is recorded apart, below,
so that the three steps take visible updates). The NMF's random dictionaries (a fresh
``torch.rand`` per sample and call in mmseg) are drawn from a seeded NumPy generator
and recorded, so kctx's step can use the same ones.

Writes to ``tests/fixtures/segnext_training/``:

* ``initial_mmseg.pth``: the initial state dict (official keys), loadable by kctx;
* ``steps.npz``: the images (RGB 0–255) and labels of each step, each step's NMF
  dictionaries, losses and learning rates, the gradient of every parameter at step 1
  (``grad/<key>``), every parameter and BatchNorm buffer after step 3 (``after/<key>``),
  and the config's full learning-rate schedule (linear warm-up then poly) at chosen
  iterations (``schedule_iterations``, ``schedule_lr``);
* ``settings.json``: the settings above, the versions, each parameter's learning-rate
  and weight-decay multipliers as mmengine set them.
"""

import argparse
import copy
import json
from pathlib import Path

import numpy as np

import segnext_fixtures as official  # beside this script: the mmseg environment and model
import torch
from mmengine.optim import PolyLR, build_optim_wrapper
from mmengine.optim.optimizer import default_constructor
from mmengine.structures import PixelData
from mmseg.models.decode_heads import ham_head
from mmseg.structures import SegDataSample

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "segnext_training"
STEPS = 3
BATCH, SIZE, CLASSES = 2, 64, 7
IGNORE, IGNORED_FRACTION = 255, 0.2
SEED = 20261127
TOTAL_ITERS = 160_000
SCHEDULE_ITERATIONS = (0, 1, 2, 749, 1498, 1499, 1500, 1501, 80_000, 159_998, 159_999)


def config():
    """The reduced model's config: the tiny fixture's, no drop path, no dropout."""
    cfg = official.tiny_mmseg_model_cfg()
    cfg.backbone.drop_path_rate = 0.0
    cfg.decode_head.dropout_ratio = 0.0
    cfg.backbone.norm_cfg = dict(type="BN", requires_grad=True)
    return cfg


class RecordedBases:
    """``NMF2D._build_bases`` drawing from a seeded NumPy generator (uniform, L2-normalised
    over D, as mmseg's ``torch.rand`` + ``F.normalize``), recording every draw."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.draws = []

    def __call__(self, module, B, S, D, R, *args, **kwargs):
        raw = self.rng.uniform(size=(B * S, D, R))
        bases = raw / np.maximum(np.linalg.norm(raw, axis=1, keepdims=True), 1e-12)
        self.draws.append(bases.astype(np.float32))
        return torch.from_numpy(self.draws[-1].copy())


def schedule(base_lr):
    """The config's learning rate (LinearLR warm-up over 1,500 iterations from 1e-6 of it,
    then PolyLR to 0 at 160k) at :data:`SCHEDULE_ITERATIONS`, from mmengine's schedulers."""
    from mmengine.optim import LinearLR

    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([parameter], lr=base_lr)
    schedulers = [LinearLR(optimizer, start_factor=1e-6, by_epoch=False, begin=0, end=1500),
                  PolyLR(optimizer, power=1.0, eta_min=0.0, by_epoch=False, begin=1500,
                         end=TOTAL_ITERS)]
    wanted, values = set(SCHEDULE_ITERATIONS), {}
    for iteration in range(max(SCHEDULE_ITERATIONS) + 1):
        if iteration in wanted:
            values[iteration] = optimizer.param_groups[0]["lr"]
        for scheduler in schedulers:
            scheduler.step()
    return [values[i] for i in SCHEDULE_ITERATIONS]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)

    cfg = config()
    model = official.build_mmseg(cfg)
    model.init_weights()
    model.train()
    initial = {key: value.detach().clone() for key, value in model.state_dict().items()}
    torch.save({"meta": {"note": "kctx training fixture (random initialisation)"},
                "state_dict": initial}, out / "initial_mmseg.pth")

    full = official.mmseg_config("t")
    # mmengine asks whether mmcv's compiled ops exist through pkgutil, which the stand-in
    # mmcv._ext (tools/official_mmseg.py) makes raise: they don't.
    default_constructor.mmcv_full_available = lambda: False
    wrapper = build_optim_wrapper(model, copy.deepcopy(full.optim_wrapper))
    poly = PolyLR(wrapper.optimizer, power=1.0, eta_min=0.0, by_epoch=False, begin=0,
                  end=TOTAL_ITERS)
    names = {id(p): n for n, p in model.named_parameters()}
    multipliers = {}
    base_lr, base_decay = full.optim_wrapper.optimizer.lr, full.optim_wrapper.optimizer.weight_decay
    for group in wrapper.optimizer.param_groups:
        for parameter in group["params"]:
            multipliers[names[id(parameter)]] = {
                "lr_mult": group["lr"] / base_lr,
                "decay_mult": group["weight_decay"] / base_decay if base_decay else 0.0}

    mean = torch.tensor(full.data_preprocessor.mean).view(1, 3, 1, 1)
    std = torch.tensor(full.data_preprocessor.std).view(1, 3, 1, 1)
    images = rng.uniform(0, 255, (STEPS, BATCH, SIZE, SIZE, 3)).astype(np.float32)
    labels = rng.integers(0, CLASSES, (STEPS, BATCH, SIZE, SIZE)).astype(np.int64)
    labels[rng.uniform(size=labels.shape) < IGNORED_FRACTION] = IGNORE
    bases = RecordedBases(SEED + 1)
    original = ham_head.NMF2D._build_bases
    ham_head.NMF2D._build_bases = lambda self, *a, **k: bases(self, *a, **k)
    arrays, losses, lrs = {}, [], []
    try:
        for step in range(STEPS):
            inputs = (torch.from_numpy(images[step]).permute(0, 3, 1, 2) - mean) / std
            samples = []
            for i in range(BATCH):
                sample = SegDataSample(metainfo=dict(img_shape=(SIZE, SIZE),
                                                     pad_shape=(SIZE, SIZE),
                                                     ori_shape=(SIZE, SIZE)))
                sample.gt_sem_seg = PixelData(data=torch.from_numpy(labels[step, i][None]))
                samples.append(sample)
            draws = len(bases.draws)
            loss, _ = model.parse_losses(model.loss(inputs, samples))
            assert len(bases.draws) == draws + 1, "one dictionary draw per step"
            loss.backward()
            if step == 0:
                for name, parameter in model.named_parameters():
                    arrays[f"grad/{name}"] = parameter.grad.detach().numpy().copy()
            # The scheduled rate: the groups without a multiplier (the backbone's) have it.
            lrs.append(min(group["lr"] for group in wrapper.optimizer.param_groups))
            wrapper.step()
            wrapper.zero_grad()
            poly.step()
            losses.append(float(loss))
            official.log(f"step {step + 1}: loss {float(loss):.6f}")
    finally:
        ham_head.NMF2D._build_bases = original
    for key, value in model.state_dict().items():
        if value.dtype.is_floating_point:
            arrays[f"after/{key}"] = value.detach().numpy().copy()
    np.savez_compressed(
        out / "steps.npz", images=images, labels=labels.astype(np.int32),
        bases=np.stack(bases.draws), losses=np.asarray(losses, np.float64),
        lrs=np.asarray(lrs, np.float64),
        schedule_iterations=np.asarray(SCHEDULE_ITERATIONS, np.int64),
        schedule_lr=np.asarray(schedule(base_lr), np.float64), **arrays)
    settings = {
        "model": official.settings_of(cfg), "steps": STEPS, "batch": BATCH, "size": SIZE,
        "num_classes": CLASSES, "ignore_index": IGNORE, "seed": SEED,
        "optim_wrapper": official.plain(full.optim_wrapper),
        "param_scheduler": official.plain(full.param_scheduler),
        "scheduler_here": {"type": "PolyLR", "power": 1.0, "eta_min": 0.0, "begin": 0,
                           "end": TOTAL_ITERS},
        "loss_decode": official.plain(cfg.decode_head.loss_decode),
        "multipliers": multipliers, "losses": losses,
        "versions": {"torch": torch.__version__, "mmseg": official.mmseg.__version__,
                     "mmcv": official.mmcv.__version__,
                     "mmengine": official.mmengine.__version__, "numpy": np.__version__},
    }
    (out / "settings.json").write_text(json.dumps(settings, indent=1) + "\n")
    official.log(f"wrote {out}")


if __name__ == "__main__":
    main()
