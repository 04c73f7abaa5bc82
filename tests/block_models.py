"""A small functional model around one registered context block: the export matrix's
(tests/test_export.py on TensorFlow, tests/backend_checks.py's ONNX on PyTorch)."""

import keras
import numpy as np

from kctx.layers import context_block
from kctx.layers.context_block import _KINDS


def block_model(name):
    """``context_block(name)`` after a seeded projection of 16 channels: on (4, 4, 16)
    images, or on (16, 8) sequences for the sequence blocks."""
    keras.utils.set_random_seed(0)
    if _KINDS[name] == "sequence":
        inputs = keras.Input((16, 8))
        features = keras.layers.Dense(16)(inputs)
    else:
        inputs = keras.Input((4, 4, 16))
        features = keras.layers.Conv2D(16, 1)(inputs)
    # 4 groups of 4 channels (the registry's default, norm_groups=None, would make 16 of 1).
    options = {"norm_groups": 4} if name == "ham_nmf_light" else {}
    return keras.Model(inputs, context_block(name, **options)(features))


def block_atol(name, expected, atol):
    """The absolute tolerance of an exported block's outputs against Keras' ``expected``:
    ``atol``, or 5e-5 of the output's scale for CD and VQ. CD's closed form inverts
    DᵀD + βI, whose condition number reaches r(1 + β)/β (641 at the defaults r = 64,
    β = 0.1, T = 1, where the concept vectors nearly coincide): float32 rounding differs
    between runtimes by ~1e-5 of the output's scale there, as it does between Keras and a
    float64 evaluation. VQ's soft assignment, softmax(cos / T) at T = 0.1, multiplies the
    rounding by 1/T at each step: 1.3e-5 of the output's scale between Keras and LiteRT on
    one CI CPU."""
    return 5e-5 * float(np.abs(expected).max()) if name in ("ham_cd", "ham_vq") else atol


# The multiply-adds of one training step (the forward with training=True, the loss ⟨y, g⟩
# and the gradients of the input and the weights) of ``context_block(name)`` at its
# registry defaults, as profile_layer counts them: the same on the three backends
# (tests/test_profile.py on TensorFlow, tests/backend_checks.py on JAX and PyTorch).
# TensorFlow's count once included the products its gradient functions build for inputs
# behind a stop_gradient (the Hamburger's one-step gradient), which it never runs: 2.3%
# more for "ham_nmf" than JAX's and PyTorch's.
TRAIN_STEP_MACS = {
    "ham_nmf": ((1, 16, 16, 32), 25_165_824),
    "ham_cd": ((1, 16, 16, 32), 19_398_656),
    "ham_vq": ((1, 16, 16, 32), 9_830_400),
    "self_attention": ((1, 16, 16, 32), 15_728_640),
    "psf": ((1, 64, 32), 1_830_912),
}
