"""GELU in the form every export runtime runs."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="kctx")
def gelu(x):
    """GELU(x) = x·Φ(x) = ½·x·(1 + erf(x/√2)) (Hendrycks & Gimpel 2016, exact form).

    The same function as ``keras.activations.gelu(x, approximate=False)``, written
    with ``erf`` on TensorFlow and JAX: TensorFlow's own exact GELU is built on ``erfc``,
    which ONNX Runtime and LiteRT lack, while this form converts to ONNX's ``Erf`` and is
    fused into LiteRT's builtin ``GELU``. In float32 the two agree to 1e-6 absolute (for
    x < −4, 1 + erf(x/√2) rounds to a multiple of 6e-8, where GELU(x) is below 1e-4).
    On PyTorch it is ``torch.nn.functional.gelu``, the official models' ``nn.GELU``: one
    kernel where the formula takes four in an eager call or an exported graph.

    Args:
        x: float tensor.

    Returns:
        GELU(x), same shape and dtype.
    """
    if keras.backend.backend() == "torch":
        return ops.gelu(x, approximate=False)
    return 0.5 * x * (1.0 + ops.erf(x * (1.0 / math.sqrt(2.0))))
