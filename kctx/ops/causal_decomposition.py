"""Causal non-negative matrix factorisation: a Hamburger ham for autoregressive models.

The Hamburger's ham (Geng et al., ICLR 2021, Alg. 2; :mod:`kctx.ops.matrix_decomposition`)
factorises all n positions at once, X ≈ D·C, so every output sees every input: it cannot
drive a decoder. Its multiplicative updates, however, touch the data only through

    x·D (a position's code, r numbers),   Xᵀ·C (d × r),   Cᵀ·C (r × r),

and the last two are sums over positions. Fitting one dictionary D_t to each prefix
x_{≤t} therefore needs only prefix sums of x_j·c_jᵀ and c_j·c_jᵀ: the causal NMF below.
kctx is channels-last: ``x`` is (B, T, d), a dictionary (d, r), codes (T, r).

With D₀ the initial dictionary and T_s the softmax temperature, for every position t:

    c_t⁽⁰⁾ = softmax(x_t·D₀ / T_s),   D_t⁽⁰⁾ = D₀,

then for k = 1 … K (Alg. 2's two lines, each position against the dictionary of its
own prefix):

    c_t⁽ᵏ⁾ = c_t⁽ᵏ⁻¹⁾ ⊙ (x_t·D_t⁽ᵏ⁻¹⁾) / (c_t⁽ᵏ⁻¹⁾·(D_t⁽ᵏ⁻¹⁾ᵀ D_t⁽ᵏ⁻¹⁾) + ε)
    A_t⁽ᵏ⁾ = Σ_{j≤t} x_jᵀ c_j⁽ᵏ⁾   (d × r),      B_t⁽ᵏ⁾ = Σ_{j≤t} c_j⁽ᵏ⁾ᵀ c_j⁽ᵏ⁾   (r × r)
    D_t⁽ᵏ⁾ = D_t⁽ᵏ⁻¹⁾ ⊙ A_t⁽ᵏ⁾ / (D_t⁽ᵏ⁻¹⁾·B_t⁽ᵏ⁾ + ε)

and the output is one more code update against the final dictionary (Eq. 13, which
carries the one-step gradient), reconstructed:

    c_t = c_t⁽ᴷ⁾ ⊙ (x_t·D_t⁽ᴷ⁾) / (c_t⁽ᴷ⁾·(D_t⁽ᴷ⁾ᵀ D_t⁽ᴷ⁾) + ε),     x̄_t = D_t⁽ᴷ⁾·c_t.

Everything at t is a function of x_{≤t}: the output is exactly causal. At t = n (the
last position) the dictionary is fitted to all positions, as the original ham's — but the
codes c_j⁽ᵏ⁾ of earlier positions were computed against their own prefixes' dictionaries,
not against D_n⁽ᵏ⁻¹⁾, so the causal ham is a new operator, not the original restricted.

Two forms compute it:

* **parallel** (training): every round k is a few batched products and two cumulative
  sums over t; O(K·T·d·r²) work and O(T·d·r) memory per round, or O(chunk·d·r) with
  ``chunk_size`` (the sums are carried from chunk to chunk).
* **recurrent** (generation): the state is (A⁽ᵏ⁾, B⁽ᵏ⁾) for k = 1 … K, K·(d·r + r²)
  numbers whatever t; :func:`causal_nmf_step` takes x_t and the state and returns x̄_t and
  the next state. Both forms compute the same numbers (the same products, the sums
  accumulated in another order).

**Dictionaries per block** (``block_size`` = L). The per-position form materialises a
d × r dictionary for every position in every round: memory traffic of K·T·d·r numbers
several times over, which bounds its speed (on this CPU its training step at T = 512 is
3× causal attention's). With blocks of L positions, b = ⌊t / L⌋, position t's codes are
updated against the dictionary D_b fitted to the positions before its block, j < b·L:

    c_t⁽ᵏ⁾ = c_t⁽ᵏ⁻¹⁾ ⊙ (x_t·D_b⁽ᵏ⁻¹⁾) / (c_t⁽ᵏ⁻¹⁾·(D_b⁽ᵏ⁻¹⁾ᵀ D_b⁽ᵏ⁻¹⁾) + ε)
    A_b⁽ᵏ⁾ = Σ_{j<bL} x_jᵀ c_j⁽ᵏ⁾,   B_b⁽ᵏ⁾ = Σ_{j<bL} c_j⁽ᵏ⁾ᵀ c_j⁽ᵏ⁾
    D_b⁽ᵏ⁾ = D_b⁽ᵏ⁻¹⁾ ⊙ A_b⁽ᵏ⁾ / (D_b⁽ᵏ⁻¹⁾·B_b⁽ᵏ⁾ + ε)   for b ≥ 1,   D_0⁽ᵏ⁾ = D₀,

with x̄_t = D_b⁽ᴷ⁾·c_t after the final code update. The first block has no prefix and keeps
D₀ (the update of an empty prefix would zero the dictionary). The output is still exactly
causal (the dictionary of t's block sees only earlier blocks; t's code sees only x_t), but
it is another operator: a position's dictionary lags up to L − 1 positions behind it. The
parallel form keeps T/L dictionaries per round, not T (the block sums are one batched
product, their prefix over blocks a short cumulative sum); the recurrent form keeps the
current block's K dictionaries beside the sums and refits them when a block completes.

The update guard ε is absolute, as the official code's 1e-6: the original ham's
relative guard divides by max|x| over all positions, which a causal operator cannot see.

**Causal soft vector quantisation** (:func:`causal_vq`; the ham's VQ, Alg. 1 / Eq. 8 of the
paper, made causal the same way). VQ's updates read the data through the code-weighted sums
X·C (d × r) and C·1 (r): with D_t⁽⁰⁾ = D₀, for k = 1 … K and every position t,

    c_t⁽ᵏ⁾ = softmax_r(cos(x_t, D_t⁽ᵏ⁻¹⁾) / T)
    A_t⁽ᵏ⁾ = Σ_{j≤t} x_j c_j⁽ᵏ⁾ᵀ   (d × r),      n_t⁽ᵏ⁾ = Σ_{j≤t} c_j⁽ᵏ⁾   (r)
    D_t⁽ᵏ⁾ = A_t⁽ᵏ⁾ diag(n_t⁽ᵏ⁾ + ε)⁻¹   (each atom the code-weighted mean of the prefix)

and the output is one more soft assignment, x̄_t = D_t⁽ᴷ⁾ softmax_r(cos(x_t, D_t⁽ᴷ⁾) / T),
cos(x, D) the cosine of x with each column of D. The blocked form replaces j ≤ t by the
blocks before t's, j < ⌊t/L⌋·L, and keeps D₀ in the first block, as the NMF's. The data need
not be non-negative. The official VQ divides x by max|x| over all positions before it and
multiplies the dictionary back (a scale that cancels: the cosines do not see it and the
means are taken of the same x); the causal form leaves it out, as a causal operator must.
Its recurrent state is (A⁽ᵏ⁾, n⁽ᵏ⁾) for k = 1 … K: K·(d·r + r) numbers whatever t.
"""

from keras import ops

from kctx.ops.matrix_decomposition import _l2_normalize, _rounds_inputs
from kctx.validation import check_choice, check_positive_float, check_positive_int

CAUSAL_METHODS = ("nmf", "vq")


# Broadcasting matmuls, not einsums with "...": the ONNX and LiteRT converters refuse an
# ellipsis that stands for different numbers of axes in two operands.
def _code_update(xd, codes, bases, eps):
    """c ← c ⊙ (x·D) / (c·(DᵀD) + ε), each position against its own D (…, d, r)."""
    gram = ops.matmul(ops.swapaxes(bases, -1, -2), bases)
    denominator = ops.squeeze(ops.matmul(ops.expand_dims(codes, -2), gram), -2)
    return codes * xd / (denominator + eps)


def _bases_update(bases, xtc, ctc, eps):
    """D ← D ⊙ A / (D·B + ε) with the prefix sums A = Σ xᵀc, B = Σ cᵀc."""
    return bases * xtc / (ops.matmul(bases, ctc) + eps)


def _check(x, bases, steps, temperature):
    check_positive_int("steps", steps)
    check_positive_float("temperature", temperature)
    if len(x.shape) != 3:
        raise ValueError("`x` must have rank 3, (batch, positions T, channels d). "
                         f"Received: x.shape={tuple(x.shape)}")
    if len(bases.shape) != 2:
        raise ValueError("`bases` must have rank 2, (channels d, rank r): one initial "
                         f"dictionary D₀ for every sequence. Received: bases.shape="
                         f"{tuple(bases.shape)}")
    if x.shape[-1] is not None and x.shape[-1] != bases.shape[0]:
        raise ValueError("`x` and `bases` must have the same number of channels d "
                         f"(x.shape[-1] == bases.shape[0]). Received: x.shape="
                         f"{tuple(x.shape)}, bases.shape={tuple(bases.shape)}")


def initial_causal_state(batch_size, channels, rank, steps, dtype="float32",
                         block_size=None, method="nmf"):
    """The recurrent form's state before the first position: K pairs of zero prefix sums,
    ``(A⁽¹⁾, B⁽¹⁾, …, A⁽ᴷ⁾, B⁽ᴷ⁾)`` with A (batch, d, r) and, for ``method="nmf"``, B
    (batch, r, r) (Σ cᵀc), for ``"vq"`` n (batch, r) (Σ c); with ``block_size``, then the
    current block's dictionaries D⁽¹⁾ … D⁽ᴷ⁾ (batch, d, r; zero until the first block
    completes: D₀ is used before) and the positions seen (batch,).

    Examples:
        >>> state = initial_causal_state(2, channels=16, rank=4, steps=3)
        >>> len(state), tuple(state[0].shape), tuple(state[1].shape)
        (6, (2, 16, 4), (2, 4, 4))
        >>> tuple(initial_causal_state(2, 16, 4, steps=3, method="vq")[1].shape)
        (2, 4)
        >>> len(initial_causal_state(2, 16, 4, steps=3, block_size=8))
        10
    """
    check_positive_int("steps", steps)
    check_positive_int("block_size", block_size, allow_none=True)
    check_choice("method", method, CAUSAL_METHODS)
    second = (rank, rank) if method == "nmf" else (rank,)
    state = []
    for _ in range(steps):
        state += [ops.zeros((batch_size, channels, rank), dtype),
                  ops.zeros((batch_size, *second), dtype)]
    if block_size is not None:
        state += [ops.zeros((batch_size, channels, rank), dtype) for _ in range(steps)]
        state.append(ops.zeros((batch_size,), dtype))
    return tuple(state)


def causal_nmf_step(x_t, bases, state, steps=6, temperature=1.0, eps=1e-6, block_size=None):
    """One position of the causal NMF in its recurrent form (generation).

    Args:
        x_t: the position's non-negative features, (B, d).
        bases: D₀, (d, r).
        state: the prefix sums of the positions before (and with ``block_size`` their
            block's dictionaries and count), from :func:`initial_causal_state` (with the
            same ``block_size``) or the previous call.
        steps: K, as in :func:`causal_nmf`.
        temperature: T_s of the initial codes' softmax.
        eps: ε, the absolute update guard.
        block_size: L, as in :func:`causal_nmf`: the dictionaries are refitted when a
            block of L positions completes (``None``: at every position).

    Returns:
        ``(reconstruction, state)``: x̄_t (B, d) and the state including t.

    Examples:
        >>> x = keras.random.uniform((2, 5, 16), seed=0)
        >>> from kctx.ops import initial_bases
        >>> d0 = initial_bases("nmf", (16, 4), seed=0)
        >>> state = initial_causal_state(2, 16, 4, steps=3)
        >>> outputs = []
        >>> for t in range(5):
        ...     y_t, state = causal_nmf_step(x[:, t], d0, state, steps=3)
        ...     outputs.append(y_t)
        >>> parallel = causal_nmf(x, d0, steps=3)
        >>> bool(ops.max(ops.abs(ops.stack(outputs, axis=1) - parallel)) < 1e-5)
        True
    """
    _check_state(state, steps, block_size, "B⁽ᵏ⁾")
    x_t = ops.convert_to_tensor(x_t)
    bases = ops.cast(ops.convert_to_tensor(bases), x_t.dtype)
    codes = ops.softmax(ops.matmul(x_t, bases) / temperature, axis=-1)
    initial = ops.broadcast_to(bases, (ops.shape(x_t)[0], *bases.shape))
    if block_size is not None:
        count, dictionaries = _block_dictionaries(state, steps, block_size, initial)
    dictionary = initial
    new_state = []
    for step in range(steps):
        xd = ops.einsum("bd,bdr->br", x_t, dictionary)
        codes = _code_update(xd, codes, dictionary, eps)
        xtc = state[2 * step] + ops.einsum("bd,br->bdr", x_t, codes)
        ctc = state[2 * step + 1] + ops.einsum("br,bk->brk", codes, codes)
        new_state += [xtc, ctc]
        dictionary = (_bases_update(dictionary, xtc, ctc, eps) if block_size is None
                      else dictionaries[step + 1])
    xd = ops.einsum("bd,bdr->br", x_t, dictionary)
    codes = _code_update(xd, codes, dictionary, eps)
    output = ops.einsum("br,bdr->bd", codes, dictionary)
    if block_size is not None:
        # The block completes at t: refit D⁽¹⁾ … D⁽ᴷ⁾ from the sums up to t, from D₀.
        refitted, dictionary = [], initial
        for step in range(steps):
            dictionary = _bases_update(dictionary, new_state[2 * step],
                                       new_state[2 * step + 1], eps)
            refitted.append(dictionary)
        new_state = _complete_block(new_state, count, dictionaries, refitted, block_size)
    return output, tuple(new_state)


def _check_state(state, steps, block_size, second):
    expected = 2 * steps if block_size is None else 3 * steps + 1
    if len(state) != expected:
        what = (f"2·steps = {{}} prefix sums (A⁽ᵏ⁾, {second} for k = 1 … K)"
                if block_size is None else
                f"3·steps + 1 = {{}} tensors (A⁽ᵏ⁾, {second}, then D⁽ᵏ⁾, then the count)")
        raise ValueError(f"`state` must hold {what.format(expected)}. Received: "
                         f"{len(state)} tensors.")


def _block_dictionaries(state, steps, block_size, initial):
    """The positions seen and ``[D₀, D⁽¹⁾, …, D⁽ᴷ⁾]`` of the current block, from the state
    of the blocked recurrent form (D₀ in every round until a block has completed)."""
    count = state[-1]
    started = ops.reshape(count >= block_size, (-1, 1, 1))  # a block has completed
    return count, [initial] + [ops.where(started, stored, initial)
                               for stored in state[2 * steps:3 * steps]]


def _complete_block(sums, count, dictionaries, refitted, block_size):
    """The blocked recurrent form's next state: the sums, then each round's dictionary
    (``refitted`` from the sums where this position completes a block, else the current
    block's), then the positions seen."""
    count = count + 1
    completes = ops.reshape(ops.mod(count, block_size) == 0, (-1, 1, 1))
    return [*sums, *[ops.where(completes, new, old)
                     for new, old in zip(refitted, dictionaries[1:])], count]


# Positions per block of the blocked prefix sum, largest first (see _prefix_sums).
SCAN_BLOCKS = (64, 32, 16, 8)


def _prefix_sums(values, carry):
    """Cumulative sums over axis 1 (positions), starting from ``carry`` (or zero).

    Blocked: within blocks of L positions a running sum (L − 1 additions of whole slices),
    then each block offset by the cumulative sum of the blocks before it. TensorFlow's
    ``cumsum`` over the positions of a (B, T, d, r) tensor walks it element by element:
    one thread here, B = 16, T = 512, d = 256, r = 16, it took 330–430 ms, the blocked
    form with L = 64 73 ms (the same sums to 2e-6, added in another order). A length no
    block size divides uses ``cumsum``.
    """
    length = values.shape[1]
    block = next((size for size in SCAN_BLOCKS
                  if length is not None and length > size and length % size == 0), None)
    if block is None:
        sums = ops.cumsum(values, axis=1)
    else:
        shape = ops.shape(values)
        blocks = ops.reshape(values, (shape[0], length // block, block, *shape[2:]))
        running = blocks[:, :, 0]
        within = [running]
        for index in range(1, block):
            running = running + blocks[:, :, index]
            within.append(running)
        within = ops.stack(within, axis=2)
        totals = ops.cumsum(within[:, :, -1], axis=1)  # sums up to each block's end
        offsets = ops.concatenate([ops.zeros_like(totals[:, :1]), totals[:, :-1]], axis=1)
        sums = ops.reshape(within + ops.expand_dims(offsets, 2), shape)
    return sums if carry is None else sums + ops.expand_dims(carry, 1)


def causal_nmf(x, bases, steps=6, temperature=1.0, eps=1e-6, one_step_gradient=True,
               chunk_size=None, block_size=None):
    """Causal low-rank reconstruction x̄ of ``x``: position t from x_{≤t} only.

    The parallel form of the causal NMF (see the module's equations): K rounds, each a
    code update of every position against its prefix's dictionary and a dictionary
    update from the prefix sums Σ xᵀc and Σ cᵀc.

    Args:
        x: non-negative features (B, T, d), e.g. after the lower bread's ReLU.
        bases: the initial dictionary D₀ (d, r), shared by every sequence and position
            (``initial_bases("nmf", (d, r), seed=...)`` or a trained one).
        steps: K ≥ 1, the rounds of multiplicative updates.
        temperature: T_s of the initial codes' softmax.
        eps: ε, the absolute guard of the updates (the official 1e-6).
        one_step_gradient: ``True``: the K rounds run without gradient and only the final
            code update back-propagates (Sec. 2.3, Eq. 13); ``False``: through every round
            (BPTT).
        chunk_size: positions per chunk; ``None`` processes all T at once (O(T·d·r)
            memory per round), an int processes chunks one after the other, carrying the
            prefix sums (O(chunk_size·d·r) memory, the same numbers). Must divide T.
            Not with ``block_size``.
        block_size: L, positions that share a dictionary, fitted to the blocks before
            theirs (see the module's equations: another operator, T/L dictionaries per
            round instead of T); ``None``: a dictionary per position. T need not be a
            multiple of L.

    Returns:
        The reconstruction x̄ (B, T, d).

    Examples:
        >>> x = keras.random.uniform((2, 8, 16), seed=0)
        >>> from kctx.ops import initial_bases
        >>> d0 = initial_bases("nmf", (16, 4), seed=0)
        >>> y = causal_nmf(x, d0, steps=3)
        >>> tuple(y.shape)
        (2, 8, 16)
        >>> # position 3 does not see positions 4-7
        >>> changed = ops.concatenate([x[:, :4], 2.0 * x[:, 4:]], axis=1)
        >>> bool(ops.all(causal_nmf(changed, d0, steps=3)[:, :4] == y[:, :4]))
        True

    Reference:
        Geng et al., "Is Attention Better Than Matrix Decomposition?", ICLR 2021, Alg. 2
        and Sec. 2.3; made causal here (kctx).
    """
    return _parallel(_causal_nmf_chunk, _causal_nmf_blocks, x, bases, steps, temperature,
                     eps, one_step_gradient, chunk_size, block_size)


def _parallel(chunk_form, block_form, x, bases, steps, temperature, eps, one_step_gradient,
              chunk_size, block_size):
    """A parallel form's arguments checked, then ``block_form`` on the blocks, or
    ``chunk_form`` on all positions at once or chunk after chunk (carrying the sums)."""
    x = ops.convert_to_tensor(x)
    bases = ops.convert_to_tensor(bases)
    _check(x, bases, steps, temperature)
    bases = ops.cast(bases, x.dtype)
    length = x.shape[1]
    if block_size is not None:
        check_positive_int("block_size", block_size)
        if chunk_size is not None:
            raise ValueError("`chunk_size` bounds the memory of the per-position form; "
                             "the blocked form keeps T/L dictionaries anyway: give one of "
                             f"them. Received: chunk_size={chunk_size}, "
                             f"block_size={block_size}")
        return block_form(x, bases, block_size, steps, temperature, eps, one_step_gradient)
    if chunk_size is None or length is None or chunk_size >= length:
        return chunk_form(x, bases, None, steps, temperature, eps, one_step_gradient)[0]
    check_positive_int("chunk_size", chunk_size)
    if length % chunk_size:
        raise ValueError(f"`chunk_size` must divide the sequence length. Received: "
                         f"chunk_size={chunk_size} for {length} positions.")
    outputs, carry = [], None
    for start in range(0, length, chunk_size):
        output, carry = chunk_form(x[:, start:start + chunk_size], bases, carry, steps,
                                   temperature, eps, one_step_gradient)
        outputs.append(output)
    return ops.concatenate(outputs, axis=1)


def _causal_nmf_chunk(x, bases, carry, steps, temperature, eps, one_step_gradient):
    """The parallel form on the positions of ``x`` after a prefix whose sums are ``carry``
    (None: no prefix); returns the reconstruction and the sums at the chunk's end."""
    rounds_x, bases = _rounds_inputs(one_step_gradient, x, bases)
    codes = ops.softmax(ops.einsum("btd,dr->btr", rounds_x, bases) / temperature, axis=-1)
    dictionary = bases  # D_t⁽⁰⁾ = D₀ for every t: broadcast, not materialised
    sums = []
    for step in range(steps):
        if step == 0:
            xd = ops.einsum("btd,dr->btr", rounds_x, bases)
            codes = _code_update(xd, codes, bases, eps)
        else:
            xd = ops.einsum("btd,btdr->btr", rounds_x, dictionary)
            codes = _code_update(xd, codes, dictionary, eps)
        xtc = _prefix_sums(ops.einsum("btd,btr->btdr", rounds_x, codes),
                           None if carry is None else carry[2 * step])
        ctc = _prefix_sums(ops.einsum("btr,btk->btrk", codes, codes),
                           None if carry is None else carry[2 * step + 1])
        sums += [xtc[:, -1], ctc[:, -1]]
        dictionary = _bases_update(dictionary, xtc, ctc, eps)
    if one_step_gradient:
        codes = ops.stop_gradient(codes)
        dictionary = ops.stop_gradient(dictionary)
    xd = ops.einsum("btd,btdr->btr", x, dictionary)
    codes = _code_update(xd, codes, dictionary, eps)
    return ops.einsum("btr,btdr->btd", codes, dictionary), tuple(sums)


def _causal_nmf_blocks(x, bases, block_size, steps, temperature, eps, one_step_gradient):
    """The blocked parallel form: every position of block b against D_b (T/L dictionaries
    per round), the block sums one batched product each, their exclusive prefix over the
    blocks a cumulative sum. T is padded at the end to a multiple of L (padding after the
    last position only reaches blocks after it) and cropped back."""
    blocks, first, unblock = _blocks(x, block_size)
    rounds_blocks, bases = _rounds_inputs(one_step_gradient, blocks, bases)
    codes = ops.softmax(ops.matmul(rounds_blocks, bases) / temperature, axis=-1)
    dictionary = bases  # D_b⁽⁰⁾ = D₀ for every block: broadcast, not materialised
    for step in range(steps):
        codes = _block_code_update(rounds_blocks, codes, dictionary, eps)
        # Σ over each block of xᵀc (d × r) and cᵀc (r × r), then over the blocks before.
        xtc = _exclusive_block_sums(ops.matmul(ops.swapaxes(rounds_blocks, -1, -2), codes))
        ctc = _exclusive_block_sums(ops.matmul(ops.swapaxes(codes, -1, -2), codes))
        dictionary = ops.where(first, bases, _bases_update(dictionary, xtc, ctc, eps))
    if one_step_gradient:
        codes = ops.stop_gradient(codes)
        dictionary = ops.stop_gradient(dictionary)
    codes = _block_code_update(blocks, codes, dictionary, eps)
    return unblock(ops.matmul(codes, ops.swapaxes(dictionary, -1, -2)))


def _blocks(x, block_size):
    """``x`` (B, T, d) as blocks (B, T/L, L, d), T padded at the end to a multiple of L;
    a (1, T/L, 1, 1) mask of the first block; and the function taking per-block outputs
    (B, T/L, L, d) back to (B, T, d)."""
    shape = ops.shape(x)
    length, channels = x.shape[1], x.shape[2]
    # A static length pads only when L does not divide it; a dynamic one always does.
    padding = (-length) % block_size if length is not None else (-shape[1]) % block_size
    pads = length is None or padding > 0
    padded = ops.pad(x, ((0, 0), (0, padding), (0, 0))) if pads else x
    blocks = ops.reshape(padded, (shape[0], -1, block_size, channels))
    first = ops.reshape(ops.arange(ops.shape(blocks)[1]) == 0, (1, -1, 1, 1))

    def unblock(outputs):
        outputs = ops.reshape(outputs, ops.shape(padded))
        return outputs[:, :shape[1]] if pads else outputs

    return blocks, first, unblock


def _block_code_update(blocks, codes, dictionary, eps):
    """c ← c ⊙ (x·D_b) / (c·(D_bᵀD_b) + ε) for the positions (…, L, ·) of each block b,
    with D₀ (d, r) or a dictionary per block (B, T/L, d, r)."""
    xd = ops.matmul(blocks, dictionary)
    gram = ops.matmul(ops.swapaxes(dictionary, -1, -2), dictionary)
    return codes * xd / (ops.matmul(codes, gram) + eps)


def _exclusive_block_sums(values):
    """Σ over the blocks before each block (axis 1), zero for the first."""
    totals = ops.cumsum(values, axis=1)
    return ops.concatenate([ops.zeros_like(totals[:, :1]), totals[:, :-1]], axis=1)


# ---------------------------------------------------------------------------
# Causal soft vector quantisation (the module's last equations).
# ---------------------------------------------------------------------------


def _soft_assignment(x_unit, dictionary, temperature):
    """softmax_r(cos(x, D) / T) of unit rows ``x_unit`` (…, n, d) against D (…, d, r)
    (its columns normalised here), broadcasting: (…, n, r)."""
    return ops.softmax(ops.matmul(x_unit, _l2_normalize(dictionary, axis=-2)) / temperature,
                       axis=-1)


def _means(xtc, counts, eps):
    """D = A diag(n + ε)⁻¹: each atom the code-weighted mean of the positions summed."""
    return xtc / (ops.expand_dims(counts, -2) + eps)


def causal_vq(x, bases, steps=6, temperature=0.1, eps=1e-6, one_step_gradient=True,
              chunk_size=None, block_size=None):
    """Causal soft vector quantisation: x̄_t from x_{≤t} only.

    The parallel form of the causal VQ (see the module's last equations): K rounds, each a
    soft assignment of every position to its prefix's dictionary and the dictionary of
    code-weighted means from the prefix sums Σ x cᵀ and Σ c.

    Args:
        x: features (B, T, d), any sign.
        bases: the initial dictionary D₀ (d, r) (``initial_bases("vq", (d, r), seed=...)``
            or a trained one).
        steps: K ≥ 1, the rounds.
        temperature: T of the soft assignments (0.1: kctx's VQ ham's default).
        eps: ε, the guard of the code sums.
        one_step_gradient: ``True``: the K rounds run without gradient and only the final
            soft assignment back-propagates (Sec. 2.3); ``False``: through every round.
        chunk_size: positions per chunk of the per-position form (``None``: all), as
            :func:`causal_nmf`'s. Must divide T. Not with ``block_size``.
        block_size: L, positions that share a dictionary fitted to the blocks before
            theirs (``None``: a dictionary per position), as :func:`causal_nmf`'s.

    Returns:
        The reconstruction x̄ (B, T, d).

    Examples:
        >>> x = keras.random.normal((2, 8, 16), seed=0)
        >>> from kctx.ops import initial_bases
        >>> d0 = initial_bases("vq", (16, 4), seed=0)
        >>> y = causal_vq(x, d0, steps=3)
        >>> tuple(y.shape)
        (2, 8, 16)
        >>> # position 3 does not see positions 4-7
        >>> changed = ops.concatenate([x[:, :4], 2.0 * x[:, 4:]], axis=1)
        >>> bool(ops.all(causal_vq(changed, d0, steps=3)[:, :4] == y[:, :4]))
        True

    Reference:
        Geng et al., "Is Attention Better Than Matrix Decomposition?", ICLR 2021, Alg. 1
        (Eq. 8) and Sec. 2.3; made causal here (kctx).
    """
    return _parallel(_causal_vq_chunk, _causal_vq_blocks, x, bases, steps, temperature,
                     eps, one_step_gradient, chunk_size, block_size)


def _causal_vq_chunk(x, bases, carry, steps, temperature, eps, one_step_gradient):
    """The per-position parallel form on the positions of ``x`` after a prefix whose sums
    are ``carry`` (None: no prefix); returns x̄ and the sums at the chunk's end."""
    units = _l2_normalize(x, axis=-1)
    per_position = ops.expand_dims(units, -2)  # (B, T, 1, d) against (B, T, d, r)
    rounds_x, rounds_units, bases = _rounds_inputs(one_step_gradient, x, units, bases)
    rounds_per_position = ops.expand_dims(rounds_units, -2)
    dictionary, sums = bases, []
    for step in range(steps):
        if step == 0:  # D₀ for every position: broadcast, not materialised
            codes = _soft_assignment(rounds_units, bases, temperature)
        else:
            codes = ops.squeeze(_soft_assignment(rounds_per_position, dictionary,
                                                 temperature), -2)
        xtc = _prefix_sums(ops.einsum("btd,btr->btdr", rounds_x, codes),
                           None if carry is None else carry[2 * step])
        counts = _prefix_sums(codes, None if carry is None else carry[2 * step + 1])
        sums += [xtc[:, -1], counts[:, -1]]
        dictionary = _means(xtc, counts, eps)
    if one_step_gradient:
        dictionary = ops.stop_gradient(dictionary)
    codes = ops.squeeze(_soft_assignment(per_position, dictionary, temperature), -2)
    return ops.einsum("btr,btdr->btd", codes, dictionary), tuple(sums)


def _causal_vq_blocks(x, bases, block_size, steps, temperature, eps, one_step_gradient):
    """The blocked parallel form: the positions of block b assigned to D_b, fitted to the
    blocks before (D₀ for the first)."""
    blocks, first, unblock = _blocks(x, block_size)
    units = _l2_normalize(blocks, axis=-1)
    rounds_blocks, rounds_units, bases = _rounds_inputs(one_step_gradient, blocks, units, bases)
    dictionary = bases
    for _ in range(steps):
        codes = _soft_assignment(rounds_units, dictionary, temperature)  # (B, T/L, L, r)
        xtc = _exclusive_block_sums(ops.matmul(ops.swapaxes(rounds_blocks, -1, -2), codes))
        counts = _exclusive_block_sums(ops.sum(codes, axis=2))
        dictionary = ops.where(first, bases, _means(xtc, counts, eps))
    if one_step_gradient:
        dictionary = ops.stop_gradient(dictionary)
    codes = _soft_assignment(units, dictionary, temperature)
    return unblock(ops.matmul(codes, ops.swapaxes(dictionary, -1, -2)))


def causal_vq_step(x_t, bases, state, steps=6, temperature=0.1, eps=1e-6, block_size=None):
    """One position of the causal VQ in its recurrent form (generation).

    Args:
        x_t: the position's features, (B, d).
        bases: D₀, (d, r).
        state: the prefix sums of the positions before (with ``block_size``, then their
            block's dictionaries and count), from ``initial_causal_state(...,
            method="vq")`` (with the same ``block_size``) or the previous call.
        steps: K, as in :func:`causal_vq`.
        temperature: T of the soft assignments.
        eps: ε, the guard of the code sums.
        block_size: L, as in :func:`causal_vq` (``None``: a dictionary per position).

    Returns:
        ``(reconstruction, state)``: x̄_t (B, d) and the state including t.

    Examples:
        >>> x = keras.random.normal((2, 5, 16), seed=0)
        >>> from kctx.ops import initial_bases
        >>> d0 = initial_bases("vq", (16, 4), seed=0)
        >>> state = initial_causal_state(2, 16, 4, steps=3, method="vq")
        >>> outputs = []
        >>> for t in range(5):
        ...     y_t, state = causal_vq_step(x[:, t], d0, state, steps=3)
        ...     outputs.append(y_t)
        >>> parallel = causal_vq(x, d0, steps=3)
        >>> bool(ops.max(ops.abs(ops.stack(outputs, axis=1) - parallel)) < 1e-5)
        True
    """
    _check_state(state, steps, block_size, "n⁽ᵏ⁾")
    x_t = ops.convert_to_tensor(x_t)
    bases = ops.cast(ops.convert_to_tensor(bases), x_t.dtype)
    unit = ops.expand_dims(_l2_normalize(x_t, axis=-1), -2)  # (B, 1, d)
    initial = ops.broadcast_to(bases, (ops.shape(x_t)[0], *bases.shape))
    if block_size is not None:
        count, dictionaries = _block_dictionaries(state, steps, block_size, initial)
    dictionary, new_state = initial, []
    for step in range(steps):
        codes = ops.squeeze(_soft_assignment(unit, dictionary, temperature), -2)
        xtc = state[2 * step] + ops.einsum("bd,br->bdr", x_t, codes)
        counts = state[2 * step + 1] + codes
        new_state += [xtc, counts]
        dictionary = (_means(xtc, counts, eps) if block_size is None
                      else dictionaries[step + 1])
    codes = ops.squeeze(_soft_assignment(unit, dictionary, temperature), -2)
    output = ops.einsum("br,bdr->bd", codes, dictionary)
    if block_size is not None:
        # The block completes at t: each round's dictionary from the sums up to t.
        refitted = [_means(new_state[2 * step], new_state[2 * step + 1], eps)
                    for step in range(steps)]
        new_state = _complete_block(new_state, count, dictionaries, refitted, block_size)
    return output, tuple(new_state)
