"""CausalHamburger: a Hamburger token mixer for autoregressive sequence models."""

import keras
from keras import ops

from kctx.layers.hamburger import DEFAULT_TEMPERATURE
from kctx.ops.causal_decomposition import (
    CAUSAL_METHODS,
    causal_nmf,
    causal_nmf_step,
    causal_vq,
    causal_vq_step,
    initial_causal_state,
)
from kctx.ops.matrix_decomposition import seeded_initial_bases
from kctx.validation import (
    check_choice,
    check_positive_float,
    check_positive_int,
    check_sequence_input,
)

INITS = ("fixed", "learned")
NORMS = (None, "layer")


@keras.saving.register_keras_serializable(package="kctx")
class CausalHamburger(keras.layers.Layer):
    """Hamburger on sequences whose output at position t sees positions ≤ t only.

    y_t = ReLU?(x_t + s · norm(W_u · M_t(ReLU(W_l · x)))): the "lower bread" W_l (a Dense
    layer to d = ``latent_dim`` channels, then ReLU for NMF, which needs non-negative
    data), the causal ham M_t (``method="nmf"``, :func:`kctx.ops.causal_nmf`: K rounds of
    NMF's multiplicative updates, each position's code against the dictionary fitted to its
    prefix, from prefix sums of x·cᵀ and c·cᵀ; or ``"vq"``, :func:`kctx.ops.causal_vq`: K
    rounds of soft vector quantisation, each position softly assigned to the code-weighted
    means of its prefix, from prefix sums of x·cᵀ and c), the "upper bread" W_u (a Dense
    layer back to C), an optional per-position
    layer norm, a branch scale s and the residual. Batch normalisation, the official
    Hamburgers' norm, is not offered: its batch statistics in training mix every position
    of every sequence, future ones included.

    It runs in two forms that compute the same numbers:

    * ``layer(x)``: the parallel form, for training and scoring whole sequences,
      O(K·T·d·r²) work and O(T·d·r) memory per round (``chunk_size`` bounds the memory;
      ``block_size`` = L shares a dictionary between the L positions of a block, fitted to
      the blocks before: T/L dictionaries per round, exactly causal still, but another
      operator, see :mod:`kctx.ops.causal_decomposition`);
    * ``layer.step(x_t, state)``: the recurrent form, one position at a time for generation,
      with a state of K·(d·r + r²) numbers per sequence (VQ: K·(d·r + r)) whatever the
      position
      (``layer.initial_state(batch_size)`` starts it).

    The official Hamburgers' options that apply to a causal ham are options here: the rank
    r, the steps K, the one-step gradient (or back-propagation through every round), the
    ReLU after the residual sum (Enjoy-Hamburger V1 / V2 and SegNeXt's LightHam end with
    it; Eq. 6 does not) and V2+'s zero-initialised branch (``residual_scale_init=0.0``).
    The initial dictionary D₀ is one fixed random draw (``init="fixed"``) or trained
    (``init="learned"``; it only receives gradient through the K rounds, so it needs
    ``one_step_gradient=False``, as in the paper). The ham computes in float32 under mixed
    precision.

    Args:
        rank: r, the dictionary atoms.
        steps: K, the rounds of updates.
        method: ``"nmf"`` or ``"vq"``, the decomposition (the paper's Alg. 2 or Alg. 1,
            made causal).
        latent_dim: d, the ham's channels (default: the input's C).
        init: ``"fixed"`` or ``"learned"`` initial dictionary D₀ (d, r).
        temperature: T of the softmax: NMF's initial codes (default 1.0), VQ's every soft
            assignment (default 0.1), as :class:`Hamburger`'s.
        eps: the absolute guard of the updates (the official 1e-6).
        one_step_gradient: ``True``: only the final code update back-propagates (Sec. 2.3);
            ``False``: through every round.
        final_relu: a ReLU after the residual sum (the official blocks' end).
        norm: ``None`` or ``"layer"`` (a layer norm after the upper bread, per position).
        residual_scale_init: ``None`` (no branch scale) or the initial value of a trainable
            scalar s multiplying the branch (``0.0``: the block starts as the identity).
        residual: add the input, y = x + s·…; ``False`` returns the branch s·norm(W_u·M),
            for a pre-norm block that adds the residual itself
            (:class:`kctx.models.CausalLanguageModel`).
        chunk_size: positions the parallel form processes at once (``None``: all).
        block_size: L, positions that share a dictionary (``None``: one per position).
        seed: the seed of the fixed (or the learned one's initial) D₀.
        kernel_initializer: initializer of the breads' kernels.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (batch, T, C).

    Examples:
        >>> layer = CausalHamburger(rank=4, steps=3, seed=0)
        >>> x = keras.random.normal((2, 10, 16), seed=1)
        >>> y = layer(x)
        >>> tuple(y.shape)
        (2, 10, 16)
        >>> state = layer.initial_state(2)
        >>> y_0, state = layer.step(x[:, 0], state)  # generation, one position at a time
        >>> bool(ops.max(ops.abs(y_0 - y[:, 0])) < 1e-5)
        True
        >>> vq = CausalHamburger(rank=4, steps=3, method="vq", block_size=4)
        >>> tuple(vq(x).shape), vq.temperature
        ((2, 10, 16), 0.1)

    Reference:
        Geng et al., "Is Attention Better Than Matrix Decomposition?", ICLR 2021 (the
        Hamburger, Alg. 1 and 2, Sec. 2.3); the causal ham is kctx's
        (:mod:`kctx.ops.causal_decomposition`).
    """

    def __init__(self, rank=16, steps=6, latent_dim=None, init="fixed", temperature=None,
                 eps=1e-6, one_step_gradient=True, final_relu=False, norm=None,
                 residual_scale_init=None, residual=True, chunk_size=None, block_size=None,
                 seed=0, kernel_initializer="glorot_uniform", method="nmf", **kwargs):
        super().__init__(**kwargs)
        check_positive_int("rank", rank)
        check_positive_int("steps", steps)
        check_choice("method", method, CAUSAL_METHODS)
        check_positive_int("latent_dim", latent_dim, allow_none=True)
        check_choice("init", init, INITS)
        check_positive_float("temperature", temperature, allow_none=True)
        check_choice("norm", norm, NORMS)
        check_positive_int("chunk_size", chunk_size, allow_none=True)
        check_positive_int("block_size", block_size, allow_none=True)
        if chunk_size is not None and block_size is not None:
            raise ValueError("`chunk_size` bounds the per-position form's memory, "
                             "`block_size` chooses the blocked form: give one of them. "
                             f"Received: chunk_size={chunk_size}, block_size={block_size}")
        if final_relu and not residual:
            raise ValueError("`final_relu=True` is the ReLU after the residual sum: it needs "
                             "`residual=True`. Received: final_relu=True, residual=False")
        if init == "learned" and one_step_gradient:
            raise ValueError("`init='learned'` needs `one_step_gradient=False`: with the "
                             "one-step gradient D₀ receives no gradient. Received: "
                             "init='learned', one_step_gradient=True")
        self.rank = rank
        self.steps = steps
        self.method = method
        self.latent_dim = latent_dim
        self.init = init
        self.temperature = float(DEFAULT_TEMPERATURE[method] if temperature is None
                                 else temperature)
        self.eps = float(eps)
        self.one_step_gradient = bool(one_step_gradient)
        self.final_relu = bool(final_relu)
        self.norm = norm
        self.residual_scale_init = (None if residual_scale_init is None
                                    else float(residual_scale_init))
        self.residual = bool(residual)
        self.chunk_size = chunk_size
        self.block_size = block_size
        self.seed = int(seed)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        check_sequence_input(self, input_shape, length_known=False)
        channels = int(input_shape[-1])
        d = self.latent_dim or channels
        self._d = d
        self.lower_bread = keras.layers.Dense(d, activation="relu" if self.method == "nmf"
                                              else None,
                                              kernel_initializer=self.kernel_initializer,
                                              dtype=self.dtype_policy, name="lower_bread")
        self.lower_bread.build(input_shape)
        self.upper_bread = keras.layers.Dense(channels,
                                              kernel_initializer=self.kernel_initializer,
                                              dtype=self.dtype_policy, name="upper_bread")
        self.upper_bread.build((*input_shape[:-1], d))
        if self.norm == "layer":
            self.layer_norm = keras.layers.LayerNormalization(epsilon=1e-5,
                                                              dtype=self.dtype_policy,
                                                              name="layer_norm")
            self.layer_norm.build((*input_shape[:-1], channels))
        initial = seeded_initial_bases(self.method, (d, self.rank), self.seed)
        self.bases = self.add_weight(
            name="bases", shape=(d, self.rank),
            initializer=keras.initializers.Constant(initial),
            trainable=self.init == "learned",
            constraint=(keras.constraints.NonNeg()
                        if self.init == "learned" and self.method == "nmf" else None),
            dtype="float32", autocast=False)
        if self.residual_scale_init is not None:
            self.residual_scale = self.add_weight(
                name="residual_scale", shape=(),
                initializer=keras.initializers.Constant(self.residual_scale_init))

    def _ham(self, latent, chunk_size=None):
        x = ops.cast(latent, "float32")
        ham = causal_nmf if self.method == "nmf" else causal_vq
        return ham(x, self.bases, steps=self.steps, temperature=self.temperature, eps=self.eps,
                   one_step_gradient=self.one_step_gradient, chunk_size=chunk_size,
                   block_size=self.block_size)

    def _output(self, inputs, reconstruction):
        branch = self.upper_bread(ops.cast(reconstruction, self.compute_dtype))
        if self.norm == "layer":
            branch = self.layer_norm(branch)
        if self.residual_scale_init is not None:
            branch = branch * ops.cast(self.residual_scale, branch.dtype)
        if not self.residual:
            return branch
        outputs = inputs + branch
        return ops.relu(outputs) if self.final_relu else outputs

    def call(self, inputs):
        return self._output(inputs, self._ham(self.lower_bread(inputs), self.chunk_size))

    def initial_state(self, batch_size, capacity=None):
        """The recurrent form's state before the first position (zero prefix sums;
        ``capacity``: unused, the state has one size at every position)."""
        return initial_causal_state(batch_size, self._d, self.rank, self.steps,
                                    block_size=self.block_size, method=self.method)

    def step(self, inputs, state):
        """The output at one position from its input (batch, C) and the state of the
        positions before; returns ``(outputs, state)``, the state now including it."""
        inputs = ops.convert_to_tensor(inputs)  # (a NumPy array + a torch tensor fails)
        latent = ops.cast(self.lower_bread(inputs), "float32")
        step = causal_nmf_step if self.method == "nmf" else causal_vq_step
        reconstruction, state = step(latent, self.bases, state, steps=self.steps,
                                     temperature=self.temperature, eps=self.eps,
                                     block_size=self.block_size)
        return self._output(inputs, reconstruction), state

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            rank=self.rank, steps=self.steps, method=self.method, latent_dim=self.latent_dim,
            init=self.init,
            temperature=self.temperature, eps=self.eps,
            one_step_gradient=self.one_step_gradient, final_relu=self.final_relu,
            norm=self.norm, residual_scale_init=self.residual_scale_init,
            residual=self.residual, chunk_size=self.chunk_size,
            block_size=self.block_size, seed=self.seed,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer))
        return config
