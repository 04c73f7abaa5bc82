"""SAGAN / BigGAN-family generator and projection discriminator with a kctx context block."""

import keras

from gan.layers import (
    ConditionalBatchNormalization,
    conv,
    discriminator_block,
    generator_block,
    spectral_norm,
)
from gan.model import ConditionalGAN
from kctx.layers import context_block

CONTEXTS = ("ham_nmf", "self_attention", "none")  # the blocks HamGAN compares


def context_layer(name, channels, layer_name):
    """The context block ``name`` at a feature map of ``channels`` channels, with the
    ``"gan"`` recipe of :func:`kctx.layers.context_block` (HamGAN's ham: r = d/8,
    K = 6, cross-replica BN, σ = 0, seeded; SAGAN's attention), or the block's own
    defaults for blocks without one."""
    return context_block(name, recipe="gan", channels=channels, name=layer_name)


def build_gan(config, context=None):
    """G, D, EMA and both Adam optimizers (TTUR); call it in the strategy scope."""
    context = context or config.context
    gan = ConditionalGAN(
        build_generator(config, context), build_discriminator(config, context),
        ema_decay=config.ema_decay, ema_start=config.ema_start, d_steps=config.d_steps,
    )
    gan.compile(
        keras.optimizers.Adam(config.g_learning_rate, config.beta_1, config.beta_2),
        keras.optimizers.Adam(config.d_learning_rate, config.beta_1, config.beta_2),
    )
    return gan


def build_generator(config, context=None, name="generator"):
    """G(z, y): SN linear → 4×4 → residual up-blocks (class-conditional BN) with the
    context block at ``config.g_context_resolution`` → BN → ReLU → SN conv → tanh."""
    context = context or config.context
    z = keras.Input((config.latent_dim,), name="z")
    labels = keras.Input((), dtype="int32", name="labels")
    x = spectral_norm(keras.layers.Dense(4 * 4 * config.base_channels, name="g_linear"))(z)
    x = keras.layers.Reshape((4, 4, config.base_channels))(x)
    resolution = 4
    for index, channels in enumerate(config.generator_channels):
        x = generator_block(x, labels, channels, config.num_classes, name=f"g_block{index}")
        resolution *= 2
        if resolution == config.g_context_resolution:
            x = context_layer(context, channels, "g_context")(x)
    x = ConditionalBatchNormalization(None, name="g_bn_out")(x)
    x = keras.layers.ReLU()(x)
    # The image's last map in float32, like its tanh (the Keras mixed-precision guide's
    # float32 outputs; a few output channels, a negligible cost). Under mixed_bfloat16 it
    # also avoids a PyTorch 2.13 CPU fault: without oneDNN's bfloat16 kernels (AMD EPYC),
    # the gradient of a bfloat16 convolution with one output channel, in Keras's permuted
    # kernel layout, raises "slow_conv2d: grad_weight must be contiguous".
    x = conv(config.image_channels, 3, "g_conv_out", dtype="float32")(x)
    images = keras.layers.Activation("tanh", dtype="float32", name="images")(x)
    return keras.Model([z, labels], images, name=name)


def build_discriminator(config, context=None, name="discriminator"):
    """D(x, y): residual down-blocks with the context block at
    ``config.d_context_resolution``, ReLU, global sum pooling, SN linear plus the
    projection ⟨embed(y), h⟩ (Miyato & Koyama 2018)."""
    context = context or config.context
    images = keras.Input((config.resolution, config.resolution, config.image_channels),
                         name="images")
    labels = keras.Input((), dtype="int32", name="labels")
    x = images
    resolution = config.resolution
    for index, (channels, downsample) in enumerate(config.discriminator_blocks):
        x = discriminator_block(x, channels, downsample, first=index == 0,
                                name=f"d_block{index}")
        if downsample:
            resolution //= 2
        if resolution == config.d_context_resolution and index == _first_block_at(
            config, config.d_context_resolution
        ):
            x = context_layer(context, channels, "d_context")(x)
    x = keras.layers.ReLU()(x)
    h = keras.layers.Lambda(lambda t: keras.ops.sum(t, axis=(1, 2)), name="sum_pool")(x)
    logit = spectral_norm(keras.layers.Dense(1, name="d_linear"))(h)
    embedded = spectral_norm(
        keras.layers.Embedding(config.num_classes, h.shape[-1], name="d_embedding")
    )(labels)
    projection = keras.layers.Dot(axes=-1, name="projection")([embedded, h])
    scores = keras.layers.Add(name="scores")([logit, projection])
    scores = keras.layers.Reshape((), dtype="float32", name="score")(scores)
    return keras.Model([images, labels], scores, name=name)


def _first_block_at(config, resolution):
    """Index of the first D block whose output has ``resolution``."""
    current = config.resolution
    for index, (_, downsample) in enumerate(config.discriminator_blocks):
        if downsample:
            current //= 2
        if current == resolution:
            return index
    raise ValueError(
        f"{config.name}: no discriminator block outputs {resolution}×{resolution} features"
    )
