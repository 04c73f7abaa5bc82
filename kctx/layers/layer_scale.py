"""A learnable per-channel scale of a residual branch (CaiT's LayerScale)."""

import keras
from keras import ops

# MSCAN's initial γ (SegNeXt's official code).
LAYER_SCALE_INIT = 1e-2


# Registered as "kctx>LayerScale", the name it had in kctx.models.segnext: saved models load.
@keras.saving.register_keras_serializable(package="kctx")
class LayerScale(keras.layers.Layer):
    """y = γ ⊙ x with a learnable per-channel γ (Touvron et al., CaiT, 2021, Eq. 4).

    MSCAN (:func:`kctx.models.mscan`) scales each block's attention and MLP branches
    this way, γ initialised to 1e-2, before the residual sum.

    Args:
        init_value: the initial value of every γ_c.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (..., C).

    Examples:
        >>> keras.ops.convert_to_numpy(LayerScale(0.5)(keras.ops.ones((1, 2, 2, 3))))[0, 0, 0]
        array([0.5, 0.5, 0.5], dtype=float32)

    Reference:
        Touvron et al., "Going deeper with Image Transformers", ICCV 2021.
    """

    def __init__(self, init_value=LAYER_SCALE_INIT, **kwargs):
        super().__init__(**kwargs)
        self.init_value = float(init_value)

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(input_shape[-1],),
                                     initializer=keras.initializers.Constant(self.init_value))

    def call(self, inputs):
        return inputs * ops.cast(self.scale, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "init_value": self.init_value}
