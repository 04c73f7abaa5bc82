"""A class-conditional GAN trained with ``fit`` under any tf.distribute strategy."""

import keras
import tensorflow as tf
from keras import ops


def hinge_discriminator_loss(real_scores, fake_scores):
    """E[max(0, 1 − D(x))] + E[max(0, 1 + D(G(z)))] (Lim & Ye 2017; SAGAN)."""
    return ops.mean(ops.relu(1.0 - real_scores)) + ops.mean(ops.relu(1.0 + fake_scores))


def hinge_generator_loss(fake_scores):
    """−E[D(G(z))]."""
    return -ops.mean(fake_scores)


@keras.saving.register_keras_serializable(package="gan")
class ConditionalGAN(keras.Model):
    """G and D with a ``train_step`` of one (or ``d_steps``) D step then one G step.

    Batches are dicts ``{"images", "labels", "z_d", "labels_d", "z_g", "labels_g"}``:
    the latent noise and the sampled class labels come with the data (see
    ``gan.data.with_noise``), so a step is the same function of the global
    batch on 1 or N replicas. Losses are per-replica means divided by the
    number of replicas in sync, so the all-reduced gradients are those of the
    global-batch mean (hand-written losses are not scaled by Keras).

    Args:
        generator: ``keras.Model`` mapping ``[z, labels]`` to images.
        discriminator: ``keras.Model`` mapping ``[images, labels]`` to scores (B,).
        ema_decay: keep an exponential moving average of G's weights (BigGAN)
            in ``ema_generator``, used by ``call`` at inference; None disables it.
            Batch-norm statistics and SN vectors are copied from G.
        ema_start: G step from which the average starts; before it the EMA
            generator equals G (BigGAN starts at 20k steps, so early weights do
            not linger in the average).
        d_steps: discriminator steps per generator step (all on the same batch).

    Call arguments:
        inputs: ``[z, labels]`` (or a dict with ``z`` and ``labels``).
        training: ``False`` samples with the EMA generator when there is one.
    """

    def __init__(self, generator, discriminator, ema_decay=None, ema_start=0, d_steps=1,
                 **kwargs):
        super().__init__(**kwargs)
        self.generator = generator
        self.discriminator = discriminator
        self.ema_decay = ema_decay
        self.ema_start = int(ema_start)
        self.d_steps = int(d_steps)
        self.ema_generator = None
        if ema_decay is not None:
            self.ema_generator = keras.models.clone_model(generator)
            self.ema_generator.set_weights(generator.get_weights())
            self.ema_generator.trainable = False
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")
        self.d_real_tracker = keras.metrics.Mean(name="d_real")
        self.d_fake_tracker = keras.metrics.Mean(name="d_fake")

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker, self.d_real_tracker,
                self.d_fake_tracker]

    def compile(self, g_optimizer, d_optimizer, **kwargs):
        """Store both optimizers and build their state now (in the strategy scope)."""
        super().compile(**kwargs)
        self.g_optimizer = g_optimizer
        self.d_optimizer = d_optimizer
        self.g_optimizer.build(self.generator.trainable_variables)
        self.d_optimizer.build(self.discriminator.trainable_variables)

    def call(self, inputs, training=False):
        """Generate images from ``[z, labels]``, ``{"z", "labels"}`` or a training
        batch dict (its G-step noise), as Keras passes when it builds the model."""
        if isinstance(inputs, dict):
            if "z" in inputs:
                inputs = [inputs["z"], inputs["labels"]]
            else:
                inputs = [inputs["z_g"], inputs["labels_g"]]
        generator = self.generator
        if self.ema_generator is not None and not training:
            generator = self.ema_generator
        return generator(inputs, training=training)

    def _replicas(self):
        return tf.distribute.get_strategy().num_replicas_in_sync

    def _discriminator_step(self, images, labels, z, fake_labels):
        replicas = self._replicas()
        fake = self.generator([z, fake_labels], training=True)
        with tf.GradientTape() as tape:
            real_scores = self.discriminator([images, labels], training=True)
            fake_scores = self.discriminator([fake, fake_labels], training=True)
            loss = hinge_discriminator_loss(real_scores, fake_scores)
            scaled = loss / replicas
        grads = tape.gradient(scaled, self.discriminator.trainable_variables)
        self.d_optimizer.apply(grads, self.discriminator.trainable_variables)
        return loss, ops.mean(real_scores), ops.mean(fake_scores)

    def _generator_step(self, z, fake_labels):
        replicas = self._replicas()
        with tf.GradientTape() as tape:
            fake = self.generator([z, fake_labels], training=True)
            loss = hinge_generator_loss(self.discriminator([fake, fake_labels], training=True))
            scaled = loss / replicas
        grads = tape.gradient(scaled, self.generator.trainable_variables)
        self.g_optimizer.apply(grads, self.generator.trainable_variables)
        return loss

    def _update_ema(self):
        """Trainable weights: EMA; the rest (BN statistics, SN vectors): copied."""
        started = ops.cast(self.g_optimizer.iterations > self.ema_start, "float32")
        decay = started * self.ema_decay
        for ema, weight in zip(self.ema_generator.variables, self.generator.variables):
            if weight.trainable:
                ema.assign(decay * ema + (1.0 - decay) * weight)
            else:
                ema.assign(weight)

    def train_step(self, data):
        images, labels = data["images"], data["labels"]
        for _ in range(self.d_steps):
            d_loss, d_real, d_fake = self._discriminator_step(
                images, labels, data["z_d"], data["labels_d"]
            )
        g_loss = self._generator_step(data["z_g"], data["labels_g"])
        if self.ema_generator is not None:
            self._update_ema()
        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        self.d_real_tracker.update_state(d_real)
        self.d_fake_tracker.update_state(d_fake)
        return {m.name: m.result() for m in self.metrics}

    def get_config(self):
        return {
            "generator": keras.saving.serialize_keras_object(self.generator),
            "discriminator": keras.saving.serialize_keras_object(self.discriminator),
            "ema_decay": self.ema_decay,
            "ema_start": self.ema_start,
            "d_steps": self.d_steps,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["generator"] = keras.saving.deserialize_keras_object(config["generator"])
        config["discriminator"] = keras.saving.deserialize_keras_object(config["discriminator"])
        return cls(**config)
