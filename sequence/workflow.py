"""The sequence workflow for :func:`kctx.training.run`: PSF-Attn or the Transformer on the
synthetic long-sequence tasks and the Long Range Arena.

``python -m sequence.train`` and ``python -m sequence.evaluate`` run it.
What is the sequence workflow's own: the two networks of Khalitov et al.,
the step-indexed task generators, the held-out accuracy every
``eval_every`` steps and the stop at ``target_accuracy``.
"""

import keras
import tensorflow as tf

from kctx.data import replica_batches, sharded_examples
from kctx.models.sequence import psf_sequence_model, transformer_sequence_model
from kctx.training import Schedule, Workflow
from sequence.configs import CONFIGS
from sequence.data import (
    ADDING_TOLERANCE,
    HELD_OUT_BLOCK,
    LRA_TASKS,
    TEMPORAL_ORDER_CLASSES,
    held_out,
    lra_dataset,
    training_stream,
)


@keras.saving.register_keras_serializable(package="sequence")
def adding_accuracy(y_true, y_pred):
    """1 where |ŷ − y| < 0.04 (the paper's criterion for the Adding problem), else 0."""
    error = keras.ops.abs(keras.ops.cast(y_true, y_pred.dtype) - y_pred)
    return keras.ops.cast(error < ADDING_TOLERANCE, "float32")


def build_model(config):
    """The ``config.model`` network for ``config.task`` at ``config.length``, compiled (Adam).

    As the authors' code: a position embedding for token tasks, none for
    Adding (real-valued (a, b) pairs through a linear embedding). The
    accuracy is a weighted metric, so the held-out padding (weight 0) of an
    evaluation split over several replicas is not counted."""
    if config.task == "adding":
        data = dict(input_dim=2, outputs=1)
        loss, metric = "mse", keras.metrics.MeanMetricWrapper(adding_accuracy, name="accuracy")
    else:
        vocab_size, classes = ((6, TEMPORAL_ORDER_CLASSES) if config.task == "temporal_order"
                               else LRA_TASKS[config.task][1:])
        data = dict(vocab_size=vocab_size, outputs=classes)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        metric = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
    common = dict(seq_len=config.length, embed_dim=config.embed_dim,
                  num_blocks=config.num_blocks, pooling=config.pooling,
                  positions=config.task != "adding", **data)
    network = (psf_sequence_model(hidden_units=config.hidden_units,
                                  value_units=config.value_units, residual=config.residual,
                                  **common)
               if config.model == "psf"
               else transformer_sequence_model(num_heads=config.num_heads, **common))
    network.compile(optimizer=keras.optimizers.Adam(config.learning_rate), loss=loss,
                    weighted_metrics=[metric])
    return network


class StopAtAccuracy(keras.callbacks.Callback):
    """Ends training once the held-out accuracy reaches ``target`` (0: never)."""

    def __init__(self, target):
        super().__init__()
        self.target = target

    def on_epoch_end(self, epoch, logs=None):
        if self.target and (logs or {}).get("val_accuracy", 0.0) >= self.target:
            self.model.stop_training = True


def _held_out_examples(run):
    """The held-out examples (one at a time) and their count."""
    config = run.config
    if config.task in LRA_TASKS:
        examples = lra_dataset(config.task, "test", run.data.data_dir, run.data.download)
        if config.eval_examples:
            examples = examples.take(config.eval_examples)
        count = int(examples.cardinality())
        if count < 0:
            count = int(examples.reduce(0, lambda total, _: total + 1))
        return examples, count
    # Drawn in blocks of HELD_OUT_BLOCK, not of eval_batch_size: an evaluation field must
    # not change which examples are held out (a batch of 7 drew another set before).
    count = -(-config.eval_examples // HELD_OUT_BLOCK) * HELD_OUT_BLOCK
    examples = held_out(config.task, config.length, count, seed=run.seed).unbatch()
    return examples.take(config.eval_examples), config.eval_examples


class SequenceWorkflow(Workflow):
    """PSF-Attn or the Transformer on Adding, Temporal Order and the LRA tasks."""

    name = "sequence"
    configs = CONFIGS
    variant_field = "model"
    default_config = "adding"
    evaluation_fields = ("eval_batch_size",)

    def variant(self, config):
        return f"{config.model}-{config.length}"

    def schedule(self, run):
        return Schedule(run.config.steps, run.config.eval_every, run.config.eval_every)

    def check_data(self, run):
        if run.config.task in LRA_TASKS:
            for split in ("train", "test"):
                lra_dataset(run.config.task, split, run.data.data_dir, run.data.download)

    def build(self, run):
        return build_model(run.config)

    def train_data(self, run, start_step, input_context):
        config = run.config
        if config.task in LRA_TASKS:  # one seeded order of the files; a resume skips to its step
            stream = (lra_dataset(config.task, "train", run.data.data_dir, run.data.download)
                      .shuffle(10_000, seed=run.seed).repeat()
                      .batch(config.batch_size, drop_remainder=True)
                      .skip(start_step).prefetch(2))
        else:
            stream = training_stream(config.task, config.length, config.batch_size, run.seed,
                                     start_step)
        return replica_batches(stream, config.batch_size, input_context)

    def eval_data(self, run, input_context):
        examples, count = _held_out_examples(run)
        inputs, target = next(iter(examples.take(1)))
        blank = (tf.zeros_like(inputs), tf.zeros_like(target))
        return sharded_examples(examples, count, run.config.eval_batch_size, blank,
                                input_context)

    def callbacks(self, run, model):
        return [StopAtAccuracy(run.config.target_accuracy)]

    def evaluate(self, run, model):
        scores = run.keras_evaluate(model, lambda context: self.eval_data(run, context))
        return {"accuracy": float(scores["accuracy"]), "loss": float(scores["loss"]),
                "eval_examples": _held_out_examples(run)[1]}

    def summary(self, results):
        return (f"held-out accuracy {results['accuracy']:.4f} on {results['eval_examples']} "
                f"sequences ({results['config']}, {results['variant']})")


WORKFLOW = SequenceWorkflow()
