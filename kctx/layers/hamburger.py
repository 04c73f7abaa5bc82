"""Hamburger: lower bread → matrix-decomposition ham → upper bread (Geng et al. 2021)."""

import warnings

import keras
from keras import ops

from kctx.validation import (
    check_choice,
    check_image_input,
    check_nonnegative_float,
    check_optional_number,
    check_positive_float,
    check_positive_int,
    standardize_data_format,
)
from kctx.layers._eager_constants import torch_constant
from kctx.layers.context_block import register_context_block
from kctx.ops.matrix_decomposition import METHODS, decompose, initial_bases
from kctx.ops.replicas import cross_replica_mean, synchronized_batch_norm

INITS = ("random", "online", "fixed", "learned")
NORMS = ("batch", "group", None)
# norm_groups=None: the largest divisor of the channels not above this (SegNeXt's 32).
MAX_DEFAULT_NORM_GROUPS = 32

# Default temperature per method: the official code fixes T = 1 for the NMF
# code initialisation; for VQ/CD the paper recommends a low T and finds
# T = 0.1 best (Appendix F, Table 9).
DEFAULT_TEMPERATURE = {"nmf": 1.0, "vq": 0.1, "cd": 0.1}


@keras.saving.register_keras_serializable(package="kctx")
class Hamburger(keras.layers.Layer):
    """Hamburger global-context block with an NMF, VQ or CD "ham".

    Y = Z + BN(W_u · M(W_l · Z))  (Eq. 5–6): a 1×1 "lower bread" W_l maps the
    C input channels to d = ``latent_dim`` (followed by ReLU for NMF, whose
    input must be non-negative), the ham M factorises the H·W × d feature
    matrix into a rank-r product D·C by K steps of an optimisation algorithm
    (Alg. 1–3, see :func:`kctx.ops.matrix_decomposition`), a 1×1 "upper
    bread" W_u maps d back to C, then a normalisation and the skip
    connection. With ``groups`` = S > 1 the d channels are split into S
    independent d/S-channel decompositions (``MD_S`` of the official code).

    Every official implementation ends with a ReLU after the residual sum,
    Y = ReLU(Z + BN(W_u · M(W_l · Z))) — Enjoy-Hamburger's ``HamburgerV1`` / ``V2``
    and SegNeXt's ``LightHamHead`` — which Eq. 6 omits; ``final_relu=True`` (the
    default) applies it, ``final_relu=False`` gives Eq. 6 as printed (and
    HamGAN's block, which has none). The official variants are options of this
    one class (:data:`OFFICIAL_VARIANTS` holds their settings):

    * V1 (Enjoy-Hamburger, ``VERSION='V1'``): upper bread + batch norm
      (``norm="batch"``), one-step gradient, absolute update guard.
    * V2 (the official default, ``VERSION='V2'``): a 1×1 conv-BN-ReLU
      "cheese" on the d channels after the ham (``cheese=True``) and an upper
      bread without a norm (``norm=None``).
    * SegNeXt's LightHamHead: group norm after the upper bread (``norm="group"``;
      ``norm_groups=None``: the largest divisor of C not above 32, which is
      SegNeXt's 32 on its channel widths), back-propagation through all K steps
      (``one_step_gradient=False``), K = 6 in training and 7 at evaluation,
      r = 16, the absolute update guard 1e-6 (``relative_eps=False``).
    * V2+'s ``ZERO_HAM`` (a learnable branch scale starting at 0):
      ``residual_scale_init=0.0``.

    Cost is O(n·d·r) per step instead of self-attention's O(n²·d). The
    1×1 convolution that follows the ham (the upper bread, or V2's cheese) is
    applied to the factors, W·(D·C) = (W·D)·C, which gives the same output
    without materialising the n × d reconstruction and saves one n·d·C matmul
    (kctx's MAC count is therefore below the paper's Table 3); at inference the
    batch norm after it is folded into the r × C projected dictionary.

    The ham always computes in float32 (also under ``mixed_bfloat16`` /
    ``mixed_float16``) and is cast back to the compute dtype. Gradients use the
    one-step gradient of Sec. 2.3 unless ``one_step_gradient=False`` (BPTT).

    Training note: the ham's low-rank reconstruction varies little across
    positions, so the batch normalisation after the upper bread sees a signal
    with a large mean and a small variance and amplifies it; inference uses
    the moving statistics, which must then match the final features closely.
    Train as the paper does, with a learning rate decaying to zero, and in
    short runs use a faster average (e.g. ``norm_momentum=0.9``); see
    ``notebooks/hamburger.ipynb``.

    Models saved before these options existed (no ``final_relu`` in their
    config) load with ``final_relu=False``: they keep the Eq. 6 block they
    were trained with.

    Args:
        rank: r, number of dictionary atoms (the paper uses d = 8r).
        steps: K, optimisation steps in training (paper: 6).
        eval_steps: K at inference; defaults to ``steps`` (the paper's advice,
            Sec. 3.1).
        method: ``"nmf"`` (default), ``"vq"`` or ``"cd"``.
        latent_dim: d, channels of the ham; defaults to the input channels.
        groups: S, number of independent decompositions over d/S channels.
        init: dictionary initialisation (Appendix F, Table 8): ``"random"``
            (a new draw every training call: Uniform(0, 1) for NMF, Gaussian for VQ/CD,
            columns L2-normalised), ``"online"`` (non-trainable bases moved in
            training toward the batch-mean solution by ``online_rate`` and
            re-normalised, then used as the initialisation), ``"fixed"``
            (non-trainable random constant) or ``"learned"`` (trainable
            initial bases; they only receive gradient through the K steps, so
            this needs ``one_step_gradient=False`` as in the paper; for NMF
            they are kept non-negative, ``keras.constraints.NonNeg``).
        temperature: T of the softmax; ``None`` picks 1.0 for NMF and 0.1 for
            VQ/CD (Table 9).
        beta: β of the CD closed form (Appendix B).
        eps: guard of the multiplicative updates (NMF) and of the VQ code sums.
        relative_eps: NMF only: ``True`` (default) iterates on the features
            divided by their largest magnitude, so ``eps`` is relative to it
            (scale-invariant); ``False`` uses the absolute ``eps`` on the
            features themselves, as the official code does (1e-6).
        one_step_gradient: ``True`` for the one-step gradient, ``False`` for
            back-propagation through all steps.
        online_rate: η of the ``"online"`` update,
            D ← normalize(D + η·(mean_batch(D*) − D)) (official ``ETA``: 0.9).
        seed: int seed. With ``init="random"``, training draws a new
            dictionary every call (from a seeded stream), and inference uses
            one fixed dictionary, so predictions are reproducible: with a seed
            the draw of that seed (a function of the seed alone, on every
            backend); without one a draw made at build time and kept as the
            non-trainable weight ``inference_bases`` (saved and restored with
            the model; reproducible under ``keras.utils.set_random_seed``).
            Models saved by kctx 0.1 had no such weight; they load with a new
            draw and a warning (their unseeded hams drew a new dictionary at
            every inference call).
        synchronized_batch_norm: all-reduce the batch statistics across
            replicas (cross-replica BN, as HamGAN on TPU): TensorFlow's
            synchronized batch norm; on JAX the data-parallel step's statistics
            are the global batch's already
            (:func:`kctx.ops.synchronized_batch_norm`).
        residual_scale_init: ``None`` for the paper's Y = Z + BN(H(Z))
            (Eq. 6); a number adds a learnable scalar σ with this initial
            value, Y = Z + σ·BN(H(Z)) — HamGAN uses σ = 0 (SAGAN's attention
            scale), as does V2+'s ``ZERO_HAM``: the branch starts at zero.
        final_relu: ReLU after the residual sum, as every official Hamburger
            for segmentation (``True``, default); ``False``: Eq. 6 as printed.
        cheese: V2's cheese, a 1×1 conv (no bias) + batch norm + ReLU on the d
            channels between the ham and the upper bread.
        norm: the normalisation after the upper bread: ``"batch"`` (V1, the
            default), ``"group"`` (SegNeXt's LightHamHead) or ``None`` (V2).
        norm_groups: groups of ``norm="group"``, which normalises the upper
            bread's C output channels (the input's channels): a positive
            integer that divides C (32 in SegNeXt), or ``None`` for the largest
            divisor of C not above 32 (32 on any multiple of 32; 16 on 16
            channels, 24 on 48, 25 on 100), resolved at build into
            ``resolved_norm_groups`` (the config keeps ``None``).
        norm_momentum: momentum of the batch normalisations (Keras convention:
            the official ``BN_MOM = 3e-4`` of PyTorch is 0.9997 here).
        norm_epsilon: epsilon of the normalisations.
        kernel_initializer: initializer of both breads.
        kernel_regularizer: regularizer of both breads.
        data_format: must resolve to ``"channels_last"``.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: (batch, height, width, channels) tensor; height and width may
            be ``None``.
        training: training mode (steps, batch-norm statistics, online update).

    Full-int8 export (:func:`kctx.export.export_model`) keeps the ham in float32
    (``quantize_int8 = False``): NMF's multiplicative updates divide by
    C·DᵀD + eps, which int8 rounds to zero (LiteRT stops with "DIV failed to
    invoke"), and K iterations would compound the rounding.

    Examples:
        >>> inputs = keras.Input((None, None, 64))
        >>> x = keras.layers.Conv2D(64, 3, padding="same")(inputs)
        >>> x = Hamburger(rank=8, steps=6, method="nmf")(x)
        >>> model = keras.Model(inputs, x)

    Reference:
        Geng, Guo, Chen, Li, Wei, Lin. "Is Attention Better Than Matrix
        Decomposition?" ICLR 2021 — Eq. 5–7 (Hamburger), Alg. 1 (VQ),
        Alg. 2 (NMF), Alg. 3 / Eq. 14 (CD), Eq. 13 (one-step gradient).
    """

    quantize_int8 = False  # kept in float32 by full-int8 export (see above)

    def __init__(
        self,
        rank=64,
        steps=6,
        eval_steps=None,
        method="nmf",
        latent_dim=None,
        groups=1,
        init="random",
        temperature=None,
        beta=0.1,
        eps=1e-6,
        relative_eps=True,
        one_step_gradient=True,
        online_rate=0.9,
        seed=None,
        synchronized_batch_norm=False,
        residual_scale_init=None,
        final_relu=True,
        cheese=False,
        norm="batch",
        norm_groups=32,
        norm_momentum=0.99,
        norm_epsilon=1e-3,
        kernel_initializer="he_normal",
        kernel_regularizer=None,
        data_format=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("rank", rank)
        check_positive_int("steps", steps)
        check_positive_int("eval_steps", eval_steps, allow_none=True)
        check_choice("method", method, METHODS)
        check_positive_int("latent_dim", latent_dim, allow_none=True)
        check_positive_int("groups", groups)
        check_choice("init", init, INITS)
        check_positive_float("temperature", temperature, allow_none=True)
        check_nonnegative_float("beta", beta)
        check_positive_float("eps", eps)
        if not (isinstance(online_rate, (int, float)) and 0 < online_rate <= 1):
            raise ValueError(
                f"`online_rate` must be in (0, 1]. Received: online_rate={online_rate!r}"
            )
        check_optional_number("residual_scale_init", residual_scale_init)
        check_choice("norm", norm, NORMS)
        check_positive_int("norm_groups", norm_groups, allow_none=True)
        for flag, value in (("relative_eps", relative_eps), ("final_relu", final_relu),
                            ("cheese", cheese), ("one_step_gradient", one_step_gradient)):
            if not isinstance(value, bool):
                raise ValueError(f"`{flag}` must be True or False. Received: {flag}={value!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"`seed` must be an int or None. Received: seed={seed!r}")
        if latent_dim is not None and latent_dim % groups:
            raise ValueError(
                "`latent_dim` must be divisible by `groups`. "
                f"Received: latent_dim={latent_dim}, groups={groups}"
            )
        if init == "learned" and one_step_gradient:
            raise ValueError(
                "init='learned' trains the initial bases through the K optimisation "
                "steps, which the one-step gradient cuts (Appendix F). Pass "
                "one_step_gradient=False with it. Received: init='learned', "
                "one_step_gradient=True"
            )
        self.rank = rank
        self.steps = steps
        self.eval_steps = eval_steps
        self.method = method
        self.latent_dim = latent_dim
        self.groups = groups
        self.init = init
        self.temperature = temperature
        self.beta = beta
        self.eps = eps
        self.relative_eps = relative_eps
        self.one_step_gradient = one_step_gradient
        self.online_rate = online_rate
        self.seed = seed
        self.synchronized_batch_norm = synchronized_batch_norm
        self.residual_scale_init = residual_scale_init
        self.final_relu = final_relu
        self.cheese = cheese
        self.norm_type = norm
        self.norm_groups = norm_groups
        # norm_groups, or for None its value for the input's channels (set in build).
        self.resolved_norm_groups = norm_groups
        self.norm_momentum = norm_momentum
        self.norm_epsilon = norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.data_format = standardize_data_format(data_format)
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.cheese_norm = self._batch_norm("cheese_norm") if cheese else None
        if norm == "batch":
            self.norm = self._batch_norm("norm")
        elif norm == "group":
            # With norm_groups=None the groups are set in build, from the channels.
            self.norm = keras.layers.GroupNormalization(
                groups=norm_groups or 1, epsilon=norm_epsilon, dtype=self.dtype_policy,
                name="norm")
        else:
            self.norm = None

    def _batch_norm(self, name):
        return keras.layers.BatchNormalization(
            axis=-1,
            momentum=self.norm_momentum,
            epsilon=self.norm_epsilon,
            synchronized=synchronized_batch_norm(self.synchronized_batch_norm),
            dtype=self.dtype_policy,
            name=name,
        )

    @property
    def resolved_temperature(self):
        if self.temperature is None:
            return DEFAULT_TEMPERATURE[self.method]
        return self.temperature

    def build(self, input_shape):
        channels = check_image_input(self, input_shape)
        latent_dim = self.latent_dim or channels
        if latent_dim % self.groups:
            raise ValueError(
                "The latent dimension (input channels when `latent_dim` is None) must "
                f"be divisible by `groups`. Received: latent_dim={latent_dim}, "
                f"groups={self.groups}"
            )
        if self.norm_type == "group":
            if self.norm_groups is None:
                self.resolved_norm_groups = max(
                    g for g in range(1, min(channels, MAX_DEFAULT_NORM_GROUPS) + 1)
                    if channels % g == 0)
            elif channels % self.norm_groups:
                raise ValueError(
                    "The input channels must be divisible by `norm_groups` for norm='group' "
                    "(or pass norm_groups=None for the largest divisor not above "
                    f"{MAX_DEFAULT_NORM_GROUPS}). "
                    f"Received: channels={channels}, norm_groups={self.norm_groups}"
                )
            self.norm.groups = self.resolved_norm_groups
        self._channels = channels
        self._latent_dim = latent_dim
        self._group_dim = latent_dim // self.groups
        self.lower_bread_kernel = self.add_weight(
            name="lower_bread_kernel",
            shape=(channels, latent_dim),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
        )
        self.lower_bread_bias = self.add_weight(
            name="lower_bread_bias", shape=(latent_dim,), initializer="zeros"
        )
        # No bias: the batch normalisation that follows has one (official code).
        self.upper_bread_kernel = self.add_weight(
            name="upper_bread_kernel",
            shape=(latent_dim, channels),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
        )
        if self.init != "random":
            self.bases = self.add_weight(
                name="bases",
                shape=(self.groups, self._group_dim, self.rank),
                initializer=self._bases_initializer,
                trainable=self.init == "learned",
                # NMF's dictionary is non-negative, and the multiplicative updates keep D
                # and C >= 0 only from a non-negative start; optimizer steps alone drift a
                # learned D below 0, so it is kept in the orthant.
                constraint=(keras.constraints.NonNeg()
                            if self.init == "learned" and self.method == "nmf" else None),
                autocast=False,
                # Every replica computes the same update (the batch target is
                # all-reduced), so the first replica's write is the value.
                aggregation="only_first_replica" if self.init == "online" else "none",
            )
        if self.residual_scale_init is not None:
            self.residual_scale = self.add_weight(
                name="residual_scale",
                shape=(),
                initializer=keras.initializers.Constant(float(self.residual_scale_init)),
            )
        self.inference_bases = None
        if self.init == "random" and self.seed is None:
            # Drawn once here: inference without a seed is still deterministic, and the
            # graph holds no random op (ONNX Runtime and LiteRT cannot run them).
            self.inference_bases = self.add_weight(
                name="inference_bases",
                shape=(self.groups, self._group_dim, self.rank),
                initializer=self._bases_initializer,
                trainable=False,
                autocast=False,
            )
        if self.cheese:
            # Added last, so the order of the weights above is that of kctx 0.1.
            self.cheese_kernel = self.add_weight(
                name="cheese_kernel",
                shape=(latent_dim, latent_dim),
                initializer=self.kernel_initializer,
                regularizer=self.kernel_regularizer,
            )
            self.cheese_norm.build(tuple(input_shape[:-1]) + (latent_dim,))
        if self.norm is not None:
            self.norm.build(tuple(input_shape[:-1]) + (channels,))

    def load_own_variables(self, store):
        if self.inference_bases is not None and len(store.keys()) == len(
                self._trainable_variables):  # saved by kctx 0.1: no inference dictionary
            for index, variable in enumerate(self._trainable_variables):
                variable.assign(store[str(index)])
            warnings.warn(
                f"Hamburger layer '{self.name}' was saved without `inference_bases` (kctx 0.1, "
                "where an unseeded ham drew a new dictionary at every inference call); it keeps "
                "the dictionary drawn at build. Save the model again to keep it.", stacklevel=2)
            return
        super().load_own_variables(store)

    def _bases_initializer(self, shape, dtype=None):
        return initial_bases(self.method, shape, seed=self.seed, dtype=dtype or "float32")

    def _initial_bases(self, batch_size, training):
        group_shape = (self.groups, self._group_dim, self.rank)
        if self.init == "random":
            if training:
                shape = (batch_size * self.groups, self._group_dim, self.rank)
                return initial_bases(self.method, shape, seed=self.seed_generator)
            # One fixed dictionary for every sample: reproducible inference.
            if self.inference_bases is not None:
                bases = ops.convert_to_tensor(self.inference_bases)
            else:
                bases = self._fixed_initial_bases(group_shape)
        else:
            bases = ops.convert_to_tensor(self.bases)
        bases = ops.broadcast_to(bases[None], (batch_size,) + group_shape)
        return ops.reshape(bases, (batch_size * self.groups, self._group_dim, self.rank))

    def _fixed_initial_bases(self, shape):
        """The inference dictionary drawn from the integer seed. PyTorch runs eagerly, so
        there it is made a tensor on the weights' device once and kept (a conversion at every
        call is a host-to-device copy that waits for the GPU and breaks CUDA-graph
        capture); the other backends trace the call and hold it as a constant."""
        if keras.backend.backend() != "torch":
            return initial_bases(self.method, shape, seed=self.seed)
        return torch_constant(self, "_torch_fixed_bases",
                              str(self.lower_bread_kernel.value.device), (shape, self.seed),
                              lambda: initial_bases(self.method, shape, seed=self.seed))

    def _online_update(self, bases):
        """D ← normalize(D + η (mean over the batch of D* − D)) along d.

        The batch mean runs over the global batch (all replicas).
        """
        solved = ops.stop_gradient(bases)
        solved = ops.reshape(solved, (-1, self.groups, self._group_dim, self.rank))
        target = cross_replica_mean(ops.mean(solved, axis=0))
        moved = self.bases + self.online_rate * (target - self.bases)
        norm = ops.sqrt(ops.sum(ops.square(moved), axis=1, keepdims=True))
        self.bases.assign(moved / ops.maximum(norm, 1e-12))

    def call(self, inputs, training=None):
        shape = ops.shape(inputs)
        batch, height, width = shape[0], shape[1], shape[2]
        positions = height * width
        groups, group_dim = self.groups, self._group_dim

        # Lower bread: 1×1 convolution C → d (a matmul over channels).
        x = ops.matmul(inputs, self.lower_bread_kernel) + self.lower_bread_bias
        if self.method == "nmf":
            x = ops.relu(x)

        # Ham in float32: (B, H, W, d) → (B·S, N, d/S).
        x = ops.cast(x, "float32")
        x = ops.reshape(x, (batch, positions, groups, group_dim))
        if groups > 1:
            x = ops.transpose(x, (0, 2, 1, 3))
        x = ops.reshape(x, (batch * groups, positions, group_dim))
        bases = self._initial_bases(batch, training)
        bases, codes = decompose(
            x,
            bases,
            method=self.method,
            steps=self.steps if training else (self.eval_steps or self.steps),
            temperature=self.resolved_temperature,
            beta=self.beta,
            eps=self.eps,
            one_step_gradient=self.one_step_gradient,
            relative_eps=self.relative_eps,
        )
        if training and self.init == "online":
            self._online_update(bases)

        # The 1×1 conv after the ham (the cheese, else the upper bread) on the factors:
        # X̄·W = C·(Dᵀ·W), per group.
        compute_dtype = self.compute_dtype
        bases = ops.reshape(ops.cast(bases, compute_dtype), (batch, groups, group_dim, self.rank))
        codes = ops.reshape(ops.cast(codes, compute_dtype), (batch, groups, positions, self.rank))
        if self.cheese:
            x = ops.relu(self._factor_conv(codes, bases, self.cheese_kernel, self.cheese_norm,
                                           training, (batch, height, width, self._latent_dim)))
            y = ops.matmul(x, self.upper_bread_kernel)
            if self.norm is not None:
                y = self.norm(y, training=training)
        else:
            folded_norm = self.norm if self.norm_type == "batch" else None
            y = self._factor_conv(codes, bases, self.upper_bread_kernel, folded_norm, training,
                                  shape)
            if self.norm_type == "group":
                y = self.norm(y, training=training)
        if self.residual_scale_init is not None:
            y = self.residual_scale * y
        outputs = inputs + y
        return ops.relu(outputs) if self.final_relu else outputs

    def _factor_conv(self, codes, bases, kernel, batch_norm, training, shape):
        """BN(X̄·W) of ``shape`` (B, H, W, C') from the factors (B, S, N, r), (B, S, d/S, r)
        and the (d, C') kernel W, without the n × d reconstruction X̄; the batch norm
        (optional) folded into the r × C' projected dictionary at inference."""
        groups = self.groups
        kernel = ops.reshape(kernel, (groups, self._group_dim, kernel.shape[-1]))
        projected_bases = ops.einsum("bsdr,sdc->bsrc", bases, kernel)
        use_batch_statistics = batch_norm is not None and training and batch_norm.trainable
        norm_shift = None
        if batch_norm is not None and not use_batch_statistics:
            # Inference: fold the batch norm into the r×C' projected bases, so it
            # costs a bias add instead of passes over the feature map.
            norm_scale, norm_shift = self._folded_norm(batch_norm)
            projected_bases = projected_bases * norm_scale
        if groups == 1:
            y = ops.matmul(codes[:, 0], projected_bases[:, 0])
        else:
            y = ops.einsum("bsnr,bsrc->bnc", codes, projected_bases)
        if use_batch_statistics:
            return batch_norm(ops.reshape(y, shape), training=True)
        return ops.reshape(y if norm_shift is None else y + norm_shift, shape)

    def _folded_norm(self, norm):
        """BN(y) = y·a + b with the moving statistics: a = γ/√(σ²+ε), b = β − μ·a."""
        scale = norm.gamma * ops.rsqrt(ops.convert_to_tensor(norm.moving_variance) + norm.epsilon)
        shift = norm.beta - norm.moving_mean * scale
        return ops.cast(scale, self.compute_dtype), ops.cast(shift, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "rank": self.rank,
                "steps": self.steps,
                "eval_steps": self.eval_steps,
                "method": self.method,
                "latent_dim": self.latent_dim,
                "groups": self.groups,
                "init": self.init,
                "temperature": self.temperature,
                "beta": self.beta,
                "eps": self.eps,
                "relative_eps": self.relative_eps,
                "one_step_gradient": self.one_step_gradient,
                "online_rate": self.online_rate,
                "seed": self.seed,
                "synchronized_batch_norm": self.synchronized_batch_norm,
                "residual_scale_init": self.residual_scale_init,
                "final_relu": self.final_relu,
                "cheese": self.cheese,
                "norm": self.norm_type,
                "norm_groups": self.norm_groups,
                "norm_momentum": self.norm_momentum,
                "norm_epsilon": self.norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
                "data_format": self.data_format,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        # Saved before the official options existed: keep the Eq. 6 block it was trained
        # with (no final ReLU); the other new options' defaults are the old behaviour.
        config = {"final_relu": False, **config}
        return super().from_config(config)


def set_hamburger_eval_steps(model, eval_steps):
    """Set K at inference (``eval_steps``) of every :class:`Hamburger` in ``model``.

    HamNet (Sec. 4, Appendix F) tests more or fewer optimisation steps K at
    evaluation than in training; this re-scores a trained model that way
    without rebuilding it. Call it before the model's first inference call
    (a traced ``predict`` keeps the K it was traced with).

    Args:
        model: a Keras layer or model holding one or more Hamburgers, at any depth.
        eval_steps: K at inference, a positive integer; ``None``: the training K.

    Returns:
        The number of Hamburger layers changed.

    Examples:
        >>> model = keras.Sequential([keras.Input((8, 8, 16)), Hamburger(rank=4, seed=0)])
        >>> set_hamburger_eval_steps(model, 12)
        1
    """
    check_positive_int("eval_steps", eval_steps, allow_none=True)
    hamburgers = [layer for layer in model._flatten_layers(include_self=True)
                  if isinstance(layer, Hamburger)]
    if not hamburgers:
        raise ValueError("set_hamburger_eval_steps needs a model with a Hamburger layer. "
                         f"Received: model={model.name!r} with none")
    for layer in hamburgers:
        layer.eval_steps = eval_steps
    return len(hamburgers)


# The official Hamburgers' settings (Enjoy-Hamburger ``seg/HamNet/settings.py``:
# VERSION, MD_R, TRAIN_STEPS / EVAL_STEPS, BN_MOM = 3e-4; SegNeXt's configs: MD_R = 16,
# train_steps 6, eval_steps 7, GN with 32 groups), as Hamburger arguments. Every one
# runs NMF with its absolute 1e-6 guard, C₀ = softmax(x·D) (INV_T = 1) and ends with
# ReLU(Z + ·). d is the input's channels in all three (MD_D = 512 = CHANNELS; LightHam:
# ham_channels). LightHam's norm_groups=None is SegNeXt's 32 on its widths (multiples
# of 32) and the largest divisor of C not above 32 on others: ham_nmf_light runs on any C.
OFFICIAL_VARIANTS = {
    # Enjoy-Hamburger HamburgerV1: upper bread + BN, one-step gradient.
    "v1": dict(method="nmf", rank=64, steps=6, eval_steps=6, norm="batch", cheese=False,
               final_relu=True, relative_eps=False, one_step_gradient=True,
               norm_momentum=0.9997, norm_epsilon=1e-5),
    # HamburgerV2 (the official default): conv-BN-ReLU cheese, upper bread without a norm.
    "v2": dict(method="nmf", rank=64, steps=6, eval_steps=6, norm=None, cheese=True,
               final_relu=True, relative_eps=False, one_step_gradient=True,
               norm_momentum=0.9997, norm_epsilon=1e-5),
    # SegNeXt's LightHamHead: GN (32 groups where C allows) after the upper bread, BPTT
    # through all K steps.
    "light": dict(method="nmf", rank=16, steps=6, eval_steps=7, norm="group", norm_groups=None,
                  cheese=False, final_relu=True, relative_eps=False, one_step_gradient=False,
                  norm_epsilon=1e-5),
}


def _ham(method, variant=None):
    def factory(**kwargs):
        defaults = dict(OFFICIAL_VARIANTS[variant]) if variant else {"method": method}
        return Hamburger(**{**defaults, **kwargs})

    factory.__doc__ = (f"Hamburger with the {method.upper()} ham (kwargs go to Hamburger)"
                       if variant is None else
                       f"The official Hamburger {variant!r} (OFFICIAL_VARIANTS; kwargs override).")
    return factory


def _gan_recipe(channels):
    # HamGAN (Appendix E.4): d = C, r = d/8, K = 6, cross-replica BN and a residual scale
    # σ = 0 (SAGAN's γ), so G and D start without the block; no ReLU after the sum (the
    # official HamGAN's `shortcut + sigma * x`); a seeded dictionary, so a trained
    # generator samples reproducibly.
    return dict(rank=max(1, channels // 8), steps=6, synchronized_batch_norm=True,
                residual_scale_init=0.0, final_relu=False, seed=0)


def _segmentation_recipe(channels):
    # HamNet's head (Appendix E.3): r = 64, K = 6 on the head's d channels; seeded, so
    # evaluation is reproducible and equal after a save / load.
    return dict(rank=64, steps=6, seed=0)


def _seeded_recipe(channels):
    # The official variants keep their own settings; seeded for reproducible evaluation.
    return dict(seed=0)


for _method in METHODS:
    register_context_block(f"ham_{_method}", _ham(_method),
                           recipes={"gan": _gan_recipe, "segmentation": _segmentation_recipe})
for _variant in OFFICIAL_VARIANTS:
    register_context_block(f"ham_nmf_{_variant}", _ham("nmf", _variant),
                           recipes={"segmentation": _seeded_recipe})
