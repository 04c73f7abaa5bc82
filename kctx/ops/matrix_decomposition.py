"""Matrix decompositions used as the "ham" of Hamburger.

Geng et al., "Is Attention Better Than Matrix Decomposition?", ICLR 2021
(`../shared/papers/hamburger_is_attention_better_than_matrix_decomposition.txt`).

The paper arranges the n = H·W hyper-pixels as the columns of X ∈ R^{d×n} and
factorises X ≈ X̄ = D·C with a dictionary D ∈ R^{d×r} and codes C ∈ R^{r×n}
(Eq. 1, 7). kctx is channels-last, so here the data matrix is its transpose:
``x`` has shape (B, N, d), the dictionary ``bases`` (B, d, r) and the codes
``codes`` (B, N, r); the reconstruction is ``codes @ bases^T`` (B, N, d).

Everything is written with ``keras.ops`` only (no weights), so it runs on every
Keras backend. The loops are unrolled in Python (``steps`` is a static int),
which keeps the graph XLA-friendly and lets a profiler count every matmul.
"""

import math

import keras
import numpy as np

from keras import ops

from kctx.ops.magnitude import at_least, magnitude
from kctx.validation import (
    check_choice,
    check_nonnegative_float,
    check_positive_float,
    check_positive_int,
)

METHODS = ("nmf", "vq", "cd")

# Column-normalisation guard, as ``torch.nn.functional.normalize`` in the
# official code (eps=1e-12 on the norm).
_NORM_EPS = 1e-12


def _check_shapes(x, bases):
    if len(x.shape) != 3:
        raise ValueError(
            "`x` must have rank 3, (batch, positions N, channels d). "
            f"Received: x.shape={tuple(x.shape)}"
        )
    if len(bases.shape) != 3:
        raise ValueError(
            "`bases` must have rank 3, (batch, channels d, rank r). "
            f"Received: bases.shape={tuple(bases.shape)}"
        )
    d_x, d_b = x.shape[-1], bases.shape[1]
    if d_x is not None and d_b is not None and d_x != d_b:
        raise ValueError(
            "`x` and `bases` must have the same number of channels d "
            f"(x.shape[-1] == bases.shape[1]). Received: x.shape={tuple(x.shape)}, "
            f"bases.shape={tuple(bases.shape)}"
        )


def _l2_normalize(t, axis):
    squared = ops.sum(ops.square(t), axis=axis, keepdims=True)
    return t * ops.rsqrt(at_least(squared, _NORM_EPS**2))


# ---------------------------------------------------------------------------
# Non-negative matrix factorisation, multiplicative updates (Alg. 2).
# ---------------------------------------------------------------------------


def _nmf_codes_update(xd, codes, bases, eps):
    """C ← C ⊙ (x·D) / (C·(DᵀD) + eps)   (Alg. 2, first line, transposed)."""
    gram = ops.einsum("bdr,bdk->brk", bases, bases)
    return codes * xd / (ops.matmul(codes, gram) + eps)


def _nmf_bases_update(x_scaled_t_codes, codes, bases, eps):
    """D ← D ⊙ (xᵀ·C) / (D·(CᵀC) + eps)   (Alg. 2, second line)."""
    gram = ops.einsum("bnr,bnk->brk", codes, codes)
    return bases * x_scaled_t_codes / (ops.matmul(bases, gram) + eps)


# Below float32's resolution of any denominator the updates meet, above its underflow: the
# floor of the absolute guard in scaled units (eps / s²), so it never rounds to 0 (0 / 0).
_MIN_SCALED_EPS = 1e-30


def _rounds_inputs(one_step_gradient, *tensors):
    """The K rounds' inputs, cut from the gradient under the one-step gradient: only the
    final update back-propagates (Sec. 2.3), so the rounds need no record, as the official
    code runs them under ``torch.no_grad()``. A ``stop_gradient`` after the rounds alone
    gives the same values and gradients, but PyTorch's autograd would keep every round's
    intermediates until it (the causal NMF's (B, T, d, r) dictionaries: 134 MB each for
    the language workflow's decoder)."""
    return tuple(ops.stop_gradient(t) for t in tensors) if one_step_gradient else tensors


def _nmf(x, bases, steps, temperature, eps, one_step_gradient, relative_eps=True):
    # Iterate on C̃ = C / s and x̃ = x / s, s = max|x|, so every intermediate stays finite
    # for any input magnitude. x̃ is never materialised: 1/s is folded into the small
    # d×r factors (x̃·D = x·(D/s), x̃ᵀ·C̃ = (xᵀ·C̃)/s). With relative_eps, eps applies to
    # the scaled updates (relative to s); without, it is the official absolute guard on
    # x itself, which in scaled units is eps/s in the code updates and eps/s² in the
    # dictionary updates (divide the numerator and denominator of Alg. 2 by s or s²).
    scale = magnitude(x)
    inv_scale = 1.0 / scale
    if relative_eps:
        codes_eps = bases_eps = eps
    else:
        codes_eps = at_least(eps * inv_scale, _MIN_SCALED_EPS)
        bases_eps = at_least(eps * ops.square(inv_scale), _MIN_SCALED_EPS)
    # x·D of the *unscaled* input: C₀ = softmax(x·D / T) exactly as the
    # official code; the same product is the numerator of the first C update.
    rounds_x, bases = _rounds_inputs(one_step_gradient, x, bases)
    xd = ops.einsum("bnd,bdr->bnr", rounds_x, bases)
    codes = ops.softmax(xd / temperature, axis=-1)
    xd = xd * inv_scale
    for step in range(steps):
        if step > 0:
            xd = ops.einsum("bnd,bdr->bnr", rounds_x, bases * inv_scale)
        # C₀ is the official softmax itself (not C₀ / s): its update keeps eps as it is.
        codes = _nmf_codes_update(xd, codes, bases, eps if step == 0 else codes_eps)
        xtc = ops.einsum("bnd,bnr->bdr", rounds_x, codes) * inv_scale
        bases = _nmf_bases_update(xtc, codes, bases, bases_eps)
    if one_step_gradient:
        codes = ops.stop_gradient(codes)
        bases = ops.stop_gradient(bases)
    # The final code update carries the gradient (Sec. 2.3, Eq. 13).
    xd = ops.einsum("bnd,bdr->bnr", x, bases * inv_scale)
    codes = _nmf_codes_update(xd, codes, bases, codes_eps)
    return bases, codes * scale


# ---------------------------------------------------------------------------
# Soft vector quantisation (Alg. 1) and soft concept decomposition (Alg. 3).
# ---------------------------------------------------------------------------


def _soft_assign(x_unit, bases, temperature):
    """C ← softmax over r of cosine(x, D) / T."""
    bases_unit = _l2_normalize(bases, axis=1)
    cosine = ops.einsum("bnd,bdr->bnr", x_unit, bases_unit)
    return ops.softmax(cosine / temperature, axis=-1)


def _normalized_rows(x, scale):
    return _l2_normalize(x / scale, axis=-1)


def _vq(x, bases, steps, temperature, eps, one_step_gradient):
    scale = magnitude(x)
    x_unit = _normalized_rows(x, scale)
    rounds_x, rounds_unit, bases = _rounds_inputs(one_step_gradient, x, x_unit, bases)
    for _ in range(steps):
        codes = _soft_assign(rounds_unit, bases, temperature)
        # D ← X Cᵀ diag(C 1_n)⁻¹: the code-weighted mean of the positions.
        codes_mean = codes / (ops.sum(codes, axis=1, keepdims=True) + eps)
        bases = ops.einsum("bnd,bnr->bdr", rounds_x, codes_mean) / scale
    if one_step_gradient:
        bases = ops.stop_gradient(bases)
    codes = _soft_assign(x_unit, bases, temperature)
    return bases * scale, codes


def _cd(x, bases, steps, temperature, beta, one_step_gradient):
    scale = magnitude(x)
    x_unit = _normalized_rows(x, scale)
    rounds_x, rounds_unit, bases = _rounds_inputs(one_step_gradient, x, x_unit, bases)
    for _ in range(steps):
        codes = _soft_assign(rounds_unit, bases, temperature)
        # D ← normalize(X Cᵀ): unit-norm concept vectors (spherical k-means).
        bases = _l2_normalize(ops.einsum("bnd,bnr->bdr", rounds_x, codes) / scale, axis=1)
    if one_step_gradient:
        bases = ops.stop_gradient(bases)
    # Closed form C = (DᵀD + βI)⁻¹ DᵀX (Appendix B), here C = x·D·(DᵀD + βI)⁻¹.
    rank = ops.shape(bases)[-1]
    gram = ops.einsum("bdr,bdk->brk", bases, bases)
    identity = ops.eye(rank, dtype=gram.dtype)
    gram = gram + beta * identity
    # An example with NaN / inf has a non-finite Gram matrix, which the inverse would
    # reject with a raw error; invert I instead: its codes are non-finite through x·D.
    finite = ops.all(ops.isfinite(gram), axis=(1, 2), keepdims=True)
    gram = ops.where(finite, gram, identity)
    codes = ops.matmul(ops.einsum("bnd,bdr->bnr", x, bases), _ridge_gram_inverse(gram, beta))
    return bases, codes


_MIN_RIDGE = 1e-6


def _ridge_gram_inverse(gram, beta):
    """(DᵀD + βI)⁻¹ for unit-norm columns of D, by Newton–Schulz iterations
    X ← 2X − X·A·X from X₀ = I / tr(A) (Schulz 1933; Pan & Schreiber 1991).

    Only matrix products, so the closed form exports to ONNX and LiteRT (which have
    no matrix inverse) and runs the same in Keras and in every artifact. The error
    I − A·X squares at each step from at most 1 − β / (r(1 + β)) (the eigenvalues of
    A lie in [β, tr A] and tr A = r(1 + β)), so ⌈log₂(20.7·c)⌉ steps, c = r(1 + β)/β,
    reach 1e-9 (14 steps for r = 64, β = 0.1): the exact inverse to float32 precision.
    β = 0 is run as β = 1e-6 (below float32's resolution of tr A), which keeps the
    codes finite where DᵀD is singular (r > d) instead of diverging.
    """
    rank = gram.shape[-1]
    identity = ops.eye(rank, dtype=gram.dtype)
    if beta < _MIN_RIDGE:
        gram = gram + (_MIN_RIDGE - beta) * identity
        beta = _MIN_RIDGE
    iterations = math.ceil(math.log2(20.7 * rank * (1.0 + beta) / beta))
    trace = ops.sum(gram * identity, axis=(1, 2), keepdims=True)
    inverse = identity / trace
    for _ in range(iterations):
        inverse = 2.0 * inverse - ops.matmul(ops.matmul(inverse, gram), inverse)
    return inverse


def decompose(
    x,
    bases,
    method="nmf",
    steps=6,
    temperature=1.0,
    beta=0.1,
    eps=1e-6,
    one_step_gradient=True,
    relative_eps=True,
):
    """Factorise ``x ≈ codes @ bases^T`` and return ``(bases, codes)``.

    Runs ``steps`` (K) iterations of the chosen optimisation algorithm from the
    initial dictionary ``bases``, then — with ``one_step_gradient=True`` —
    stops the gradient of D and C and recomputes the codes once with gradient
    (Sec. 2.3, Eq. 13). See :func:`matrix_decomposition` for the algorithms.

    Args:
        x: float tensor (B, N, d). Must be non-negative for ``"nmf"``.
        bases: initial dictionary D₀, float tensor (B, d, r).
        method: ``"nmf"``, ``"vq"`` or ``"cd"``.
        steps: K ≥ 1, number of iterations.
        temperature: T of the softmax (C₀ for NMF, every code update of VQ/CD).
        beta: β of the CD closed form.
        eps: guard of the NMF multiplicative updates and the VQ code sums.
        one_step_gradient: ``False`` back-propagates through all K steps (BPTT).
        relative_eps: NMF only. ``True`` (kctx's default): ``eps`` guards the updates
            of x / max|x|, so it is relative to the input's magnitude and the
            factorisation is scale-invariant. ``False``: the absolute ``eps`` of the
            official code (Enjoy-Hamburger V1/V2, SegNeXt's LightHamHead:
            ``coef * numerator / (denominator + 1e-6)`` on x itself), computed on
            x / max|x| with the guard rescaled to match, so it stays finite for any
            magnitude.

    Returns:
        ``(bases, codes)``: D (B, d, r) and C (B, N, r).
    """
    check_choice("method", method, METHODS)
    check_positive_int("steps", steps)
    check_positive_float("temperature", temperature)
    check_nonnegative_float("beta", beta)
    x = ops.convert_to_tensor(x)
    bases = ops.convert_to_tensor(bases)
    _check_shapes(x, bases)
    if method == "nmf":
        return _nmf(x, bases, steps, temperature, eps, one_step_gradient, relative_eps)
    if method == "vq":
        return _vq(x, bases, steps, temperature, eps, one_step_gradient)
    return _cd(x, bases, steps, temperature, beta, one_step_gradient)


def matrix_decomposition(x, bases, **options):
    """Low-rank reconstruction X̄ = D·C of ``x`` by a matrix decomposition.

    The "ham" M of Hamburger (Eq. 7): ``M(X) = X̄ = DC``, in kctx's
    channels-last orientation ``x ≈ codes @ bases^T``, from the factors of
    :func:`decompose`.

    * ``"nmf"`` — non-negative matrix factorisation with multiplicative
      updates (Alg. 2, Eq. 9), as in the official code: C₀ = softmax(x·D₀ / T),
      then K times C ← C ⊙ (x·D) / (C·DᵀD + eps) followed by
      D ← D ⊙ (xᵀ·C) / (D·CᵀC + eps). ``x`` must be non-negative.
    * ``"vq"`` — soft vector quantisation (Alg. 1, Eq. 8): K times
      C ← softmax_r(cosine(x, D) / T), D ← Xᵀ C diag(Cᵀ1)⁻¹; the output codes
      are one more soft assignment.
    * ``"cd"`` — soft concept decomposition (Alg. 3, Eq. 14–15): K times
      C ← softmax_r(cosine(x, D) / T), D ← normalize(xᵀ C); then the ridge
      closed form C = x·D·(DᵀD + βI)⁻¹.

    With ``one_step_gradient=True`` (Sec. 2.3) the K iterations run without
    gradient and only the final code update (the closed form for CD)
    back-propagates to ``x``; ``False`` differentiates through every step
    (BPTT), for ablations (Table 1).

    Args:
        x: float tensor (B, N, d).
        bases: initial dictionary D₀, float tensor (B, d, r).
        **options: the keyword arguments of :func:`decompose`, with its
            defaults: ``method`` (``"nmf"``, ``"vq"`` or ``"cd"``), ``steps``
            (K ≥ 1), ``temperature`` (T), ``beta`` (the CD ridge β), ``eps``
            (the guard of the updates), ``one_step_gradient`` and
            ``relative_eps`` (NMF's ``eps`` relative to max|x|, or absolute as
            the official code).

    Returns:
        The reconstruction, a tensor of shape (B, N, d).

    Examples:
        >>> x = keras.random.uniform((2, 64, 16))
        >>> d0 = keras.random.uniform((2, 16, 4))
        >>> tuple(matrix_decomposition(x, d0, method="nmf", steps=6).shape)
        (2, 64, 16)
    """
    bases, codes = decompose(x, bases, **options)
    return ops.einsum("bnr,bdr->bnd", codes, bases)


def initial_bases(method, shape, seed=None, dtype="float32"):
    """Random initial dictionary D₀ for ``method`` (Appendix F, Table 8).

    Uniform(0, 1) for NMF and a standard Gaussian for VQ/CD, each column then
    L2-normalised along d (as the official PyTorch code). ``shape`` is
    (..., d, r). ``seed`` may be a ``keras.random.SeedGenerator`` (or None) for
    a new draw on every call, or an int for one fixed draw that is identical on
    every backend, device and compiler (drawn with NumPy; ``shape`` must then
    be static).
    """
    check_choice("method", method, METHODS)
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return ops.convert_to_tensor(seeded_initial_bases(method, shape, seed, dtype))
    if method == "nmf":
        bases = keras.random.uniform(shape, dtype=dtype, seed=seed)
    else:
        bases = keras.random.normal(shape, dtype=dtype, seed=seed)
    return _l2_normalize(bases, axis=-2)


def seeded_initial_bases(method, shape, seed, dtype="float32"):
    """:func:`initial_bases`'s draw for an int ``seed`` as a NumPy array (drawn with NumPy,
    so identical on every backend and usable where no tensor may be evaluated, e.g. a
    weight's initial value built inside a traced function)."""
    check_choice("method", method, METHODS)
    rng = np.random.default_rng(int(seed))
    shape = tuple(int(s) for s in shape)
    raw = rng.uniform(size=shape) if method == "nmf" else rng.standard_normal(shape)
    raw = raw / np.maximum(np.linalg.norm(raw, axis=-2, keepdims=True), _NORM_EPS)
    return raw.astype(keras.backend.standardize_dtype(dtype))
