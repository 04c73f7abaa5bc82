"""A class-conditional GAN trained with ``fit``: under any tf.distribute strategy on
TensorFlow, on JAX with Keras's stateless training API (under ``keras.distribution``),
and on PyTorch (one device) with autograd. TensorFlow is imported only on its backend:
the model (and ``gan.bench``) runs where JAX or PyTorch alone is installed."""

import contextlib

import keras
from keras import ops

from kctx.training.optimizers import OptimizerGroup


def hinge_discriminator_loss(real_scores, fake_scores):
    """E[max(0, 1 − D(x))] + E[max(0, 1 + D(G(z)))] (Lim & Ye 2017; SAGAN), in float32
    (D's scores are bfloat16 under ``mixed_bfloat16``)."""
    real_scores, fake_scores = ops.cast(real_scores, "float32"), ops.cast(fake_scores, "float32")
    return ops.mean(ops.relu(1.0 - real_scores)) + ops.mean(ops.relu(1.0 + fake_scores))


def hinge_generator_loss(fake_scores):
    """−E[D(G(z))], in float32."""
    return -ops.mean(ops.cast(fake_scores, "float32"))


def _mean32(scores):
    return ops.mean(ops.cast(scores, "float32"))


def gradients(objective, variables):
    """The gradients of a loss with respect to variables, on the backend in use.

    ``tf.GradientTape`` on TensorFlow; ``torch.autograd.grad`` on PyTorch, where
    the outputs come back detached from the graph. (On JAX the step is
    stateless: :meth:`ConditionalGAN.stateless_train_step`.)

    A layer may assign a variable in place during a call (Keras's spectral
    normalisation writes its normalised kernel and ``u`` at every training
    call), and the D step calls D twice. TensorFlow's tape differentiates each
    read of a variable at the value it had then; on PyTorch the variables
    (``torch.nn.Parameter`` s) that autograd saves for the backward pass are
    saved as copies, which gives the same gradients (autograd would otherwise
    refuse a saved tensor modified in place).

    Args:
        objective: a function of no arguments returning ``(loss, outputs)``: the
            scalar to differentiate and what else to return (any structure of
            tensors).
        variables: the ``keras.Variable`` s to differentiate with respect to.

    Returns:
        ``(outputs, grads)``, the gradients in the order of ``variables`` (None for a
        variable the loss does not depend on).
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss, outputs = objective()
        return outputs, tape.gradient(loss, variables)
    if backend == "torch":
        import torch

        with torch.autograd.graph.saved_tensors_hooks(_copy_parameter, _unpack):
            loss, outputs = objective()
        # A variable the loss does not use gets None, as from TensorFlow's tape.
        grads = torch.autograd.grad(loss, [variable.value for variable in variables],
                                    allow_unused=True)
        return keras.tree.map_structure(ops.stop_gradient, outputs), list(grads)
    raise ValueError("`gradients` takes gradients on TensorFlow and PyTorch (the JAX step is "
                     f"stateless). Received: KERAS_BACKEND={backend!r}")


def _copy_parameter(tensor):
    """What autograd saves of ``tensor``: a copy of a variable's value (a
    ``torch.nn.Parameter``, which a later call may assign in place), else the tensor's
    data without its history (``detach``: a node that saves its own output, as ``relu``
    or a normalisation does, would otherwise hold that output, and the output its node: a
    cycle through C++ that Python's collector cannot free, so every step's graph stayed
    alive, 100 MB a step for the digits HamGAN at batch 16)."""
    import torch

    return tensor.detach().clone() if isinstance(tensor, torch.nn.Parameter) else tensor.detach()


def _unpack(saved):
    """What autograd uses of what :func:`_copy_parameter` saved: that, as it is."""
    return saved


def _optimizer_context():
    """Where optimizers apply and weights are assigned: under ``torch.no_grad()`` on
    PyTorch (as Keras's own train step), no context elsewhere."""
    if keras.backend.backend() != "torch":
        return contextlib.nullcontext()
    import torch

    return torch.no_grad()


@keras.saving.register_keras_serializable(package="gan")
class ConditionalGAN(keras.Model):
    """G and D with a ``train_step`` of one (or ``d_steps``) D step then one G step.

    Batches are dicts ``{"images", "labels", "z_d", "labels_d", "z_g", "labels_g"}``:
    the latent noise and the sampled class labels come with the data (see
    ``gan.data.with_noise``), so a step is the same function of the global
    batch on 1 or N replicas. On TensorFlow, losses are per-replica means
    divided by the number of replicas in sync, so the all-reduced gradients
    are those of the global-batch mean (hand-written losses are not scaled by
    Keras). On PyTorch the step is TensorFlow's, its gradients from
    ``torch.autograd.grad`` (:func:`gradients`) and its updates under
    ``torch.no_grad()``. On JAX the step is one stateless function of the model's state
    and the global batch (``stateless_call``, ``jax.value_and_grad``,
    ``optimizer.stateless_apply``), jitted by ``fit``: under
    ``keras.distribution.DataParallel`` XLA splits it over the devices, and
    means over the batch (the losses, batch-norm moments) are global ones.
    Both optimizers are ``model.optimizer`` (an
    :class:`kctx.training.optimizers.OptimizerGroup`), so ``fit`` carries both
    states on JAX.

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
        """Store both optimizers, build their state now (in the strategy scope) and
        group them as ``self.optimizer``."""
        super().compile(**kwargs)
        self.g_optimizer = g_optimizer
        self.d_optimizer = d_optimizer
        self.g_optimizer.build(self.generator.trainable_variables)
        self.d_optimizer.build(self.discriminator.trainable_variables)
        self.optimizer = OptimizerGroup([
            (self.g_optimizer, self.generator.trainable_variables),
            (self.d_optimizer, self.discriminator.trainable_variables)])

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
        """Replicas whose gradients the strategy sums (TensorFlow); 1 on PyTorch."""
        if keras.backend.backend() != "tensorflow":
            return 1
        import tensorflow as tf

        return tf.distribute.get_strategy().num_replicas_in_sync

    def _discriminator_step(self, images, labels, z, fake_labels):
        replicas = self._replicas()
        fake = self.generator([z, fake_labels], training=True)

        def objective():
            real_scores = self.discriminator([images, labels], training=True)
            fake_scores = self.discriminator([fake, fake_labels], training=True)
            loss = hinge_discriminator_loss(real_scores, fake_scores)
            return loss / replicas, (loss, _mean32(real_scores), _mean32(fake_scores))

        (loss, real_mean, fake_mean), grads = gradients(
            objective, self.discriminator.trainable_variables)
        with _optimizer_context():
            self.d_optimizer.apply(grads, self.discriminator.trainable_variables)
        return loss, real_mean, fake_mean

    def _generator_step(self, z, fake_labels):
        replicas = self._replicas()

        def objective():
            fake = self.generator([z, fake_labels], training=True)
            loss = hinge_generator_loss(self.discriminator([fake, fake_labels], training=True))
            return loss / replicas, loss

        loss, grads = gradients(objective, self.generator.trainable_variables)
        with _optimizer_context():
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

    def train_step(self, *args):
        """One D step (or ``d_steps``) then one G step: ``train_step(data)`` on
        TensorFlow and PyTorch, ``train_step(state, data)`` on JAX
        (:meth:`stateless_train_step`)."""
        if keras.backend.backend() == "jax":
            return self.stateless_train_step(*args)
        (data,) = args
        images, labels = data["images"], data["labels"]
        for _ in range(self.d_steps):
            d_loss, d_real, d_fake = self._discriminator_step(
                images, labels, data["z_d"], data["labels_d"]
            )
        g_loss = self._generator_step(data["z_g"], data["labels_g"])
        if self.ema_generator is not None:
            with _optimizer_context():
                self._update_ema()
        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        self.d_real_tracker.update_state(d_real)
        self.d_fake_tracker.update_state(d_fake)
        return {m.name: m.result() for m in self.metrics}

    def stateless_train_step(self, state, data):
        """The train step as a pure function (JAX): ``(logs, new state)`` of ``state``
        (``fit``'s trainable, non-trainable, optimizer and metric values) and a batch.

        The same updates as the TensorFlow step, in the same order: the D step
        generates its fakes with G in training mode (batch-norm statistics and SN
        vectors of G move), scores real then fake images (D's SN vectors move at
        each call), and Adam-updates D; the G step scores G's fakes with the
        updated D and Adam-updates G; then the EMA of G.
        """
        import jax

        trainable, non_trainable, optimizer_values, metric_values = state
        values = {id(v): x for v, x in zip(self.trainable_variables, trainable)}
        values.update({id(v): x for v, x in zip(self.non_trainable_variables, non_trainable)})

        def get(variables):
            return [values[id(v)] for v in variables]

        def put(variables, new):
            values.update(zip(map(id, variables), new))

        generator, discriminator = self.generator, self.discriminator
        g_values, d_values = self.optimizer.split(optimizer_values)
        images, labels = data["images"], data["labels"]

        def d_loss(d_trainable, d_non_trainable, fake, fake_labels):
            real_scores, d_non_trainable = discriminator.stateless_call(
                d_trainable, d_non_trainable, [images, labels], training=True)
            fake_scores, d_non_trainable = discriminator.stateless_call(
                d_trainable, d_non_trainable, [fake, fake_labels], training=True)
            loss = hinge_discriminator_loss(real_scores, fake_scores)
            return loss, (d_non_trainable, _mean32(real_scores), _mean32(fake_scores))

        for _ in range(self.d_steps):
            fake, g_non_trainable = generator.stateless_call(
                get(generator.trainable_variables), get(generator.non_trainable_variables),
                [data["z_d"], data["labels_d"]], training=True)
            put(generator.non_trainable_variables, g_non_trainable)
            d_trainable = get(discriminator.trainable_variables)
            (d_loss_value, (d_non_trainable, d_real, d_fake)), grads = jax.value_and_grad(
                d_loss, has_aux=True)(d_trainable, get(discriminator.non_trainable_variables),
                                      fake, data["labels_d"])
            put(discriminator.non_trainable_variables, d_non_trainable)
            d_trainable, d_values = self.d_optimizer.stateless_apply(d_values, grads,
                                                                     d_trainable)
            put(discriminator.trainable_variables, d_trainable)

        def g_loss(g_trainable, g_non_trainable, d_non_trainable):
            fake, g_non_trainable = generator.stateless_call(
                g_trainable, g_non_trainable, [data["z_g"], data["labels_g"]], training=True)
            scores, d_non_trainable = discriminator.stateless_call(
                get(discriminator.trainable_variables), d_non_trainable,
                [fake, data["labels_g"]], training=True)
            return hinge_generator_loss(scores), (g_non_trainable, d_non_trainable)

        g_trainable = get(generator.trainable_variables)
        (g_loss_value, (g_non_trainable, d_non_trainable)), grads = jax.value_and_grad(
            g_loss, has_aux=True)(g_trainable, get(generator.non_trainable_variables),
                                  get(discriminator.non_trainable_variables))
        put(generator.non_trainable_variables, g_non_trainable)
        put(discriminator.non_trainable_variables, d_non_trainable)
        g_trainable, g_values = self.g_optimizer.stateless_apply(g_values, grads, g_trainable)
        put(generator.trainable_variables, g_trainable)

        if self.ema_generator is not None:
            iterations = g_values[[id(v) for v in self.g_optimizer.variables].index(
                id(self.g_optimizer.iterations))]
            decay = ops.cast(iterations > self.ema_start, "float32") * self.ema_decay
            for ema, weight in zip(self.ema_generator.variables, generator.variables):
                if weight.trainable:
                    put([ema], [decay * values[id(ema)] + (1.0 - decay) * values[id(weight)]])
                else:
                    put([ema], [values[id(weight)]])

        logs, new_metric_values, start = {}, [], 0
        for metric, value in zip(self.metrics, (d_loss_value, g_loss_value, d_real, d_fake)):
            count = len(metric.variables)
            updated = metric.stateless_update_state(metric_values[start:start + count], value)
            logs[metric.name] = metric.stateless_result(updated)
            new_metric_values += list(updated)
            start += count
        state = (get(self.trainable_variables), get(self.non_trainable_variables),
                 g_values + d_values, new_metric_values)
        return logs, state

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
