"""A weight-free layer that resizes a feature map to another's size."""

import keras
from keras import ops

from kctx.ops.resize import resize_bilinear


@keras.saving.register_keras_serializable(package="kctx")
class ResizeToMatch(keras.layers.Layer):
    """Bilinearly resize ``inputs[0]`` to the height and width of ``inputs[1]``.

    Spatial sizes may be unknown until run time (multi-scale evaluation feeds
    several sizes to one model); half-pixel centres, no antialiasing
    (:func:`kctx.ops.resize_bilinear`: PyTorch's ``align_corners=False``). Computes
    in the layer's dtype (``dtype="float32"`` for logits under mixed precision).
    It takes only the base layer's arguments (``name``, ``dtype``).

    Call arguments:
        inputs: ``[x, reference]``, both channels-last.

    Examples:
        >>> x, reference = keras.ops.ones((2, 3, 5, 4)), keras.ops.zeros((2, 12, 20, 3))
        >>> tuple(ResizeToMatch()([x, reference]).shape)
        (2, 12, 20, 4)

    Reference:
        Geng et al., "Is Attention Better Than Matrix Decomposition?", ICLR
        2021, Appendix E.3 (bilinear upsampling of the logits to the input);
        Guo et al., SegNeXt, NeurIPS 2022 (the LightHamHead's resized stages).
    """

    def call(self, inputs):
        x, reference = inputs
        return resize_bilinear(ops.cast(x, self.compute_dtype), ops.shape(reference)[1:3])

    def compute_output_shape(self, input_shapes):
        x, reference = input_shapes
        return (x[0], reference[1], reference[2], x[-1])
