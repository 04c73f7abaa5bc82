"""Two HamGAN training steps from saved weights, on the Keras backend of the process:
tests/test_gan.py takes them on TensorFlow in its own process and on PyTorch in a
subprocess, and compares the updates.

    KERAS_BACKEND=torch python tests/gan_step_check.py INITIAL.npz OUTPUT.npz
"""

import pathlib
import sys
from unittest import mock

import keras
import numpy as np


def two_steps(initial, output):
    """Fit two steps of the digits stream with the digits HamGAN and write its weights.

    G has the NMF ham with fixed bases (random ones would be drawn by each backend's own
    generator), D self-attention; both optimizers are SGD (linear in the gradient, so a
    wrong gradient shows in the update), with G's EMA. The GAN starts from the weights in
    ``initial``, written from its own when the file is missing.

    Args:
        initial: the ``.npz`` file of the starting weights (``get_weights`` order).
        output: the ``.npz`` file the weights after the two steps are written to.
    """
    import gan.models
    from gan.configs import get_config
    from gan.data import digits_batches
    from gan.model import ConditionalGAN

    def fixed_bases(block, /, **kwargs):
        if block.startswith("ham"):
            kwargs.update(init="fixed", seed=0)
        return original(block, **kwargs)

    original = gan.models.context_block
    config = get_config("digits", batch_size=8)
    keras.utils.set_random_seed(0)
    with mock.patch.object(gan.models, "context_block", fixed_bases):
        model = ConditionalGAN(gan.models.build_generator(config, "ham_nmf"),
                               gan.models.build_discriminator(config, "self_attention"),
                               ema_decay=0.5)
    model.compile(keras.optimizers.SGD(0.01), keras.optimizers.SGD(0.01))
    initial = pathlib.Path(initial)
    if not initial.exists():
        np.savez(initial, *model.get_weights())
    with np.load(initial) as arrays:
        model.set_weights([arrays[f"arr_{index}"] for index in range(len(arrays.files))])
    model.fit(digits_batches(8, config.latent_dim, seed=3), steps_per_epoch=2, verbose=0)
    np.savez(output, *model.get_weights())
    if keras.backend.backend() == "torch":
        assert_no_graph_survives()


def assert_no_graph_survives():
    """After the steps, no tensor with autograd history is alive (PyTorch): a step whose
    graph outlives it holds its activations, and memory grows with every step (as when
    the saved-tensor hooks of ``gan.model.gradients`` kept a node's own output: a reference
    cycle through C++ that Python's collector cannot free, 100 MB a step for the digits
    HamGAN at batch 16)."""
    import gc

    import torch

    gc.collect()
    alive = [tensor for tensor in gc.get_objects()
             if isinstance(tensor, torch.Tensor) and tensor.grad_fn is not None]
    assert not alive, f"{len(alive)} tensors with autograd history outlive the steps, e.g. " \
                      f"{[(tuple(t.shape), type(t.grad_fn).__name__) for t in alive[:5]]}"


if __name__ == "__main__":
    two_steps(*sys.argv[1:3])
