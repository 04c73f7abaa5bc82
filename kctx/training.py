"""Training-loop helpers shared by the workflows: step checkpoints with exact resume.

A workflow trains with ``fit`` over an endless, step-indexed stream (see
:func:`kctx.data.indexed_batches`); Keras epochs are the checkpoint
interval. :class:`StepCheckpoint` saves the step count with every variable a
resume needs and restores them, so a killed run continues at the saved step
with the same batches it would have seen.
"""

import math

import keras


class StepCheckpoint:
    """A step counter plus named lists of variables, saved with ``tf.train.CheckpointManager``.

    Variables are passed as ordered lists (``model.variables``,
    ``optimizer.variables``): ``tf.train.Checkpoint`` on a Keras 3 optimizer
    object saves its iteration count but not its slots (momentum, Adam
    moments), while the lists, whose order Keras fixes by construction, hold
    everything.

    Args:
        directory: where the checkpoints go.
        variables: dict name → object with ``variables`` or a list of variables.
        max_to_keep: checkpoints kept.
    """

    def __init__(self, directory, variables, max_to_keep=2):
        import tensorflow as tf

        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        lists = {name: list(getattr(value, "variables", value))
                 for name, value in variables.items()}
        self.checkpoint = tf.train.Checkpoint(step=self.step, **lists)
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(directory),
                                                  max_to_keep=max_to_keep)

    def restore(self, log=print):
        """Restore the newest checkpoint, if any; returns the step to start from."""
        latest = self.manager.latest_checkpoint
        if latest:
            self.checkpoint.restore(latest).assert_consumed()
            if log:
                log(f"resumed from {latest} at step {int(self.step.numpy())}")
        return int(self.step.numpy())

    def save(self, step):
        self.step.assign(step)
        return self.manager.save(checkpoint_number=int(step))

    def callback(self, steps_per_epoch):
        """A Keras callback saving at each epoch end (epoch e ends at step (e+1)·epoch length)."""
        return _SaveAtEpochEnd(self, steps_per_epoch)


class _SaveAtEpochEnd(keras.callbacks.Callback):
    def __init__(self, checkpoint, steps_per_epoch):
        super().__init__()
        self.checkpoint, self.steps_per_epoch = checkpoint, steps_per_epoch

    def on_epoch_end(self, epoch, logs=None):
        self.checkpoint.save((epoch + 1) * self.steps_per_epoch)


def steps_per_checkpoint(steps, every, start):
    """Keras epoch length: divides the total ``steps``, the interval ``every`` and ``start``,
    so checkpoints of an interrupted run stay on epoch boundaries."""
    return math.gcd(math.gcd(int(steps), int(every)), int(start))


def tensorboard_callback(log_dir):
    """``keras.callbacks.TensorBoard`` writing epoch scalars, or None without tensorboard."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return None
    return keras.callbacks.TensorBoard(str(log_dir), update_freq="epoch")
