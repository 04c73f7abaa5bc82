"""The language workflow for :func:`kctx.training.run`: a decoder with a causal token mixer
on the standard library's sources, scored in bits per character.

What is its own: the corpus (pinned files, split by file, its SHA-256 recorded), the
step-indexed windows, the decoder with its mixer by name, and bits per character.
"""

import math

import keras
import tensorflow as tf

from kctx.data import replica_batches, sharded_examples
from kctx.models import CausalLanguageModel
from kctx.training import Schedule, Workflow
from language.configs import CONFIGS
from language.data import VOCABULARY_SIZE, held_out_windows, read_corpus, split_corpus, \
    training_stream


@keras.saving.register_keras_serializable(package="language")
def bits_per_character(y_true, y_pred):
    """The cross-entropy of each next character in bits (logits ``y_pred``)."""
    return keras.losses.sparse_categorical_crossentropy(
        y_true, y_pred, from_logits=True) / math.log(2.0)


def build_model(config):
    """The config's decoder, compiled: AdamW on a cosine-decayed learning rate, gradients
    clipped at a global norm of 1, the cross-entropy in nats and bits per character."""
    model = CausalLanguageModel(vocabulary_size=VOCABULARY_SIZE, embed_dim=config.embed_dim,
                                num_blocks=config.num_blocks, mixer=config.mixer,
                                mixer_options=config.mixer_options(),
                                mlp_ratio=config.mlp_ratio, short_conv=config.short_conv,
                                name="language_model")
    model.build((None, config.context_length))
    schedule = keras.optimizers.schedules.CosineDecay(config.learning_rate, config.steps)
    model.compile(optimizer=keras.optimizers.AdamW(schedule, weight_decay=config.weight_decay,
                                                   global_clipnorm=1.0),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[keras.metrics.MeanMetricWrapper(
                      bits_per_character, name="bits_per_character")])
    return model


class LanguageWorkflow(Workflow):
    """Character-level language modelling with the causal Hamburger or a baseline mixer."""

    name = "language"
    configs = CONFIGS
    variant_field = "mixer"
    default_config = "stdlib"
    evaluation_fields = ("eval_characters", "eval_batch_size")

    def __init__(self):
        self._corpus = None

    def corpus(self):
        """``(train, held_out, sha256)`` of the corpus, read once per process."""
        if self._corpus is None:
            texts, digest = read_corpus()
            self._corpus = (*split_corpus(texts), digest)
        return self._corpus

    def variant(self, config):
        return f"{config.mixer}-{config.context_length}"

    def schedule(self, run):
        config = run.config
        return Schedule(config.steps, config.checkpoint_every, config.eval_every)

    def check_data(self, run):
        self.corpus()

    def build(self, run):
        return build_model(run.config)

    def train_data(self, run, start_step, input_context):
        config = run.config
        stream = training_stream(self.corpus()[0], config.context_length, config.batch_size,
                                 run.seed, start_step)
        return replica_batches(stream, config.batch_size, input_context)

    def _held_out(self, run):
        return held_out_windows(self.corpus()[1], run.config.context_length,
                                run.config.eval_characters)

    def eval_data(self, run, input_context):
        inputs, targets = self._held_out(run)
        examples = tf.data.Dataset.from_tensor_slices((inputs, targets))
        blank = (tf.zeros_like(inputs[0]), tf.zeros_like(targets[0]))
        batches = sharded_examples(examples, len(inputs), run.config.eval_batch_size, blank,
                                   input_context)
        # A weight per predicted character: the padding windows' 0 on each of their targets.
        return batches.map(lambda x, y, weight: (
            x, y, tf.broadcast_to(weight[:, None], tf.shape(y))))

    def evaluate(self, run, model):
        scores = run.keras_evaluate(model, lambda context: self.eval_data(run, context))
        inputs, _ = self._held_out(run)
        return {"bits_per_character": float(scores["bits_per_character"]),
                "loss": float(scores["loss"]), "eval_characters": int(inputs.size),
                "corpus_sha256": self.corpus()[2]}

    def summary(self, results):
        return (f"{results['bits_per_character']:.4f} bits per character on "
                f"{results['eval_characters']:,} held-out characters ({results['config']}, "
                f"{results['variant']})")


WORKFLOW = LanguageWorkflow()
