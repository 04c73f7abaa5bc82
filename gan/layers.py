"""Building blocks of the SAGAN / BigGAN-family GANs (Miyato & Koyama 2018; Zhang et al. 2019)."""

import keras
from keras import ops

from kctx.ops import cross_replica_mean


@keras.saving.register_keras_serializable(package="gan")
class SpectralNormalization(keras.layers.SpectralNormalization):
    """``keras.layers.SpectralNormalization`` that also works on an Embedding.

    Keras casts the wrapped layer's output to the *input* dtype: with integer
    class ids an Embedding's vectors are truncated to integers and get no
    gradient (Keras 3.15). Integer inputs are fed as floats here (class ids are
    exact in float32 below 2²⁴; Embedding casts them back), so the output keeps
    its float dtype. Everything else is Keras's layer (Miyato et al. 2018,
    one power iteration per training call).
    """

    def call(self, inputs, training=False):
        if not keras.backend.is_float_dtype(inputs.dtype):
            inputs = ops.cast(inputs, "float32")
        return super().call(inputs, training=training)


@keras.saving.register_keras_serializable(package="gan")
class UpSampling2D(keras.layers.UpSampling2D):
    """``keras.layers.UpSampling2D`` (nearest) as concatenations and reshapes.

    Keras repeats rows and columns with ``ops.repeat``, which loses the static height
    and width when the batch size is unknown, so LiteRT's converter falls back to
    select-TF ``Conv2D`` ops that the LiteRT interpreter cannot run ("XNNPack
    delegate failed to reshape"). Copies concatenated on a new axis and reshaped
    give the same values, keep the shapes static, and differentiate under XLA (a
    nearest resize would not: XLA has no ``ResizeNearestNeighborGrad``). Other
    settings run Keras's layer.
    """

    def call(self, inputs):
        height, width, channels = (inputs.shape[1:4] if self.data_format == "channels_last"
                                   else (None, None, None))
        if self.interpolation != "nearest" or None in (height, width, channels):
            return super().call(inputs)
        rows, columns = self.size
        x = ops.concatenate([inputs[:, :, :, None, :]] * columns, axis=3)  # (B, H, W, s, C)
        x = ops.reshape(x, (-1, height, width * columns, channels))
        x = ops.concatenate([x[:, :, None, :, :]] * rows, axis=2)  # (B, H, s, W·s, C)
        return ops.reshape(x, (-1, height * rows, width * columns, channels))


def spectral_norm(layer):
    """Wrap a Conv / Dense / Embedding in spectral normalisation (computing in the
    layer's dtype policy)."""
    return SpectralNormalization(layer, name=f"sn_{layer.name}", dtype=layer.dtype_policy)


def _moments(x, axes):
    """Batch mean and variance, all-reduced over replicas (float32)."""
    x = ops.cast(x, "float32")
    mean = cross_replica_mean(ops.mean(x, axis=axes))
    mean_square = cross_replica_mean(ops.mean(ops.square(x), axis=axes))
    return mean, ops.maximum(mean_square - ops.square(mean), 0.0)


@keras.saving.register_keras_serializable(package="gan")
class ConditionalBatchNormalization(keras.layers.Layer):
    """Class-conditional batch normalisation with cross-replica statistics.

    y = γ_c · (x − μ_B) / √(σ²_B + ε) + β_c, with per-class γ (initialised to
    1) and β (initialised to 0) as in SAGAN's generator (Miyato & Koyama, 2018).
    Batch moments are all-reduced over replicas, so a step on N replicas
    normalises with the statistics of the global batch (cross-replica batch
    norm, as the official HamGAN on TPU). ``num_classes=None`` gives plain
    (unconditional) synchronized batch normalisation.

    Args:
        num_classes: number of classes, or None for unconditional BN.
        momentum: momentum of the moving statistics used at inference.
        epsilon: variance epsilon.

    Call arguments:
        inputs: (batch, height, width, channels).
        labels: (batch,) int class ids (ignored when unconditional).
        training: use batch statistics and update the moving ones.
    """

    def __init__(self, num_classes=None, momentum=0.99, epsilon=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.momentum = momentum
        self.epsilon = epsilon

    def build(self, inputs_shape, labels_shape=None):
        channels = inputs_shape[-1]
        table = (self.num_classes, channels) if self.num_classes else (channels,)
        # Normalisation in float32 under mixed policies: the weights are not cast down.
        self.gamma = self.add_weight(name="gamma", shape=table, initializer="ones",
                                     autocast=False)
        self.beta = self.add_weight(name="beta", shape=table, initializer="zeros",
                                    autocast=False)
        # Every replica computes the same (all-reduced) statistics.
        self.moving_mean = self.add_weight(name="moving_mean", shape=(channels,),
                                           initializer="zeros", trainable=False,
                                           autocast=False, aggregation="only_first_replica")
        self.moving_variance = self.add_weight(name="moving_variance", shape=(channels,),
                                               initializer="ones", trainable=False,
                                               autocast=False, aggregation="only_first_replica")

    def call(self, inputs, labels=None, training=None):
        if training:
            mean, variance = _moments(inputs, axes=(0, 1, 2))
            m = self.momentum
            self.moving_mean.assign(m * self.moving_mean + (1 - m) * mean)
            self.moving_variance.assign(m * self.moving_variance + (1 - m) * variance)
        else:
            mean, variance = self.moving_mean, self.moving_variance
        scale = ops.rsqrt(variance + self.epsilon)
        x = (ops.cast(inputs, "float32") - mean) * scale
        if self.num_classes:
            if labels is None:
                raise ValueError("ConditionalBatchNormalization with num_classes needs `labels`.")
            labels = ops.cast(labels, "int32")
            gamma = ops.take(self.gamma, labels, axis=0)[:, None, None, :]
            beta = ops.take(self.beta, labels, axis=0)[:, None, None, :]
        else:
            gamma, beta = self.gamma, self.beta
        return ops.cast(x * gamma + beta, self.compute_dtype)

    def compute_output_shape(self, inputs_shape, labels_shape=None):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update({"num_classes": self.num_classes, "momentum": self.momentum,
                       "epsilon": self.epsilon})
        return config


def conv(channels, kernel_size, name, dtype=None):
    return spectral_norm(keras.layers.Conv2D(channels, kernel_size, padding="same", name=name,
                                             dtype=dtype))


def generator_block(x, labels, channels, num_classes, name):
    """Residual up-block: CBN → ReLU → ×2 → conv3 → CBN → ReLU → conv3, + (×2 → conv1)."""
    h = ConditionalBatchNormalization(num_classes, name=f"{name}_cbn1")(x, labels)
    h = keras.layers.ReLU()(h)
    h = UpSampling2D(2, name=f"{name}_up")(h)
    h = conv(channels, 3, f"{name}_conv1")(h)
    h = ConditionalBatchNormalization(num_classes, name=f"{name}_cbn2")(h, labels)
    h = keras.layers.ReLU()(h)
    h = conv(channels, 3, f"{name}_conv2")(h)
    shortcut = UpSampling2D(2, name=f"{name}_up_shortcut")(x)
    shortcut = conv(channels, 1, f"{name}_shortcut")(shortcut)
    return keras.layers.Add(name=f"{name}_add")([h, shortcut])


def discriminator_block(x, channels, downsample, first, name):
    """Residual down-block (the first one is SNGAN's "optimized" block without
    the leading ReLU and with pooling before its shortcut conv)."""
    h = x if first else keras.layers.ReLU()(x)
    h = conv(channels, 3, f"{name}_conv1")(h)
    h = keras.layers.ReLU()(h)
    h = conv(channels, 3, f"{name}_conv2")(h)
    if downsample:
        h = keras.layers.AveragePooling2D(2, name=f"{name}_pool")(h)
    shortcut = x
    if first:
        if downsample:
            shortcut = keras.layers.AveragePooling2D(2, name=f"{name}_pool_shortcut")(shortcut)
        shortcut = conv(channels, 1, f"{name}_shortcut")(shortcut)
    elif downsample or x.shape[-1] != channels:
        shortcut = conv(channels, 1, f"{name}_shortcut")(shortcut)
        if downsample:
            shortcut = keras.layers.AveragePooling2D(2, name=f"{name}_pool_shortcut")(shortcut)
    return keras.layers.Add(name=f"{name}_add")([h, shortcut])
