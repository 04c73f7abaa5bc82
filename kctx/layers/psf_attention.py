"""PSF-Attn: attention as a product of input-dependent chord-sparse factors."""

import keras
from keras import ops

from kctx.validation import check_choice, check_positive_int, check_sequence_input
from kctx.layers.context_block import register_context_block
from kctx.ops.gelu import gelu
from kctx.ops.chord import chord_dense, chord_matmul, chord_num_factors, chord_width


def _mlp(hidden_units, output_units, name, layer):
    """Dense → GELU (:func:`kctx.ops.gelu`) → Dense, with the owning layer's initializer and dtype policy."""
    return [
        keras.layers.Dense(hidden_units, activation=gelu,
                           kernel_initializer=layer.kernel_initializer,
                           kernel_regularizer=layer.kernel_regularizer,
                           dtype=layer.dtype_policy, name=f"{name}_hidden"),
        keras.layers.Dense(output_units, kernel_initializer=layer.kernel_initializer,
                           kernel_regularizer=layer.kernel_regularizer,
                           dtype=layer.dtype_policy, name=f"{name}_output"),
    ]


RESIDUALS = ("factor", "output", None)


@keras.saving.register_keras_serializable(package="kctx")
class PSFAttention(keras.layers.Layer):
    """Parametric sparse-factorization attention: E_new = W⁽ᴹ⁾(⋯(W⁽¹⁾V + V)⋯) + V.

    For a sequence E (n×c), factor m is a chord-sparse n×n matrix whose row i
    holds the L = 1 + ⌈log₂ n⌉ outputs of an MLP f⁽ᵐ⁾ (Dense → GELU → Dense)
    applied to E_i (Sec. 4): its non-zeros sit at columns i and (i + 2ᵏ) mod n.
    V = g(E) by another MLP. The factors are applied to V in order, W⁽¹⁾
    first, each in O(n·L·c) (:func:`kctx.ops.chord_matmul`), so the whole
    block is O(M·n·log n·c) = O(n log² n · c) with M = :func:`kctx.ops.chord_num_factors`
    (n) factors, and the implied attention matrix A = W⁽ᴹ⁾ ⋯ W⁽¹⁾ is full
    (every position can reach every other) but never formed. There is no
    softmax. The factor products are computed in float32 under mixed precision.

    The residual to V ("optional" in Fig. 3) is placed as in the authors'
    code: with ``residual="factor"`` V is added back after every factor,
    V⁽ᵐ⁾ = W⁽ᵐ⁾V⁽ᵐ⁻¹⁾ + V, so the output is (I + Σⱼ W⁽ᴹ⁾⋯W⁽ʲ⁾) V: V reaches
    the output through every partial product, not only the deepest one.
    ``"output"`` gives A V + V and ``None`` gives A V.

    Args:
        num_factors: M (default :func:`kctx.ops.chord_num_factors` (n), the
            fewest for a full A).
        hidden_units: width of the hidden layer of every MLP.
        value_units: channels of V and of the output (default: the input's).
        residual: ``"factor"`` (add V after every factor, the authors'
            code), ``"output"`` (add V once, to A V) or ``None``.
        kernel_initializer: initializer of the kernels of the MLPs' Dense layers.
        kernel_regularizer: regularizer of the kernels of the MLPs' Dense layers.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (batch, n, channels); n must be known when the layer is built.

    Examples:
        >>> layer = PSFAttention(hidden_units=16, value_units=8)
        >>> tuple(layer(keras.random.normal((2, 100, 32))).shape)
        (2, 100, 8)

    Reference:
        Khalitov, Yu, Cheng & Yang, "Sparse Factorization of Large Square
        Matrices" (2021), Sec. 4 (PSF-Attn, the W⁽ᵐ⁾_ij definition) and Sec. 3
        (the Chord non-zero pattern).
    """

    def __init__(self, num_factors=None, hidden_units=32, value_units=None, residual="factor",
                 kernel_initializer="glorot_uniform", kernel_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("num_factors", num_factors, allow_none=True)
        check_positive_int("hidden_units", hidden_units)
        check_positive_int("value_units", value_units, allow_none=True)
        check_choice("residual", residual, RESIDUALS)
        self.num_factors = num_factors
        self.hidden_units = hidden_units
        self.value_units = value_units
        self.residual = residual
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)

    def build(self, input_shape):
        n, channels = check_sequence_input(self, input_shape)
        if n < 2:
            raise ValueError(f"PSFAttention needs a sequence length n ≥ 2. "
                             f"Received: input_shape={tuple(input_shape)}")
        self.length = n
        self.factor_count = self.num_factors or chord_num_factors(n)
        width = chord_width(n)
        self.factor_mlps = [_mlp(self.hidden_units, width, f"factor{m + 1}", self)
                            for m in range(self.factor_count)]
        self.value_mlp = _mlp(self.hidden_units, self.value_units or channels, "value", self)
        for hidden, output in self.factor_mlps + [self.value_mlp]:
            hidden.build(tuple(input_shape))
            output.build(tuple(input_shape[:-1]) + (self.hidden_units,))

    @staticmethod
    def _apply(mlp, x):
        hidden, output = mlp
        return output(hidden(x))

    def factor_values(self, inputs):
        """The (batch, n, L) non-zeros of W⁽¹⁾, …, W⁽ᴹ⁾ for ``inputs`` (a list of M):
        row i of W⁽ᵐ⁾ is f⁽ᵐ⁾(E_i) = Dense(GELU(Dense(E_i)))."""
        return [self._apply(mlp, inputs) for mlp in self.factor_mlps]

    def call(self, inputs):
        value = self._apply(self.value_mlp, inputs)
        factors = self.factor_values(inputs)
        uses = 1 + {"factor": len(factors), "output": 1}.get(self.residual, 0)
        # V feeds W⁽¹⁾ and every residual: as slices of one broadcast copy, so that its
        # gradient is a fixed-order sum (M + 1 separate uses were summed in the order
        # TensorFlow's tape visits them, which changed the last bit between identical runs).
        copies = ops.broadcast_to(ops.cast(value, "float32")[None],
                                  (uses,) + tuple(ops.shape(value)))
        out = copies[0]
        for index, values in enumerate(factors):  # W⁽¹⁾ first
            out = chord_matmul(ops.cast(values, "float32"), out)
            if self.residual == "factor":
                out = out + copies[1 + index]
        if self.residual == "output":
            out = out + copies[1]
        return ops.cast(out, value.dtype)

    def attention_matrix(self, inputs, include_residual=False):
        """The dense attention A = W⁽ᴹ⁾ ⋯ W⁽¹⁾ (batch, n, n) for ``inputs``: row i
        is how much each position contributes to output i (Fig. 7–8 of the paper).

        With ``include_residual`` the whole linear map from V to the output is
        returned instead (output = map · V): I + Σⱼ W⁽ᴹ⁾⋯W⁽ʲ⁾ for
        ``residual="factor"``, A + I for ``"output"``."""
        matrix = None
        for values in self.factor_values(ops.convert_to_tensor(inputs)):
            dense = chord_dense(ops.cast(values, "float32"))
            matrix = dense if matrix is None else ops.matmul(dense, matrix)
            if include_residual and self.residual == "factor":
                matrix = matrix + ops.eye(self.length, dtype=matrix.dtype)
        if include_residual and self.residual == "output":
            matrix = matrix + ops.eye(self.length, dtype=matrix.dtype)
        return matrix

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.value_units or input_shape[-1],)

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_factors": self.num_factors,
            "hidden_units": self.hidden_units,
            "value_units": self.value_units,
            "residual": self.residual,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
        })
        return config


register_context_block("psf", lambda **kwargs: PSFAttention(**kwargs), kind="sequence")
