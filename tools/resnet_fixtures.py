"""Write the torchvision ResNet fixtures of tests/test_resnet.py (needs PyTorch and torchvision).

Run from the repository root, in an environment with torch and torchvision
(kctx itself never imports them)::

    /work/tvenv/bin/python tools/resnet_fixtures.py [--out tests/fixtures/resnet]

It writes, deterministically (fixed seeds, CPU):

- ``resnet50_torchvision.pth``, ``resnet101_torchvision.pth``: the state dicts
  of ``torchvision.models.resnet50()`` / ``resnet101()``, saved as torchvision's
  ImageNet files are (``torch.save(model.state_dict())``: conv1.weight, bn1.*,
  layer1.0.conv1.weight, ..., fc.*), with random weights. Every tensor of more
  than 4096 elements is an overlapping strided view (``torch.as_strided``) of its
  own small random storage, with distinct strides in a non-monotone order
  (OIHW: 2, 1, 7, 5), so that ``torch.save`` writes only the small storage and
  an axis swap, a kernel transpose or a spatial flip still changes the values.
  Conv kernels are He-scaled (std sqrt(2 / fan_in)); batch norm has weight ~
  U(0.5, 1.5), bias ~ N(0, 0.1) and running statistics calibrated by a
  train-mode pass over random inputs (cumulative averages), then perturbed a
  little; each residual branch's last batch norm gets 4× the calibrated
  variance (half the output scale, like trained ResNets' small last γ), so
  activations stay O(1) and float32 rounding stays ~1e-6 of the features'
  scale through ResNet-101's 33 blocks (~1e-4 at full branch scale).
- ``resnet_features.npz``: ``input``, 2 ImageNet-normalised images of 48×13
  (NHWC float32; the stride-2 convs and the max-pooling see even and odd
  sizes, so PyTorch's symmetric padding is exercised), and
  ``resnet{50,101}_os{8,16}``, torchvision's features after ``layer4`` of
  ``resnet50/101(replace_stride_with_dilation=[False, True, True])`` (output
  stride 8) or ``[False, False, True]`` (16) on that input, computed in
  float64 and stored as NHWC float32.
- ``README.md``: what the files are and the versions that wrote them.
"""

import argparse
import hashlib
import math
import pathlib

import numpy as np
import torch
import torchvision

SMALL_TENSOR = 4096  # tensors with at most this many elements are stored as they are
# Strides of the strided views, per dimension: distinct primes, not in monotone order.
STRIDES = {1: (3,), 2: (2, 1), 4: (2, 1, 7, 5)}
IMAGE_SIZE = (48, 13)  # the stride-2 ops see H = 48, 24, 12, 6 and W = 13, 7, 4, 2
BATCH = 2
RESIDUAL_VAR_FACTOR = 4.0
DILATIONS = {8: [False, True, True], 16: [False, False, True]}
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _strided(shape, scale, generator):
    """A tensor of ``shape`` viewing its own small storage of N(0, scale²) values."""
    strides = STRIDES[len(shape)]
    size = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    small = torch.randn(size, generator=generator) * scale
    return torch.as_strided(small, shape, strides)


def _random_weights(model, generator):
    """Random parameters for ``model``: the large ones as strided views (returned)."""
    views, state = {}, model.state_dict()
    for key, tensor in state.items():
        if key.endswith("num_batches_tracked") or "running_" in key:
            continue
        if tensor.ndim == 1 and key.startswith(("bn", "layer")) and ".conv" not in key:
            if key.endswith(".weight"):  # batch norm gamma
                state[key] = torch.rand(tensor.shape, generator=generator) + 0.5
            else:  # batch norm beta
                state[key] = torch.randn(tensor.shape, generator=generator) * 0.1
            continue
        fan_in = math.prod(tensor.shape[1:]) if tensor.ndim > 1 else tensor.shape[0]
        scale = math.sqrt(2.0 / fan_in)
        if tensor.numel() > SMALL_TENSOR:
            views[key] = state[key] = _strided(tuple(tensor.shape), scale, generator)
        else:
            state[key] = torch.randn(tensor.shape, generator=generator) * scale
    model.load_state_dict(state)
    return views


def _features(model):
    return torch.nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool,
                               model.layer1, model.layer2, model.layer3, model.layer4)


def _calibrate(model, generator, batches=4, size=64):
    """Running statistics: cumulative averages of a train-mode pass, perturbed a little."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # cumulative average over the batches
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            _features(model)(torch.randn(8, 3, size, size, generator=generator))
        for norm in norms:
            std = norm.running_var.sqrt()
            norm.running_mean += 0.1 * std * torch.randn(norm.running_mean.shape,
                                                         generator=generator)
            norm.running_var *= torch.exp(0.1 * torch.randn(norm.running_var.shape,
                                                            generator=generator))
            norm.momentum = 0.1
        for module in model.modules():
            if isinstance(module, torchvision.models.resnet.Bottleneck):
                # The residual branch's last batch norm at half the scale (as trained ResNets'
                # small last γ): at full scale a random ResNet-101 is chaotic enough that
                # float32 rounding grows to ~1e-4 of its features' scale (1e-6 at half).
                module.bn3.running_var *= RESIDUAL_VAR_FACTOR
    model.eval()


def write_checkpoint(depth, path, seed):
    """Random torchvision ResNet-``depth`` weights to ``path``; returns its state dict."""
    generator = torch.Generator().manual_seed(seed)
    builder = getattr(torchvision.models, f"resnet{depth}")
    model = builder(weights=None, replace_stride_with_dilation=DILATIONS[8])
    views = _random_weights(model, generator)
    _calibrate(model, generator)
    state = model.state_dict()  # keeps torchvision's key order and _metadata
    for key, view in views.items():
        assert torch.equal(state[key], view), key
        state[key] = view
    torch.save(state, path)
    return {key: value.clone() for key, value in state.items()}


def features(depth, output_stride, state, images):
    """torchvision's ``layer4`` features (NHWC float32) of NHWC ``images``, in float64."""
    builder = getattr(torchvision.models, f"resnet{depth}")
    model = builder(weights=None, replace_stride_with_dilation=DILATIONS[output_stride])
    model.load_state_dict(state)
    model.double().eval()
    with torch.no_grad():
        x = torch.from_numpy(images.transpose(0, 3, 1, 2).astype(np.float64))
        y = _features(model)(x)
        y32 = _features(model.float())(x.float())  # float32 torch, for the README's table
    y = y.numpy().transpose(0, 2, 3, 1)
    y32 = y32.numpy().transpose(0, 2, 3, 1)
    return y.astype(np.float32), float(np.abs(y32 - y).max() / np.abs(y).max())


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    unit = rng.random((BATCH, *IMAGE_SIZE, 3))  # RGB in [0, 1]
    images = ((unit - IMAGENET_MEAN) / IMAGENET_STD).astype(np.float32)
    arrays, notes = {"input": images}, []
    for depth, seed in ((50, 50), (101, 101)):
        path = out / f"resnet{depth}_torchvision.pth"
        state = write_checkpoint(depth, path, seed)
        for output_stride in (8, 16):
            y, error32 = features(depth, output_stride, state, images)
            arrays[f"resnet{depth}_os{output_stride}"] = y
            notes.append(f"| resnet{depth}_os{output_stride} | {tuple(y.shape)} | "
                         f"{np.abs(y).max():.3f} | {error32:.1e} |")
    np.savez_compressed(out / "resnet_features.npz", **arrays)
    files = sorted(p for p in out.iterdir() if p.suffix in (".pth", ".npz"))
    listing = "\n".join(f"| {p.name} | {p.stat().st_size:,} | {_sha256(p)[:16]} |"
                        for p in files)
    (out / "README.md").write_text(f"""# torchvision ResNet fixtures

Written by `tools/resnet_fixtures.py` (run `/work/tvenv/bin/python tools/resnet_fixtures.py`
from the repository root; deterministic) with torch {torch.__version__}, torchvision
{torchvision.__version__}, NumPy {np.__version__}, on the CPU. Read by `tests/test_resnet.py`,
which needs no PyTorch.

- `resnet50_torchvision.pth`, `resnet101_torchvision.pth`: `torch.save(model.state_dict())`
  of `torchvision.models.resnet50()` / `resnet101()` (the layout of torchvision's ImageNet
  files: `conv1.weight`, `bn1.*`, `layer1.0.conv1.weight`, ..., `fc.*`, with
  `num_batches_tracked`) holding random weights. Each tensor of more than
  {SMALL_TENSOR} elements is an overlapping strided view of its own small random storage
  (OIHW strides {STRIDES[4]}: distinct, out of order), so the files stay small while
  an axis swap, a kernel transpose or a spatial flip still changes the values. Conv
  kernels are He-scaled; batch norm weight ~ U(0.5, 1.5), bias ~ N(0, 0.1), running
  statistics from a train-mode pass over random inputs, perturbed a little, with
  {RESIDUAL_VAR_FACTOR:g}× the variance in each residual branch's last batch norm (half its
  output scale, like trained ResNets' small last γ; at full scale a random ResNet-101 is
  chaotic and float32 rounding grows to ~1e-4 of its features' scale).
- `resnet_features.npz`: `input`, {BATCH} ImageNet-normalised images of
  {IMAGE_SIZE[0]}×{IMAGE_SIZE[1]} (NHWC float32), and torchvision's features after `layer4`
  (NHWC float32, computed in float64) of `resnet50/101(replace_stride_with_dilation=...)`,
  `[False, True, True]` for output stride 8, `[False, False, True]` for 16:

| array | shape | max abs | max abs error of torch float32 / max abs |
|---|---|---|---|
{chr(10).join(notes)}

| file | bytes | sha256 (first 16) |
|---|---|---|
{listing}
""")
    for p in files:
        print(f"{p}: {p.stat().st_size:,} bytes")
    print("\n".join(notes))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/fixtures/resnet")
    main(parser.parse_args().out)
