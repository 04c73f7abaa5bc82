"""Training-loop helpers shared by the workflows: step checkpoints with exact resume.

A workflow trains with ``fit`` over an endless, step-indexed stream (see
:func:`kctx.data.indexed_batches`); Keras epochs are the checkpoint
interval. :class:`StepCheckpoint` saves the step count with every variable a
resume needs and restores them, so a killed run continues at the saved step
with the same batches it would have seen.
"""

import argparse
import dataclasses
import json
import math
import pathlib

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


def check_global_batch(batch_size, strategy):
    """Raise unless ``batch_size`` splits evenly over the strategy's replicas.

    Keras builds a model under a strategy from the cross-replica mean of the
    first batch, which fails on unequal shards.
    """
    replicas = strategy.num_replicas_in_sync
    if batch_size % replicas:
        raise ValueError(f"`batch_size` must be a multiple of the {replicas} replicas. "
                         f"Received: batch_size={batch_size}")
    return replicas


def sgd(learning_rate, momentum=0.9, weight_decay=None):
    """SGD with momentum and decoupled weight decay on kernels only (not on biases or
    batch-norm scales and offsets), as the ImageNet and segmentation recipes use."""
    optimizer = keras.optimizers.SGD(learning_rate, momentum=momentum,
                                     weight_decay=weight_decay or None)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer


def replace_config(configs, name, kind, **overrides):
    """``configs[name]`` (a dataclass) with the non-None ``overrides`` replaced.

    Raises ValueError naming ``kind`` and the valid names for an unknown ``name``.
    """
    try:
        config = configs[name]
    except KeyError:
        raise ValueError(f"Unknown {kind} config {name!r}. Valid: {', '.join(configs)}") from None
    overrides = {k: v for k, v in overrides.items() if v is not None}
    return dataclasses.replace(config, **overrides) if overrides else config


def read_run(model_dir, workflow):
    """The ``run.json`` a training CLI wrote in ``model_dir``, as a dict.

    Raises FileNotFoundError naming ``workflow`` (e.g. ``"gan.train"``) when
    the directory holds no run.
    """
    run_file = pathlib.Path(model_dir) / "run.json"
    if not run_file.exists():
        raise FileNotFoundError(
            f"{run_file} not found: `model_dir` must be a directory written by {workflow}. "
            f"Received: model_dir={str(model_dir)!r}")
    return json.loads(run_file.read_text())


def workflow_parser(prog, description):
    """The argument parser of a workflow CLI: ``prog`` and the module docstring as help."""
    return argparse.ArgumentParser(prog=prog, description=description,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def add_run_arguments(parser, model_dir_help):
    """The flags every workflow CLI shares: ``--model-dir``, ``--tpu``, ``--seed``, ``--verbose``."""
    parser.add_argument("--model-dir", help=model_dir_help)
    parser.add_argument("--tpu", help="TPU name or 'local' (TPU VM)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", type=int, default=1, help="Keras progress bar verbosity")
