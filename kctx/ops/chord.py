"""Chord sparse factors (Khalitov et al., "Sparse Factorization of Large Square Matrices").

Row i of a chord factor has non-zeros in the columns (i + o) mod n for the
offsets o ∈ {0} ∪ {2^k < n}: itself and its Chord "fingers" (Sec. 3, Fig. 2).
A factor is stored as its values, (B, n, L) with L = :func:`chord_width` (n),
column l of row i belonging to column ``chord_indices(n)[i, l]``.
"""

import functools
import math

import numpy as np
from keras import ops

from kctx.validation import check_positive_int


def _static_length(x):
    """n, the static length of ``x`` (B, n, ...): the chord pattern is built for it. An int
    also where a tracer gives sizes as tensors (PyTorch's ONNX export traces each size as
    a 0-d tensor); ``None`` stays ``None`` (refused by the checks)."""
    n = x.shape[1]
    return n if n is None or isinstance(n, int) else int(n)


def _check_length(n):
    check_positive_int("n", n)
    if n < 2:
        raise ValueError(f"`n` must be at least 2. Received: n={n!r}")


def chord_offsets(n):
    """The column offsets of every row: 0, then 1, 2, 4, … below ``n``."""
    _check_length(n)
    return (0,) + tuple(2 ** k for k in range(max(1, math.ceil(math.log2(n)))) if 2 ** k < n)


def chord_width(n):
    """L, the non-zeros per row: 1 + ⌈log₂ n⌉ (fewer when n ≤ 2)."""
    return len(chord_offsets(n))


def chord_indices(n):
    """int32 (n, L): the column indices of the non-zeros of each row, (i + offset) mod n."""
    offsets = np.asarray(chord_offsets(n))
    return ((np.arange(n)[:, None] + offsets[None, :]) % n).astype("int32")


@functools.lru_cache(maxsize=None)
def chord_num_factors(n):
    """M, the fewest chord factors whose product has no structurally zero entry.

    The product of m factors reaches column j from row i iff j − i (mod n) is
    a sum of m offsets (0 allowed), so M is the number of hops after which
    every residue mod n is reachable, found by breadth-first search: at most
    ⌈log₂ n⌉ (every d < n is a sum of its binary digits), fewer for some n.
    Total non-zeros of the factorisation: n·L·M = O(n log² n).
    """
    offsets = chord_offsets(n)
    reached = np.zeros(n, bool)
    reached[0] = True
    hops = 0
    while not reached.all():
        reached = np.logical_or.reduce([np.roll(reached, o) for o in offsets])
        hops += 1
    return max(hops, 1)


def chord_matmul(values, v):
    """W v for one chord factor W given by its ``values`` (B, n, L), and v (B, n, c).

    (W v)_i = Σ_l values_il · v_{(i + o_l) mod n}: one shifted copy of v per
    offset, O(n·L·c) time and memory; the n×n matrix is never formed.

    Returns:
        (B, n, c) in the dtype of ``v``.
    """
    n = _static_length(v)
    offsets = chord_offsets(n)
    if values.shape[-1] != len(offsets):
        raise ValueError(f"`values` must have L = {len(offsets)} entries per row for n = {n}. "
                         f"Received: values.shape={tuple(values.shape)}")
    values = ops.cast(values, v.dtype)
    # (B, n, L, c): slot l of row i ← v_{(i + o_l) mod n}, one gather (a roll would be a
    # select-TF op in LiteRT), then Σ_l as one reduction. Shifted copies summed by a chain
    # of adds changed the last bit between two identical training runs: TensorFlow's graph
    # optimizer regroups such chains, and the gradient of v summed over many consumers
    # depends on the order the tape visits them.
    gathered = ops.take(v, chord_indices(n), axis=1)
    return ops.sum(values[..., None] * gathered, axis=2)


def chord_product_matmul(factors, v):
    """(W⁽¹⁾ W⁽²⁾ ⋯ W⁽ᴹ⁾) v, applying W⁽ᴹ⁾ first; ``factors`` is a sequence of (B, n, L)."""
    for values in reversed(list(factors)):
        v = chord_matmul(values, v)
    return v


def chord_dense(values):
    """The dense (B, n, n) matrix of a chord factor (for tests and pictures)."""
    n = _static_length(values)
    selector = np.eye(n, dtype="float32")[chord_indices(n)]  # (n, L, n) one-hot columns
    return ops.einsum("bil,ilj->bij", values, ops.cast(selector, values.dtype))
