"""Random PyTorch weights that make small fixture files: shared by the tool scripts that
write checkpoints of random models (tools/segnext_fixtures.py, tools/fid_fixtures.py).

Torch only (no mmseg, no kctx), so any fixture venv with torch imports it.
"""

import math

import torch

STRIDED_THRESHOLD = 256  # tensors with more elements become strided views
STRIDE_PRIMES = (2, 3, 5, 7)


class WeightFactory:
    """Draws every state_dict entry with an O(1)-activation scale.

    conv / linear weights ~ N(0, 1/fan_in); biases ~ N(0, 0.1^2); norm
    weights ~ U(0.5, 1.5); layer scales ~ U(0.1, 1.0); BN running_mean ~
    N(0, 0.2^2), running_var ~ U(0.5, 2.0); num_batches_tracked = FAKE_ITERS.

    A tensor with more than STRIDED_THRESHOLD elements and at least two
    non-singleton dimensions gets its own small random storage (drawn from the
    same distribution) and becomes an overlapping ``torch.as_strided`` view of
    it: the non-singleton dimensions get distinct strides, a random choice and
    order of distinct primes from STRIDE_PRIMES, redrawn until the sequence is
    not monotone when there are three or more (so transposed / axis-swapped /
    flipped readings give different values); singleton dimensions get stride 1.
    Everything else (1-D tensors, which no overlapping view could shrink, and
    small tensors) is an ordinary contiguous tensor.
    """

    def __init__(self, seed):
        self.gen = torch.Generator().manual_seed(seed)

    def _draw(self, kind, shape, fan_in=None):
        g = self.gen
        if kind == "weight":
            return torch.randn(shape, generator=g) / math.sqrt(fan_in)
        if kind == "bias":
            return 0.1 * torch.randn(shape, generator=g)
        if kind == "norm_weight":
            return 0.5 + torch.rand(shape, generator=g)
        if kind == "layer_scale":
            return 0.1 + 0.9 * torch.rand(shape, generator=g)
        if kind == "running_mean":
            return 0.2 * torch.randn(shape, generator=g)
        if kind == "running_var":
            return 0.5 + 1.5 * torch.rand(shape, generator=g)
        raise ValueError(kind)

    def _strides(self, n):
        """n distinct primes from STRIDE_PRIMES, in a non-monotone order if n >= 3."""
        while True:
            pick = torch.randperm(len(STRIDE_PRIMES), generator=self.gen)[:n].tolist()
            st = [STRIDE_PRIMES[p] for p in pick]
            if n < 3 or not (st == sorted(st) or st == sorted(st, reverse=True)):
                return st

    def make(self, kind, shape, fan_in=None):
        shape = tuple(shape)
        numel = math.prod(shape)
        dims = [i for i, s in enumerate(shape) if s > 1]
        if numel <= STRIDED_THRESHOLD or len(dims) < 2:
            return self._draw(kind, shape, fan_in).contiguous()
        strides = [1] * len(shape)
        for i, st in zip(dims, self._strides(len(dims))):
            strides[i] = st
        storage_len = 1 + sum((s - 1) * st for s, st in zip(shape, strides))
        storage = self._draw(kind, (storage_len,), fan_in)
        return torch.as_strided(storage, shape, strides)
