"""The classification workflow for :func:`kctx.training.run`: KANets (or a ResNet-50 with
context blocks), SGD with the paper's step decay, top-1 / top-5 on the held-out split.

``python -m classification.train`` and ``python -m classification.evaluate``
run it. What is classification's own: the models, the piecewise-constant
schedule in epochs, the per-example augmentation and the weighted held-out
evaluation (padding of weight 0, so every replica gets equal batches), and
the history plot.
"""

import keras

from classification.configs import CONFIGS, MSCAN_BACKBONES, get_config, model_label
from classification.data import evaluation_batches, split_examples, training_batches
from kctx.models import (insert_context_block, kanet_family_model, mscan_classifier,
                         resnet50_positions)
from kctx.profile import count_macs
from kctx.training import ParamwiseAdamW, Schedule, Workflow, read_history, sgd
from kctx.training.export import ArtifactModel


def build_model(config):
    """The network of ``config``: a row of Tables 2–4 sized for it, with the ``"resnet50"``
    ``backbone`` that network with ``context`` blocks inserted at the stages ``at``, or with
    an MSCAN ``backbone`` SegNeXt's backbone as a classifier (its ``backbone`` layer is what
    segmentation's ``--backbone-weights`` reads from the run's ``model.keras``).
    Under a mixed dtype policy its logits are cast to float32 (:func:`float32_logits`)."""
    if config.backbone in MSCAN_BACKBONES:
        size = config.image_size
        network = mscan_classifier(MSCAN_BACKBONES[config.backbone], config.num_classes,
                                   input_shape=(size, size, 3), value_range=(-1.0, 1.0),
                                   dropout_rate=config.dropout_rate)
    elif config.backbone is not None:
        network = keras.applications.ResNet50(
            weights=None, input_shape=(config.image_size, config.image_size, 3),
            classes=config.num_classes, classifier_activation=None)
        if config.context not in (None, "none"):
            network = insert_context_block(network, resnet50_positions(config.at),
                                           config.context, name=f"resnet50_{config.context}")
    else:
        network = kanet_family_model(
            config.model, num_classes=config.num_classes,
            input_shape=(config.image_size, config.image_size, 3),
            width_multiplier=config.width_multiplier, dropout_rate=config.dropout_rate,
            output_stride=config.output_stride, norm_momentum=config.norm_momentum)
    return float32_logits(network)


def float32_logits(network):
    """``network`` itself when its logits are float32; under a mixed policy the same layers
    with a float32 identity on the logits (Keras's mixed-precision advice: the top-k
    metric's TensorFlow kernel takes no bfloat16, and the softmax is float32 anyway)."""
    if network.outputs[0].dtype == "float32":
        return network
    logits = keras.layers.Activation("linear", dtype="float32", name="logits_float32")(
        network.outputs[0])
    return keras.Model(network.inputs, logits, name=network.name)


def learning_rate_schedule(config, steps_per_epoch):
    """Piecewise-constant: ``learning_rate`` × ``decay_factor``ᵏ from the k-th decay epoch on.

    The optimizer's iteration count is the 0-based step, and Keras'
    ``PiecewiseConstantDecay`` switches after ``step > boundary``: boundaries
    at ``epoch · steps_per_epoch − 1`` make the first step of epoch ``e``
    (0-based) use the decayed rate.
    """
    boundaries = [int(epoch * steps_per_epoch) - 1 for epoch in config.decay_epochs]
    values = [config.learning_rate * config.decay_factor ** k for k in range(len(boundaries) + 1)]
    if not boundaries:  # constant, but still a schedule: the optimizer's variables (which
        boundaries, values = [0], values * 2  # checkpoints list) do not depend on the decays
    return keras.optimizers.schedules.PiecewiseConstantDecay(boundaries, values)


def build_optimizer(config, steps_per_epoch):
    """SGD with momentum and decay on kernels, or PyTorch's AdamW (decay on every weight),
    on the step-decay :func:`learning_rate_schedule`."""
    schedule = learning_rate_schedule(config, steps_per_epoch)
    if config.optimizer == "adamw":
        return ParamwiseAdamW(schedule, weight_decay=config.weight_decay)
    return sgd(schedule, config.momentum, config.weight_decay)


def compile_model(model, optimizer=None):
    """Cross-entropy on logits; top-1 / top-5 as weighted metrics, so the weight-0
    padding of the held-out split (:func:`evaluation_batches`) is not counted."""
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="top1"),
                          keras.metrics.SparseTopKCategoricalAccuracy(5, name="top5")],
    )
    return model


def plot_history(rows, path, title, steps_per_epoch=1):
    """Loss and top-1 (training and held-out) per epoch, as a PNG."""
    from matplotlib.figure import (
        Figure,  # no pyplot: the caller's backend stays as it is
    )

    epochs = [row["step"] / steps_per_epoch for row in rows]
    figure = Figure(figsize=(9, 3.4))
    axes = figure.subplots(1, 2)
    for axis, key, label in ((axes[0], "loss", "loss"), (axes[1], "top1", "top-1 accuracy")):
        axis.plot(epochs, [row.get(key) for row in rows], label="train")
        validated = [(e, row[f"val_{key}"]) for e, row in zip(epochs, rows)
                     if f"val_{key}" in row]
        if validated:
            axis.plot(*zip(*validated), marker=".", label="held out")
        axis.set_xlabel("epoch")
        axis.set_ylabel(label)
        if key == "loss":
            axis.set_yscale("log")
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    return path


class HistoryPlot(keras.callbacks.Callback):
    """``history.png`` from ``history.csv`` when training ends (chief only)."""

    def __init__(self, run):
        super().__init__()
        self.run = run

    def on_train_end(self, logs=None):
        if self.run.chief:
            config = self.run.config
            plot_history(read_history(self.run.directory / "history.csv"),
                         self.run.directory / "history.png",
                         f"{model_label(config)} on {config.name}", steps_per_epoch(self.run))


def steps_per_epoch(run):
    """Training steps of one pass over the training split at the config's batch size."""
    location = run.data
    _, count, _ = split_examples(run.config, run.config.train_split, location.data_dir,
                                 location.manual_dir, location.download)
    if count < run.config.batch_size:
        raise ValueError(f"`batch_size` must not exceed the {count} training examples of "
                         f"{run.config.dataset}. Received: batch_size={run.config.batch_size}")
    return count // run.config.batch_size


class ClassificationWorkflow(Workflow):
    """KANets or a ResNet-50 with inserted blocks: epochs, step decay, weighted top-k."""

    name = "classification"
    configs = CONFIGS
    variant_field = "model"
    default_config = "digits"
    evaluation_fields = ("eval_batch_size",)
    export_evaluation = {}  # top-1 / top-5 of the artifact on the held-out split

    def get_config(self, name, **overrides):
        return get_config(name, **overrides)

    def variant(self, config):
        return model_label(config)

    def schedule(self, run):
        epoch = steps_per_epoch(run)
        return Schedule(run.config.epochs * epoch, epoch, run.config.validation_freq * epoch)

    def check_data(self, run):
        try:  # checked before training, not when the plot is drawn
            import matplotlib  # noqa: F401
        except ImportError:
            raise ImportError("classification.train plots the history with matplotlib: "
                              "pip install 'kctx[classification]'") from None
        location = run.data
        for split in (run.config.train_split, run.config.eval_split):
            split_examples(run.config, split, location.data_dir, location.manual_dir,
                           location.download)

    def build(self, run):
        model = build_model(run.config)
        return compile_model(model, build_optimizer(run.config, steps_per_epoch(run)))

    def train_data(self, run, start_step, input_context):
        location = run.data
        stream, _ = training_batches(run.config, run.seed, start_step, location.data_dir,
                                     location.manual_dir, location.download,
                                     input_context=input_context)
        return stream

    def eval_data(self, run, input_context):
        location = run.data
        return evaluation_batches(run.config, data_dir=location.data_dir,
                                  manual_dir=location.manual_dir, download=location.download,
                                  input_context=input_context)

    def callbacks(self, run, model):
        return [HistoryPlot(run)]

    def evaluate(self, run, model):
        if not getattr(model, "compiled", False):  # a reloaded model without its compile config
            compile_model(model)
        scores = run.keras_evaluate(model, lambda context: self.eval_data(run, context))
        results = {"top1": float(scores["top1"]), "top5": float(scores["top5"]),
                   "loss": float(scores["loss"]), "eval_split": run.config.eval_split}
        if not isinstance(model, ArtifactModel):  # an exported artifact has no Keras graph
            size = run.config.image_size
            results["madds"] = int(count_macs(lambda x: model(x, training=False),
                                              (1, size, size, 3)))
        return results

    def summary(self, results):
        return (f"top-1 {results['top1']:.4f}, top-5 {results['top5']:.4f} on "
                f"{results['config']} {results['eval_split']} ({results['variant']})")


WORKFLOW = ClassificationWorkflow()
