"""Poly-NL: a non-local block as a third-order polynomial, linear in the positions."""

import keras
from keras import ops

from kctx.validation import check_image_input, standardize_data_format
from kctx.layers.context_block import register_context_block
from kctx.ops.poly_nl import poly_nl


@keras.saving.register_keras_serializable(package="kctx")
class PolyNL(keras.layers.Layer):
    """Poly-NL block: Z = αX + βY with Y = (Φ(X W₁ ⊙ X W₂) ⊙ X) W₃ (Eq. 6).

    X (N×C) holds the N = H·W positions as rows; Φ averages over the
    positions and expands back; W₁, W₂, W₃ are C×C (1×1 convolutions without
    bias, as in Eq. 6); α and β are learnable scalars. Each output element is
    a sum of the third-order products x_ad x_ef x_eh that a non-local block
    also uses (Eq. 7 vs Eq. 8), at O(N·C²) cost and O(N·C) memory: no N×N
    similarity matrix. The average is computed from the C×C Gram matrix
    XᵀX / N (:func:`kctx.ops.poly_nl`), in float32 under mixed precision, and
    βY is formed there from X / max|X| so that β = 0 gives exactly αX for any
    input (no 0·inf where the cubic Y overflows, e.g. under ``mixed_float16``).

    Initialisation: α = 1 and β = 0 by default, so the block starts as the
    identity and can be inserted into a trained network without changing it
    (the role of the zero-initialised last BN of Wang et al.'s non-local block
    and of SAGAN's γ); β receives the gradient ⟨∂L/∂Z, Y⟩ from the first step
    and W₁, W₂, W₃ theirs once β ≠ 0. The paper does not state its choice.

    Args:
        alpha_initializer: initializer of α (default ``"ones"``).
        beta_initializer: initializer of β (default ``"zeros"``).
        kernel_initializer: initializer of W₁, W₂, W₃.
        kernel_regularizer: regularizer of W₁, W₂, W₃.
        data_format: must resolve to ``"channels_last"``.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (batch, height, width, channels); height and width may be ``None``.

    Examples:
        >>> layer = PolyNL()
        >>> tuple(layer(keras.random.normal((2, 8, 8, 16))).shape)
        (2, 8, 8, 16)

    Reference:
        Babiloni et al., "Poly-NL: Linear Complexity Non-local Layers with
        Polynomials", ICCV 2021, Eq. 6 (element-wise: Eq. 7), Sec. 4.1.
    """

    def __init__(self, alpha_initializer="ones", beta_initializer="zeros",
                 kernel_initializer="glorot_uniform", kernel_regularizer=None, data_format=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.alpha_initializer = keras.initializers.get(alpha_initializer)
        self.beta_initializer = keras.initializers.get(beta_initializer)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.data_format = standardize_data_format(data_format)

    def build(self, input_shape):
        channels = check_image_input(self, input_shape)
        self.kernels = [
            self.add_weight(name=f"w{index}", shape=(channels, channels),
                            initializer=self.kernel_initializer,
                            regularizer=self.kernel_regularizer, autocast=False)
            for index in (1, 2, 3)
        ]
        self.alpha = self.add_weight(name="alpha", shape=(), initializer=self.alpha_initializer)
        # Read in float32 under mixed precision (no autocast): the op computes in float32,
        # and a gradient of β or W routed through float16 overflows for large inputs.
        self.beta = self.add_weight(name="beta", shape=(), initializer=self.beta_initializer,
                                    autocast=False)

    def call(self, inputs):
        # β·Y from the op (formed in float32, where β = 0 gives 0 for any input).
        return ops.cast(self.alpha, inputs.dtype) * inputs + poly_nl(inputs, *self.kernels,
                                                                     scale=self.beta)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update({
            "alpha_initializer": keras.initializers.serialize(self.alpha_initializer),
            "beta_initializer": keras.initializers.serialize(self.beta_initializer),
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "data_format": self.data_format,
        })
        return config


register_context_block("poly_nl", lambda **kwargs: PolyNL(**kwargs))
