"""Run by tests/test_jax_workflows.py in a subprocess: KERAS_BACKEND=jax with two virtual
CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=2).

One step under ``keras.distribution.DataParallel`` over the 2 devices must make the
update of the same step on 1 device (the tolerance of the TensorFlow replica tests):

- the HamGAN (its stateless D and G steps, two optimizers, EMA of G), with the ham (its
  bases fixed) in G and self-attention in D: one compiled pair of steps for both blocks;
- a segmentation network with batch normalisation in its backbone and head: under data
  parallelism the step is one XLA program over the global batch, so the moments are the
  global batch's (cross-replica batch norm) -- per-device moments would change it.
"""

import sys

import jax
import keras
import numpy as np

from workflow_runs import assert_same_update

assert keras.backend.backend() == "jax", keras.backend.backend()
assert len(jax.devices()) == 2, jax.devices()

from kctx.distribute import JaxDistribution  # noqa: E402


def one_step(build, fit, devices):
    """Variables before and after one step of ``fit`` on the model ``build`` returns,
    trained on ``devices`` (built from the same seed)."""
    distribution = JaxDistribution(devices)
    with distribution.scope():
        model = build()
    before = [np.asarray(v.value) for v in model.variables]
    with distribution.scope():
        fit(model)
    return model, before, [np.asarray(v.value) for v in model.variables]


def gan_case(generator_context, discriminator_context, ham_init):
    import gan.models
    from gan.configs import get_config
    from gan.data import digits_batches
    from gan.model import ConditionalGAN

    config = get_config("digits", batch_size=8)

    def build():
        keras.utils.set_random_seed(0)
        kwargs = {"init": ham_init, "seed": 0} if ham_init else {}
        original = gan.models.context_block
        gan.models.context_block = lambda block, /, **more: original(
            block, **(kwargs if block.startswith("ham") else {}), **more)
        try:
            generator = gan.models.build_generator(config, generator_context)
            discriminator = gan.models.build_discriminator(config, discriminator_context)
        finally:
            gan.models.context_block = original
        model = ConditionalGAN(generator, discriminator, ema_decay=0.5, ema_start=0,
                               d_steps=config.d_steps)
        model.compile(keras.optimizers.SGD(0.01), keras.optimizers.SGD(0.01))
        return model

    def fit(model):
        model.fit(digits_batches(8, config.latent_dim, seed=3), steps_per_epoch=1, verbose=0)

    single, before, after_single = one_step(build, fit, jax.devices()[:1])
    multi, before_multi, after_multi = one_step(build, fit, jax.devices())
    for a, b in zip(before, before_multi):
        np.testing.assert_array_equal(a, b)
    # The layouts say where the variables live: replicated over both devices.
    assert all(len(v.value.sharding.device_set) == 2 for v in multi.trainable_variables)
    for net in ("generator", "discriminator", "ema_generator"):
        paths = {v.path for v in getattr(single, net).variables}
        pick = [i for i, v in enumerate(single.variables) if v.path in paths]
        assert_same_update([before[i] for i in pick], [after_single[i] for i in pick],
                           [after_multi[i] for i in pick],
                           label=f"{generator_context}/{discriminator_context} {net}")


def segmentation_case():
    from segmentation.data import DIGITS_SEG_CLASSES, IGNORE_LABEL, digits_seg
    from segmentation.models import segmenter

    images, labels = digits_seg("train", num_images=8, image_size=32)

    def build():
        keras.utils.set_random_seed(0)
        model = segmenter("resnet_tiny", 16, "ham_nmf", DIGITS_SEG_CLASSES, head_channels=32,
                          synchronized_batch_norm=True,
                          context_kwargs={"init": "fixed", "seed": 0})
        model.compile(keras.optimizers.SGD(0.1),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                 ignore_class=IGNORE_LABEL))
        return model

    def fit(model):
        model.fit(images, labels.astype("int32"), batch_size=8, epochs=1, shuffle=False,
                  verbose=0)

    _, before, single = one_step(build, fit, jax.devices()[:1])
    _, _, multi = one_step(build, fit, jax.devices())
    # All variables, the batch norms' moving means and variances among them: those of
    # the global batch's moments.
    assert_same_update(before, single, multi, label="segmentation")


gan_case("ham_nmf", "self_attention", "fixed")
segmentation_case()
print("JAX_DISTRIBUTION_OK")
sys.exit(0)
