#!/usr/bin/env python
"""Write reference fixtures of the FID Inception network (the TensorFlow
Inception graph of 2015-12-05) from the official PyTorch FID code, for the
numerical tests of kctx's Keras port.

Run from the repository root with a Python that has torch, torchvision,
torch-fidelity, pytorch-fid, clean-fid, pillow, numpy and scipy (kctx itself is
not needed; nothing is downloaded -- every network gets random weights)::

    /work/fidenv/bin/python tools/fid_fixtures.py [--out tests/fixtures/fid_inception]

It writes into ``tests/fixtures/fid_inception/`` (``--out``); see the
README.md there for the formats:

* ``random_inception.pth`` -- ``torch.save`` of a state dict of torch-fidelity's
  ``FeatureExtractorInceptionV3`` with random weights.  The same file loads with
  ``load_state_dict(strict=True)`` into pytorch-fid's ``fid_inception_v3()``
  network (the key sets are asserted equal).  It holds no
  ``num_batches_tracked`` entries (like the official converted weight files;
  torch's BatchNorm fills them in when a plain dict without ``_metadata`` is
  loaded).  Conv / linear weights ~ N(0, 1/fan_in), BatchNorm (eps 0.001)
  weight ~ U(0.5, 1.5), bias ~ N(0, 0.1^2), fc.bias ~ N(0, 0.1^2).  To keep
  the file small, every weight tensor with more than STRIDED_THRESHOLD (256)
  elements and at least two non-singleton dimensions is an overlapping
  ``torch.as_strided`` view of its own small random storage (``WeightFactory``,
  the scheme of tools/segnext_fixtures.py).  The BatchNorm running statistics
  are calibrated: one BatchNorm at a time, in execution order, is put in train
  mode with ``momentum=None`` while the network (all other BatchNorms in eval
  mode, the earlier ones already calibrated) runs torch-fidelity's own forward
  on CALIB_IMAGES random smooth uint8 images, stopped right after that
  BatchNorm; its running mean / (unbiased) variance are then exactly the batch
  statistics of its eval-mode input.
* ``images.npz`` -- ``small`` uint8 (5, 32, 32, 3) and ``large`` uint8
  (3, 400, 250, 3), NHWC: smooth random fields + edges + pixel noise, each
  stretched to the full 0..255 range.
* ``outputs.npz`` -- float32 ``{S}_{R}_pool3`` (N, 2048),
  ``{S}_{R}_logits_unbiased`` (N, 1008) and ``{S}_{R}_input`` (299, 299, 3)
  (the first image's network input, NHWC) for S in (small, large) and
  R in (tensorflow, pytorch_fid, clean), each made by the official code path:
  torch-fidelity's ``FeatureExtractorInceptionV3`` forward (TF1-compatible
  bilinear resize, (x - 128) / 128), pytorch-fid's ``InceptionV3`` forward
  (``F.interpolate`` bilinear, 2x - 1 on uint8 / 255), and clean-fid's PIL
  bicubic resizer followed by torch-fidelity's forward (see ``run_clean``).
* ``manifest.json`` -- versions, seeds, shapes, the state dict layout,
  calibration settings, feature statistics / sanity checks, FID / IS / KID
  values of torch-fidelity's and pytorch-fid's own metric functions on
  features that a test regenerates with NumPy alone (``METRIC_RECIPE``), and
  the SHA-256 of every other file.
* ``README.md`` -- what the files hold.

Deterministic: fixed seeds, one torch thread, deterministic algorithms, and
the .npz files are written with a fixed zip timestamp; rerunning gives
byte-identical files (the script prints the SHA-256 of each).
"""

import argparse
import collections
import contextlib
import hashlib
import json
import platform
import sys
import zipfile
from pathlib import Path

import numpy as np
import PIL
import scipy
import torch
import torch.nn as nn
import torchvision

import cleanfid
import cleanfid.resize
import pytorch_fid
import pytorch_fid.fid_score
import pytorch_fid.inception
import torch_fidelity
import torch_fidelity.feature_extractor_inceptionv3 as tfi
import torch_fidelity.metric_fid
import torch_fidelity.metric_isc
import torch_fidelity.metric_kid
from torch_fidelity.helpers import text_to_dtype
from torch_fidelity.interpolate_compat_tensorflow import interpolate_bilinear_2d_like_tensorflow1x
from torch_weights import STRIDE_PRIMES, STRIDED_THRESHOLD, WeightFactory

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "fid_inception"

WEIGHT_SEED = 20151205
IMAGE_SEED = 299
CALIB_IMAGE_SEED = 2048
CALIB_IMAGES = 16
CALIB_SIZE = (299, 299)  # calibration images are made at the network size
BN_EPS = 0.001
IMAGE_SHAPES = {"small": (5, 32, 32, 3), "large": (3, 400, 250, 3)}
RESIZES = ("tensorflow", "pytorch_fid", "clean")
NAME = "inception-v3-compat"  # torch-fidelity's registry name of the extractor
ZIP_DATE = (1980, 1, 1, 0, 0, 0)

METRIC_SEED = 2026
METRIC_RECIPE = (
    "rng = np.random.default_rng(2026); "
    "real = rng.standard_normal((500, 64)).astype(np.float32); "
    "generated = (1.2 * rng.standard_normal((400, 64)) + 0.3).astype(np.float32); "
    "logits = (3.0 * rng.standard_normal((1000, 1008))).astype(np.float32)  "
    "# drawn in this order"
)

torch.set_num_threads(1)
try:
    torch.use_deterministic_algorithms(True)
    DETERMINISTIC_ALGORITHMS = True
except Exception:  # pragma: no cover - depends on the torch build
    DETERMINISTIC_ALGORITHMS = False


def log(*args):
    print(*args, flush=True)


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def savez_compressed_fixed(path, **arrays):
    """``np.savez_compressed`` with a fixed zip timestamp (NumPy's uses the
    current time, so its bytes change from run to run).  Same format: each
    array is ``<name>.npy`` (``np.lib.format.write_array``) in a deflated,
    zip64 member; ``np.load`` reads it as usual."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, value in arrays.items():
            info = zipfile.ZipInfo(name + ".npy", date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o600 << 16
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)


# --------------------------------------------------------------------------
# Images.


def _upsample(field, h, w):
    """Separable linear interpolation of a (gh, gw, C) field to (h, w, C),
    grid corners on the image corners."""
    gh, gw, _ = field.shape
    ys = np.linspace(0.0, gh - 1.0, h)
    xs = np.linspace(0.0, gw - 1.0, w)
    rows = np.stack([np.stack([np.interp(ys, np.arange(gh), field[:, j, c])
                               for j in range(gw)], axis=1)
                     for c in range(field.shape[2])], axis=2)  # (h, gw, C)
    return np.stack([np.stack([np.interp(xs, np.arange(gw), rows[i, :, c])
                               for c in range(field.shape[2])], axis=1)
                     for i in range(h)], axis=0)  # (h, w, C)


def natural_images(rng, n, h, w):
    """n natural-ish uint8 (h, w, 3) images: a smooth luminance field and
    smooth colour fields (low-resolution noise, two octaves, linearly
    upsampled), two random half-plane edges and a rectangle of random colour,
    Gaussian pixel noise; each image stretched to exactly 0..255."""
    out = np.empty((n, h, w, 3), np.uint8)
    yy, xx = np.meshgrid(np.linspace(-1, 1, h), np.linspace(-1, 1, w), indexing="ij")
    for k in range(n):
        gh, gw = rng.integers(3, 7, size=2)
        lum = _upsample(rng.standard_normal((gh, gw, 1)), h, w)
        col = _upsample(rng.standard_normal((gh + 1, gw + 1, 3)), h, w)
        fine = _upsample(rng.standard_normal((4 * gh, 4 * gw, 3)), h, w)
        img = lum + 0.5 * col + 0.3 * fine
        for _ in range(2):
            angle = rng.uniform(0, 2 * np.pi)
            offset = rng.uniform(-0.5, 0.5)
            mask = (np.cos(angle) * xx + np.sin(angle) * yy) > offset
            img += mask[..., None] * rng.normal(0.0, 0.8, size=3)
        y0, x0 = rng.uniform(-1, 0.4, size=2)
        y1, x1 = y0 + rng.uniform(0.2, 0.8), x0 + rng.uniform(0.2, 0.8)
        rect = (yy > y0) & (yy < y1) & (xx > x0) & (xx < x1)
        img += rect[..., None] * rng.normal(0.0, 1.0, size=3)
        img += rng.normal(0.0, 0.05, size=img.shape)
        img = (img - img.min()) / (img.max() - img.min())
        out[k] = np.clip(np.rint(255.0 * img), 0, 255).astype(np.uint8)
    return out


def to_nchw_uint8(images):
    return torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))


# --------------------------------------------------------------------------
# Random weights.


_SKIP_LOAD = object()


class _Skeleton(tfi.FeatureExtractorInceptionV3):
    """torch-fidelity's extractor built without any weights (its constructor
    would download them): ``load_state_dict_from_url`` is patched to return
    a sentinel that this ``load_state_dict`` ignores."""

    def load_state_dict(self, state_dict, *args, **kwargs):
        if state_dict is _SKIP_LOAD:
            return None
        return super().load_state_dict(state_dict, *args, **kwargs)


@contextlib.contextmanager
def patched(module, name, value):
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def skeleton_extractor():
    calls = []

    def fake_load(url, *args, **kwargs):
        calls.append(url)
        return _SKIP_LOAD

    with patched(tfi, "load_state_dict_from_url", fake_load):
        model = _Skeleton(NAME, ["2048"])
    assert calls == [tfi.URL_INCEPTION_V3], calls
    return model


def random_state_dict(model, factory):
    """Random values for every state_dict entry except num_batches_tracked
    (running statistics: mean 0, var 1, replaced by the calibration)."""
    modules = dict(model.named_modules())
    out = collections.OrderedDict()
    for key, value in model.state_dict().items():
        mod_name, _, attr = key.rpartition(".")
        module = modules[mod_name]
        if attr == "num_batches_tracked":
            continue
        if isinstance(module, nn.Conv2d):
            assert attr == "weight" and module.bias is None, key
            out[key] = factory.make("weight", value.shape, module.weight[0].numel())
        elif isinstance(module, nn.Linear):
            if attr == "weight":
                out[key] = factory.make("weight", value.shape, module.in_features)
            else:
                out[key] = factory.make("bias", value.shape)
        elif isinstance(module, nn.BatchNorm2d):
            assert module.eps == BN_EPS, (key, module.eps)
            if attr == "weight":
                out[key] = factory.make("norm_weight", value.shape)
            elif attr == "bias":
                out[key] = factory.make("bias", value.shape)
            elif attr == "running_mean":
                out[key] = torch.zeros(value.shape)
            elif attr == "running_var":
                out[key] = torch.ones(value.shape)
            else:
                raise ValueError(key)
        else:
            raise ValueError(f"no rule for {type(module).__name__} {key}")
        assert tuple(out[key].shape) == tuple(value.shape), key
    return out


class _StopForward(Exception):
    pass


def bn_execution_order(model, images):
    """(name, module) of every BatchNorm2d in the order the forward runs them."""
    names = {m: n for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)}
    order = []
    hooks = [m.register_forward_pre_hook(lambda mod, inp: order.append(mod)) for m in names]
    with torch.no_grad():
        model(images[:1])
    for h in hooks:
        h.remove()
    assert len(order) == len(names) == len(set(order)), (len(order), len(names))
    return [(names[m], m) for m in order]


def calibrate(model, images):
    """Calibrate each BatchNorm's running statistics on its eval-mode input
    (see the module docstring); ``images`` is a uint8 NCHW batch fed through
    torch-fidelity's own forward (resize + (x - 128) / 128 included)."""
    model.eval()
    order = bn_execution_order(model, images)

    def stop(mod, inp, out):
        raise _StopForward

    for name, bn in order:
        bn.reset_running_stats()
        bn.momentum = None
        bn.train()
        hook = bn.register_forward_hook(stop)
        try:
            with torch.no_grad():
                model(images)
        except _StopForward:
            pass
        else:  # pragma: no cover
            raise AssertionError(f"{name} never ran")
        hook.remove()
        bn.eval()
        bn.momentum = 0.1
        assert int(bn.num_batches_tracked) == 1, name
    return [name for name, _ in order]


# --------------------------------------------------------------------------
# The official networks.


def torch_fidelity_extractor(weights_path):
    return tfi.FeatureExtractorInceptionV3(
        NAME, ["2048", "logits_unbiased"], feature_extractor_weights_path=str(weights_path))


def torch_fidelity_extractor_float64(weights_path):
    """torch-fidelity's extractor computing in float64 (outputs still cast to
    float32 by its forward).  Its ``feature_extractor_internal_dtype="float64"``
    does not do this: ``torch_fidelity.helpers.text_to_dtype`` maps "float64"
    to torch.float32 (torch-fidelity 0.4.0 and its current master), so the
    module is converted by hand."""
    fe = torch_fidelity_extractor(weights_path)
    fe.to(torch.float64)
    fe.feature_extractor_internal_dtype = torch.float64
    return fe


def pytorch_fid_model(state_dict):
    """pytorch-fid's InceptionV3([3]) (fid_inception_v3 inside, which loads
    ``state_dict`` strictly through the patched ``load_state_dict_from_url``)."""
    calls = []

    def fake_load(url, *args, **kwargs):
        calls.append(url)
        return collections.OrderedDict((k, v.clone()) for k, v in state_dict.items())

    with patched(pytorch_fid.inception, "load_state_dict_from_url", fake_load):
        model = pytorch_fid.inception.InceptionV3(
            [3], resize_input=True, normalize_input=True, use_fid_inception=True)
    assert calls == [pytorch_fid.inception.FID_WEIGHTS_URL], calls
    return model.eval()


def pytorch_fid_inner_state_dict_keys(state_dict):
    """state_dict() keys of pytorch-fid's fid_inception_v3() network."""
    def fake_load(url, *args, **kwargs):
        return collections.OrderedDict((k, v.clone()) for k, v in state_dict.items())

    with patched(pytorch_fid.inception, "load_state_dict_from_url", fake_load):
        net = pytorch_fid.inception.fid_inception_v3()
    return list(net.state_dict().keys())


class InputRecorder:
    """Forward pre-hook keeping the first call's input of a module."""

    def __init__(self, module):
        self.value = None
        self.handle = module.register_forward_pre_hook(self)

    def __call__(self, module, inputs):
        if self.value is None:
            self.value = inputs[0].detach().clone()

    def pop(self):
        self.handle.remove()
        return self.value


def run_tensorflow(fe, images):
    rec = InputRecorder(fe.Conv2d_1a_3x3)
    with torch.no_grad():
        pool3, logits = fe(to_nchw_uint8(images))
    return pool3, logits, rec.pop()


def run_pytorch_fid(model, fc_weight, images):
    # pytorch-fid's ImagePathDataset uses torchvision's ToTensor: uint8 / 255.
    x = to_nchw_uint8(images).to(torch.float32) / 255
    rec = InputRecorder(model.blocks[0][0])
    with torch.no_grad():
        (pool3,) = model(x)
        pool3 = pool3.flatten(1)
        logits = pool3.mm(fc_weight.T)
    return pool3, logits, rec.pop()


def clean_resize(images):
    """clean-fid's "clean" resizer, per HWC uint8 image -> float32 0..255."""
    fn = cleanfid.resize.make_resizer("PIL", False, "bicubic", (299, 299))
    return np.stack([fn(img) for img in images]).astype(np.float32)


def run_clean(fe, images):
    """clean-fid resize, then torch-fidelity's own forward.  Its forward
    insists on uint8 and resizes with the TF1-compatible bilinear
    interpolation; the uint8 originals are passed as a placeholder and the
    module's ``interpolate_bilinear_2d_like_tensorflow1x`` is patched to return
    the PIL-resized float batch (0..255), so the (x - 128) / 128 and all layers
    are torch-fidelity's code.  (For a 299x299 input the TF1 resize is the
    identity anyway -- checked in ``main``.)"""
    resized = torch.from_numpy(clean_resize(images).transpose(0, 3, 1, 2).copy())
    placeholder = to_nchw_uint8(images)

    def fake_resize(x, size=None, align_corners=None, **kwargs):
        assert tuple(x.shape) == tuple(placeholder.shape) and size == (299, 299), (x.shape, size)
        assert align_corners is False
        return resized.to(x.dtype)

    rec = InputRecorder(fe.Conv2d_1a_3x3)
    with patched(tfi, "interpolate_bilinear_2d_like_tensorflow1x", fake_resize), torch.no_grad():
        pool3, logits = fe(placeholder)
    return pool3, logits, rec.pop()


def stats(a):
    a = np.asarray(a, np.float64)
    return {"min": float(a.min()), "max": float(a.max()), "mean": float(a.mean()),
            "std": float(a.std())}


def check_features(tag, pool3, logits):
    """Healthy spread: finite, not constant, logits not all equal."""
    p, lg = pool3.numpy().astype(np.float64), logits.numpy().astype(np.float64)
    assert np.isfinite(p).all() and np.isfinite(lg).all(), tag
    const = int((p.std(axis=0) == 0).sum())
    zero = float((p == 0).mean())
    info = {"pool3": stats(p), "logits_unbiased": stats(lg),
            "pool3_features_constant_over_images": const,
            "pool3_fraction_exact_zero": zero,
            "logits_std_over_classes_min": float(lg.std(axis=1).min()),
            "pool3_std_over_images_mean": float(p.std(axis=0).mean())}
    log(f"  {tag}: pool3 min {p.min():.4g} mean {p.mean():.4g} std {p.std():.4g} "
        f"(constant over images: {const}, exact zeros: {zero:.3%}); logits min {lg.min():.4g} "
        f"mean {lg.mean():.4g} std {lg.std():.4g}")
    assert p.std() > 1e-2 and const < 0.02 * p.shape[1], (tag, info)
    assert info["logits_std_over_classes_min"] > 1e-3, (tag, info)
    return info


# --------------------------------------------------------------------------
# Metrics.


def metric_values():
    rng = np.random.default_rng(METRIC_SEED)
    real = rng.standard_normal((500, 64)).astype(np.float32)
    generated = (1.2 * rng.standard_normal((400, 64)) + 0.3).astype(np.float32)
    logits = (3.0 * rng.standard_normal((1000, 1008))).astype(np.float32)

    mf = torch_fidelity.metric_fid
    s1 = mf.fid_features_to_statistics(torch.from_numpy(real))
    s2 = mf.fid_features_to_statistics(torch.from_numpy(generated))
    fid_tf = mf.fid_statistics_to_metric(s1, s2, verbose=False)[mf.KEY_METRIC_FID]
    fid_pf = float(pytorch_fid.fid_score.calculate_frechet_distance(
        np.mean(real, axis=0), np.cov(real, rowvar=False),
        np.mean(generated, axis=0), np.cov(generated, rowvar=False)))

    mi = torch_fidelity.metric_isc
    isc_plain = mi.isc_features_to_metric(torch.from_numpy(logits), splits=10, shuffle=False)
    isc_shuf = mi.isc_features_to_metric(torch.from_numpy(logits), splits=10, shuffle=True,
                                         rng_seed=2020)
    mk = torch_fidelity.metric_kid
    kid_kwargs = dict(kid_kernel="poly", kid_kernel_poly_degree=3, kid_kernel_poly_gamma=None,
                      kid_kernel_poly_coef0=1, rng_seed=2020, verbose=False)
    kid_10 = mk.kid_features_to_metric(torch.from_numpy(real), torch.from_numpy(generated),
                                       kid_subsets=10, kid_subset_size=100, **kid_kwargs)
    kid_5 = mk.kid_features_to_metric(torch.from_numpy(real), torch.from_numpy(generated),
                                      kid_subsets=5, kid_subset_size=400, **kid_kwargs)

    def isc(d):
        return {"mean": d[mi.KEY_METRIC_ISC_MEAN], "std": d[mi.KEY_METRIC_ISC_STD]}

    def kid(d):
        return {"mean": d[mk.KEY_METRIC_KID_MEAN], "std": d[mk.KEY_METRIC_KID_STD]}

    return {
        "recipe": METRIC_RECIPE,
        "seed": METRIC_SEED,
        "shapes": {"real": list(real.shape), "generated": list(generated.shape),
                   "logits": list(logits.shape)},
        "fid": {
            "torch_fidelity": fid_tf,
            "torch_fidelity_call": "fid_statistics_to_metric(fid_features_to_statistics("
                                   "torch.from_numpy(real)), fid_features_to_statistics("
                                   "torch.from_numpy(generated)), verbose=False)"
                                   "['frechet_inception_distance']  # mu float32 (np.mean of "
                                   "float32), sigma float64 (np.cov)",
            "pytorch_fid": fid_pf,
            "pytorch_fid_call": "calculate_frechet_distance(np.mean(real, 0), np.cov(real, "
                                "rowvar=False), np.mean(generated, 0), np.cov(generated, "
                                "rowvar=False))  # scipy.linalg.sqrtm",
            "abs_difference": abs(fid_tf - fid_pf),
        },
        "isc": {
            "splits_10_shuffle_false": isc(isc_plain),
            "splits_10_shuffle_true_seed_2020": isc(isc_shuf),
            "call": "isc_features_to_metric(torch.from_numpy(logits), splits=10, shuffle=..., "
                    "rng_seed=2020)  # float64 softmax; shuffle: "
                    "np.random.RandomState(rng_seed).permutation(N)",
        },
        "kid": {
            "subsets_10_size_100": kid(kid_10),
            "subsets_5_size_400": kid(kid_5),
            "call": "kid_features_to_metric(torch.from_numpy(real), torch.from_numpy(generated), "
                    "kid_subsets=..., kid_subset_size=..., rng_seed=2020, kid_kernel='poly', "
                    "kid_kernel_poly_degree=3, kid_kernel_poly_gamma=None, "
                    "kid_kernel_poly_coef0=1, verbose=False)  # subsets: "
                    "np.random.RandomState(2020).choice(n, size, replace=False), real then "
                    "generated, per subset; kernels in float32 (float32 features), mmd2 "
                    "unbiased",
        },
    }


# --------------------------------------------------------------------------


README = """# FID Inception reference fixtures (official PyTorch FID code)

Reference data for kctx's Keras port of the FID Inception network (the
TensorFlow Inception graph of 2015-12-05, as torch-fidelity's
`FeatureExtractorInceptionV3` and pytorch-fid's `fid_inception_v3()` port it)
and of the FID / IS / KID metrics. All weights are random; nothing here is a
trained model and nothing was downloaded.

## How they were made

```
/work/fidenv/bin/python tools/fid_fixtures.py
```

run from the repository root (`--out` to write elsewhere), in a venv with
torch, torchvision, torch-fidelity, pytorch-fid, clean-fid, pillow, numpy and
scipy from PyPI (kctx not needed). Deterministic (fixed seeds, one torch
thread, deterministic algorithms, fixed zip timestamps): a rerun writes
byte-identical files. Versions: {versions}.

## Files

| file | bytes | sha256 (first 16) | what |
| --- | ---: | --- | --- |
{file_rows}

### `random_inception.pth`

`torch.save` of a plain `OrderedDict` (no `_metadata`) with the
{n_keys} entries of torch-fidelity's `FeatureExtractorInceptionV3` state dict
minus the {n_nbt} `num_batches_tracked` buffers (both torch-fidelity's and
pytorch-fid's networks have them; torch's BatchNorm fills them in on loading,
so `load_state_dict(strict=True)` works). The key set is exactly that of
pytorch-fid's `fid_inception_v3()` (torchvision's `Inception3` with the FID
blocks), minus `num_batches_tracked`; the file loads strictly into both.
Keys: `Conv2d_1a_3x3.conv.weight`, `Conv2d_1a_3x3.bn.{{weight,bias,running_mean,running_var}}`,
..., `Mixed_7c.branch_pool.bn.running_var`, `fc.weight` (1008, 2048), `fc.bias`
(1008). Convs have no bias; BatchNorm eps is 0.001.

Random weights: conv / fc weights ~ N(0, 1/fan_in), fc.bias ~ N(0, 0.1²),
BatchNorm weight ~ U(0.5, 1.5), bias ~ N(0, 0.1²) (seed {weight_seed}).
Every weight tensor with more than 256 elements and at least two non-singleton
dimensions is an overlapping `torch.as_strided` view of its own small random
storage (distinct prime strides, non-monotone when three or more), so the
file is small yet an axis swap / kernel transpose / flip changes the values;
`manifest.json` (`state_dict.strided_views`) lists each view's strides.
BatchNorm running statistics are calibrated, one BatchNorm at a time in
execution order: that BatchNorm in train mode with `momentum=None`, all others
in eval mode (the earlier ones already calibrated), torch-fidelity's forward
on {calib_n} random smooth uint8 299×299 images (seed {calib_seed}), stopped
after that BatchNorm; so each `running_mean` / `running_var` (unbiased) is
the exact statistics of its eval-mode input.

### `images.npz`

uint8 NHWC: `small` {small_shape} (upsampled to 299) and `large` {large_shape}
(height downsampled, width upsampled). Natural-ish: smooth random fields
(low-resolution noise, linearly upsampled), two half-plane edges, a rectangle,
pixel noise; each image stretched to exactly 0..255 (NumPy
`default_rng({image_seed})`, small then large).

### `outputs.npz`

float32. For S in `small`, `large` and R in `tensorflow`, `pytorch_fid`, `clean`:

* `{{S}}_{{R}}_pool3` (N, 2048): the pool3 features;
* `{{S}}_{{R}}_logits_unbiased` (N, 1008): pool3 @ fc.weight.T (no bias);
* `{{S}}_{{R}}_input` (299, 299, 3): the FIRST image's network input (after
  resize and normalisation, what `Conv2d_1a_3x3` receives), NHWC.

How (official code, from the uint8 images):

* `tensorflow`: torch-fidelity's `FeatureExtractorInceptionV3(name, ["2048",
  "logits_unbiased"], feature_extractor_weights_path=random_inception.pth)` on
  the uint8 NCHW batch: `x.to(float32)`,
  `interpolate_bilinear_2d_like_tensorflow1x(x, size=(299, 299), align_corners=False)`
  (TF1 `resize_bilinear`, half_pixel_centers=False: source = dst · in/out, no
  antialiasing), then `(x - 128) / 128`.
* `pytorch_fid`: pytorch-fid's `InceptionV3([3], resize_input=True,
  normalize_input=True, use_fid_inception=True)` (weights = this file) on
  `uint8.to(float32) / 255` (what its `ToTensor` gives):
  `F.interpolate(x, size=(299, 299), mode="bilinear", align_corners=False)`
  (half-pixel centres, no antialiasing), then `2 * x - 1`; logits from its
  pool3 times `fc.weight.T` in torch float32.
* `clean`: clean-fid's `make_resizer("PIL", False, "bicubic", (299, 299))` per
  HWC image (each channel a float32 PIL 'F' image, `Image.BICUBIC`, clipped to
  0..255), then torch-fidelity's own forward with its TF1 resize patched to
  return this float batch (its forward insists on uint8 input; at 299→299 the
  TF1 resize is the identity anyway), i.e. `(x - 128) / 128` and the layers.
  (clean-fid itself would then run NVIDIA's TorchScript Inception with the
  same `(x - 128) / 128`.)

### `manifest.json`

Versions, seeds, shapes, the state-dict keys with shapes (sorted) and the
strided views, whether the networks have `num_batches_tracked`, calibration
settings, feature statistics and sanity checks (`checks`: e.g. the max
difference between resizes, the float32-vs-float64 error of torch-fidelity's
network), the SHA-256 of the other files, and `metrics`: FID, IS and KID
values from torch-fidelity's and pytorch-fid's own functions on features a
test regenerates with NumPy alone (`metrics.recipe`):

```
{recipe}
```

{metric_lines}
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    checks = {}

    versions = {
        "python": platform.python_version(), "torch": torch.__version__,
        "torchvision": torchvision.__version__, "torch_fidelity": torch_fidelity.__version__,
        "pytorch_fid": pytorch_fid.__version__,
        "clean_fid": _dist_version("clean-fid"), "PIL": PIL.__version__,
        "numpy": np.__version__, "scipy": scipy.__version__,
    }
    log("versions:", versions)

    # ---- images
    rng = np.random.default_rng(IMAGE_SEED)
    images = {s: natural_images(rng, shape[0], shape[1], shape[2])
              for s, shape in IMAGE_SHAPES.items()}
    for s, im in images.items():
        assert im.shape == IMAGE_SHAPES[s] and im.dtype == np.uint8
        assert all(int(x.min()) == 0 and int(x.max()) == 255 for x in im), s
    calib = natural_images(np.random.default_rng(CALIB_IMAGE_SEED), CALIB_IMAGES, *CALIB_SIZE)

    # ---- weights + calibration
    log("building random weights ...")
    skel = skeleton_extractor()
    sd = random_state_dict(skel, WeightFactory(WEIGHT_SEED))
    missing, unexpected = nn.Module.load_state_dict(skel, sd, strict=False)
    assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing)
    log(f"calibrating {sum(isinstance(m, nn.BatchNorm2d) for m in skel.modules())} "
        f"BatchNorms on {CALIB_IMAGES} images ...")
    bn_order = calibrate(skel, to_nchw_uint8(calib))
    final = skel.state_dict()
    for key in sd:
        if "running_" in key:
            sd[key] = final[key].detach().clone().contiguous()
    sd = collections.OrderedDict(sd)  # plain: no _metadata
    assert not hasattr(sd, "_metadata")
    pth = out / "random_inception.pth"
    torch.save(sd, pth)
    loaded = torch.load(pth, weights_only=True)
    assert list(loaded) == list(sd)
    for k in sd:
        assert torch.equal(loaded[k], sd[k]) and loaded[k].stride() == sd[k].stride(), k
    log(f"wrote {pth} ({pth.stat().st_size:,} bytes)")

    # ---- key sets
    tf_keys = list(skel.state_dict().keys())
    pf_keys = pytorch_fid_inner_state_dict_keys(sd)
    nbt = lambda keys: [k for k in keys if k.endswith("num_batches_tracked")]  # noqa: E731
    drop = lambda keys: [k for k in keys if not k.endswith("num_batches_tracked")]  # noqa: E731
    assert set(drop(tf_keys)) == set(drop(pf_keys)) == set(sd), (
        set(drop(tf_keys)) ^ set(drop(pf_keys)), set(sd) ^ set(drop(tf_keys)))
    checks["state_dict_keys"] = {
        "torch_fidelity_equals_pytorch_fid_fid_inception_v3": set(tf_keys) == set(pf_keys),
        "same_order": drop(tf_keys) == drop(pf_keys),
        "torch_fidelity_num_batches_tracked": len(nbt(tf_keys)),
        "pytorch_fid_num_batches_tracked": len(nbt(pf_keys)),
        "fixture_num_batches_tracked": len(nbt(list(sd))),
        "note": "the file has no num_batches_tracked; both networks have one per BatchNorm "
                "and BatchNorm._load_from_state_dict fills them in (state dict without "
                "_metadata -> version None), so strict loading works into both. pytorch-fid's "
                "InceptionV3 wrapper itself has other keys (blocks.0.0.conv.weight, ..., no "
                "fc): the file loads into fid_inception_v3() inside it.",
    }
    log("key check:", checks["state_dict_keys"])

    # ---- official networks
    fe = torch_fidelity_extractor(pth)  # loads the file strictly
    fe64 = torch_fidelity_extractor_float64(pth)
    checks["torch_fidelity_text_to_dtype_float64"] = (
        f"{text_to_dtype('float64')} (feature_extractor_internal_dtype='float64' "
        "is mapped to this by torch_fidelity.helpers.text_to_dtype; the float64 reference "
        "below converts the module by hand)")
    pfm = pytorch_fid_model(sd)  # loads the dict strictly into fid_inception_v3()
    fc_weight = fe.fc.weight.detach()

    x299 = torch.from_numpy(calib[:2].transpose(0, 3, 1, 2).astype(np.float32))
    identity = torch.equal(interpolate_bilinear_2d_like_tensorflow1x(
        x299, size=(299, 299), align_corners=False), x299)
    assert identity
    checks["tf1_resize_299_to_299_is_identity"] = identity

    log("computing outputs ...")
    outputs = {}
    feature_stats = {}
    for s, im in images.items():
        results = {
            "tensorflow": run_tensorflow(fe, im),
            "pytorch_fid": run_pytorch_fid(pfm, fc_weight, im),
            "clean": run_clean(fe, im),
        }
        for r in RESIZES:
            pool3, logits, inp = results[r]
            assert pool3.shape == (len(im), 2048) and logits.shape == (len(im), 1008)
            assert inp.shape == (len(im), 3, 299, 299), inp.shape
            feature_stats[f"{s}_{r}"] = check_features(f"{s}_{r}", pool3, logits)
            feature_stats[f"{s}_{r}"]["input"] = stats(inp[0])
            outputs[f"{s}_{r}_pool3"] = pool3.numpy().astype(np.float32)
            outputs[f"{s}_{r}_logits_unbiased"] = logits.numpy().astype(np.float32)
            outputs[f"{s}_{r}_input"] = inp[0].permute(1, 2, 0).numpy().astype(np.float32)
        # sanity: the resizes differ
        for a, b in (("tensorflow", "pytorch_fid"), ("tensorflow", "clean"), ("pytorch_fid", "clean")):
            dp = float(np.abs(outputs[f"{s}_{a}_pool3"] - outputs[f"{s}_{b}_pool3"]).max())
            di = float(np.abs(outputs[f"{s}_{a}_input"] - outputs[f"{s}_{b}_input"]).max())
            checks[f"{s}_max_abs_diff_pool3_{a}_vs_{b}"] = dp
            checks[f"{s}_max_abs_diff_input_{a}_vs_{b}"] = di
            log(f"  {s}: max |pool3 {a} - {b}| = {dp:.4g}, max |input diff| = {di:.4g}")
            assert dp > 1e-3, (s, a, b, dp)
        # the pytorch_fid logits equal torch-fidelity's own fc on its features?
        # (same op: pool3.mm(fc.weight.T)); and a float64-internal reference
        with torch.no_grad():
            p64, l64 = fe64(to_nchw_uint8(im))
        for name, v32, v64 in (("pool3", outputs[f"{s}_tensorflow_pool3"], p64.numpy()),
                               ("logits_unbiased", outputs[f"{s}_tensorflow_logits_unbiased"],
                                l64.numpy())):
            err = float(np.abs(v32.astype(np.float64) - v64).max())
            scale = float(np.abs(v64).max())
            checks[f"{s}_tensorflow_{name}_float32_vs_float64_internal"] = {
                "max_abs_err": err, "max_abs": scale, "relative": err / scale}
            log(f"  {s}: {name} float32 vs float64-internal: max abs err {err:.3g} "
                f"(max abs {scale:.3g}, relative {err / scale:.3g})")

    # ---- write arrays
    img_path = out / "images.npz"
    savez_compressed_fixed(img_path, **images)
    out_path = out / "outputs.npz"
    savez_compressed_fixed(out_path, **outputs)
    with np.load(out_path) as z:
        assert sorted(z.files) == sorted(outputs)
        assert all(np.array_equal(z[k], v) for k, v in outputs.items())

    # ---- metrics
    log("metrics ...")
    metrics = metric_values()
    log(json.dumps(metrics["fid"], indent=1))
    log(json.dumps({k: v for k, v in metrics["isc"].items() if k != "call"}))
    log(json.dumps({k: v for k, v in metrics["kid"].items() if k != "call"}))

    # ---- manifest
    files = {}
    for p in (pth, img_path, out_path):
        files[p.name] = {"bytes": p.stat().st_size, "sha256": sha256(p)}
    strided = {k: {"stride": list(v.stride()), "storage_numel": v.untyped_storage().nbytes() // 4}
               for k, v in sd.items() if not v.is_contiguous()}
    manifest = {
        "description": "Reference fixtures of the FID Inception network (TF graph 2015-12-05) "
                       "from torch-fidelity / pytorch-fid / clean-fid with random weights; "
                       "written by tools/fid_fixtures.py.",
        "command": "/work/fidenv/bin/python tools/fid_fixtures.py",
        "versions": versions,
        "seeds": {"weights (torch.Generator)": WEIGHT_SEED,
                  "images (np.random.default_rng; small then large)": IMAGE_SEED,
                  "calibration images (np.random.default_rng)": CALIB_IMAGE_SEED,
                  "metrics (np.random.default_rng)": METRIC_SEED},
        "torch_settings": {"num_threads": 1,
                           "use_deterministic_algorithms": DETERMINISTIC_ALGORITHMS},
        "files": files,
        "images": {s: {"shape": list(v.shape), "dtype": "uint8", "layout": "NHWC"}
                   for s, v in images.items()},
        "outputs": {k: {"shape": list(v.shape), "dtype": "float32"} for k, v in outputs.items()},
        "resizes": {
            "tensorflow": "torch-fidelity FeatureExtractorInceptionV3 forward: x.to(float32); "
                          "interpolate_bilinear_2d_like_tensorflow1x(x, size=(299, 299), "
                          "align_corners=False); (x - 128) / 128",
            "pytorch_fid": "pytorch-fid InceptionV3([3], resize_input=True, normalize_input=True) "
                           "on uint8.to(float32) / 255: F.interpolate(x, size=(299, 299), "
                           "mode='bilinear', align_corners=False); 2 * x - 1; logits_unbiased = "
                           "pool3.mm(fc.weight.T) in torch float32",
            "clean": "cleanfid.resize.make_resizer('PIL', False, 'bicubic', (299, 299)) per HWC "
                     "uint8 image (float32 PIL 'F' image per channel, Image.BICUBIC, clip 0..255); "
                     "then torch-fidelity's forward with its TF1 resize patched to return that "
                     "float batch: (x - 128) / 128 and the layers",
        },
        "state_dict": {
            "n_entries": len(sd),
            "n_parameters": int(sum(v.numel() for v in sd.values())),
            "bn_eps": BN_EPS,
            "keys": [[k, list(sd[k].shape)] for k in sorted(sd)],
            "strided_views": strided,
            "strided_threshold": STRIDED_THRESHOLD,
            "stride_primes": list(STRIDE_PRIMES),
            "distributions": {"conv/fc weight": "N(0, 1/fan_in)", "fc.bias": "N(0, 0.1^2)",
                              "bn.weight": "U(0.5, 1.5)", "bn.bias": "N(0, 0.1^2)",
                              "bn.running_mean/var": "calibrated"},
        },
        "num_batches_tracked": checks["state_dict_keys"],
        "calibration": {
            "images": CALIB_IMAGES, "size": list(CALIB_SIZE),
            "image_seed": CALIB_IMAGE_SEED,
            "generator": "natural_images() as for images.npz, then torch-fidelity's forward "
                         "(TF1 resize 299->299 = identity, (x - 128) / 128)",
            "method": "for each BatchNorm in execution order: reset_running_stats(), "
                      "momentum=None, train mode, all others eval; forward on the calibration "
                      "batch stopped right after it (running stats = its input's batch mean and "
                      "unbiased variance over N*H*W); then eval. BN momentum restored to 0.1.",
            "order": bn_order,
        },
        "feature_stats": feature_stats,
        "checks": checks,
        "metrics": metrics,
    }
    man_path = out / "manifest.json"
    man_path.write_text(json.dumps(manifest, indent=1) + "\n")

    # ---- README
    whats = {
        "random_inception.pth": "random-weight state dict (torch-fidelity / pytorch-fid layout)",
        "images.npz": "uint8 test images `small`, `large` (NHWC)",
        "outputs.npz": "float32 pool3 / logits_unbiased / first input per image set and resize",
        "manifest.json": "versions, seeds, key layout, calibration, checks, metric values",
    }
    rows = [f"| `{n}` | {f['bytes']:,} | `{f['sha256'][:16]}` | {whats[n]} |"
            for n, f in files.items()]
    rows.append(f"| `manifest.json` | {man_path.stat().st_size:,} | `{sha256(man_path)[:16]}` | "
                f"{whats['manifest.json']} |")
    m = metrics
    metric_lines = "\n".join([
        f"* FID: torch-fidelity {m['fid']['torch_fidelity']!r}, pytorch-fid "
        f"{m['fid']['pytorch_fid']!r}",
        f"* IS (10 splits): no shuffle {m['isc']['splits_10_shuffle_false']['mean']!r} ± "
        f"{m['isc']['splits_10_shuffle_false']['std']!r}; shuffled (seed 2020) "
        f"{m['isc']['splits_10_shuffle_true_seed_2020']['mean']!r} ± "
        f"{m['isc']['splits_10_shuffle_true_seed_2020']['std']!r}",
        f"* KID (poly, degree 3, gamma 1/64, coef0 1, seed 2020): 10 subsets of 100 "
        f"{m['kid']['subsets_10_size_100']['mean']!r} ± {m['kid']['subsets_10_size_100']['std']!r}; "
        f"5 subsets of 400 {m['kid']['subsets_5_size_400']['mean']!r} ± "
        f"{m['kid']['subsets_5_size_400']['std']!r}",
    ])
    readme = README.format(
        versions=", ".join(f"{k} {v}" for k, v in versions.items()),
        file_rows="\n".join(rows), n_keys=len(sd), n_nbt=len(nbt(tf_keys)),
        weight_seed=WEIGHT_SEED, calib_n=CALIB_IMAGES, calib_seed=CALIB_IMAGE_SEED,
        small_shape=IMAGE_SHAPES["small"], large_shape=IMAGE_SHAPES["large"],
        image_seed=IMAGE_SEED, recipe=METRIC_RECIPE.replace("; ", "\n"),
        metric_lines=metric_lines)
    (out / "README.md").write_text(readme)

    total = 0
    for p in sorted(out.iterdir()):
        total += p.stat().st_size
        log(f"{p.name:24s} {p.stat().st_size:>10,}  {sha256(p)}")
    log(f"total {total:,} bytes")


def _dist_version(name):
    from importlib.metadata import version
    return version(name)


if __name__ == "__main__":
    sys.exit(main())
