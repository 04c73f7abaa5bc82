"""``python -m classification.train``: train a KANet (or a baseline) with ``fit`` and report top-1.

With no arguments: KANet_KV on the embedded digits (scikit-learn's 1,797
real scans: 1,438 for training, 359 held out, upsampled to 32×32 RGB) for a
few minutes on 2 CPU cores; prints the held-out top-1 accuracy and writes
``model.keras``, ``history.csv``, ``history.png`` and ``results.json`` to the
run directory. ``--config imagenet`` is the paper's ImageNet recipe (TFDS
``imagenet2012`` from its manual download); ``cifar10`` and ``imagenette``
read TFDS. Runs resume from ``--model-dir`` where they stopped, under any
``tf.distribute`` strategy (``--tpu`` for a TPU).

``--backbone resnet50 --context poly_nl --at res4`` trains a ResNet-50
(``keras.applications``, random initialisation) with a context block inserted
before the last residual block of res4 (or of several stages, ``--at
res3+4+5``) by :func:`kctx.models.insert_context_block`: the Poly-NL paper's
classification experiment (Sec. 5.3).
"""

import csv
import json
import os
import pathlib
import time

import keras

from classification.configs import CONFIGS, get_config
from classification.data import evaluation_batches, training_batches
from kctx.data import add_tfds_arguments
from kctx.distribute import get_strategy
from kctx.layers import context_block_names
from kctx.models import KANET_FAMILY, insert_context_block, kanet_family_model, \
    resnet50_positions
from kctx.training import StepCheckpoint, add_run_arguments, check_global_batch, sgd, \
    tensorboard_callback, workflow_parser

MODELS = tuple(KANET_FAMILY)
BACKBONES = ("resnet50",)


def model_label(model, backbone=None, context=None, at="res4"):
    """The run's model name: ``model``, or ``<backbone>-<context>-<at>`` with a backbone."""
    if backbone is None:
        if model not in MODELS:
            raise ValueError(f"Unknown `model`: expected one of {MODELS}. Received: {model!r}")
        if context is not None:
            raise ValueError("`context` / --context is inserted into a `backbone` / --backbone "
                             f"(one of {BACKBONES}). Received: context={context!r}, backbone=None")
        return model
    if backbone not in BACKBONES:
        raise ValueError(f"Unknown `backbone`: expected one of {BACKBONES}. "
                         f"Received: backbone={backbone!r}")
    context = context or "none"
    if context not in context_block_names():
        raise ValueError(f"Unknown `context`: expected one of {context_block_names()}. "
                         f"Received: context={context!r}")
    resnet50_positions(at)  # a named error for a bad stage
    return f"{backbone}-{context}" + ("" if context == "none" else f"-{at.replace('+', '')}")


def build_model(name, config, backbone=None, context=None, at="res4"):
    """Model ``name`` (a row of Tables 2–4) sized for ``config``; with ``backbone``
    (``"resnet50"``), that network with ``context`` blocks inserted at the stages ``at``."""
    if backbone is not None:
        network = keras.applications.ResNet50(
            weights=None, input_shape=(config.image_size, config.image_size, 3),
            classes=config.num_classes, classifier_activation=None)
        if context in (None, "none"):
            return network
        return insert_context_block(network, resnet50_positions(at), context,
                                    name=f"resnet50_{context}")
    return kanet_family_model(
        name, num_classes=config.num_classes,
        input_shape=(config.image_size, config.image_size, 3),
        width_multiplier=config.width_multiplier, dropout_rate=config.dropout_rate,
        output_stride=config.output_stride, norm_momentum=config.norm_momentum)


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
    """SGD with momentum and decoupled weight decay on kernels only."""
    return sgd(learning_rate_schedule(config, steps_per_epoch), config.momentum,
               config.weight_decay)


def compile_model(model, optimizer=None):
    """Cross-entropy on logits; top-1 / top-5 as weighted metrics, so the weight-0
    padding of multi-replica evaluation (:func:`evaluation_batches`) is not counted."""
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="top1"),
                          keras.metrics.SparseTopKCategoricalAccuracy(5, name="top5")],
    )
    return model


class _EpochSeconds(keras.callbacks.Callback):
    """Adds the epoch's wall time to its logs as ``seconds`` (for ``history.csv``)."""

    def on_epoch_begin(self, epoch, logs=None):
        self._began = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["seconds"] = time.perf_counter() - self._began


def read_history(path):
    """The per-epoch rows of ``history.csv`` (the last row wins for an epoch logged twice)."""
    if not pathlib.Path(path).exists():
        return []
    with open(path, newline="") as handle:
        rows = {int(row["epoch"]): row for row in csv.DictReader(handle)}
    return [{key: float(value) for key, value in rows[epoch].items() if value != ""}
            for epoch in sorted(rows)]


def plot_history(rows, path, title):
    """Loss and top-1 (training and held-out) per epoch, as a PNG."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is

    epochs = [row["epoch"] + 1 for row in rows]
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


def train(config="digits", model="kanet_kv", epochs=None, batch_size=None, learning_rate=None,
          width_multiplier=None, model_dir=None, tpu=None, strategy=None, seed=0, verbose=1,
          data_dir=None, manual_dir=None, download=False, stop_after_epoch=None, backbone=None,
          context=None, at="res4", log=print):
    """Train (or resume from ``model_dir``) and evaluate top-1 on the held-out split.

    Args:
        config: a name in ``CONFIGS`` (``digits``, ``cifar10``, ``imagenette``,
            ``imagenet``).
        model: a name in ``MODELS`` (``kanet_kv``, ``kanet_qkv``,
            ``mobilenet_v2``, ``attnnet``, ``attnnet_pool``, ``mobilenet_v2_kao``,
            ``kanet_none``).
        epochs, batch_size, learning_rate, width_multiplier: override the
            config (a shorter run keeps the decay epochs at the same fractions).
        model_dir: run directory (default ``runs/classification-<config>-<model>-seed<seed>``).
        tpu: TPU name / ``"local"``; ``strategy``: an explicit
            ``tf.distribute`` strategy (default :func:`kctx.distribute.get_strategy`).
        data_dir, manual_dir, download: where TFDS datasets are
            (:func:`kctx.data.tfds_dataset`).
        stop_after_epoch: end this call after that many epochs (counted from
            the start of training, checkpoint included), e.g. to fit a time
            slot; the schedule stays that of ``epochs`` and the next call
            resumes there. The evaluation and saved model are of the weights
            reached.
        backbone, context, at: instead of ``model``, a ``keras.applications``
            backbone (``"resnet50"``) with the context block ``context`` (a
            :func:`kctx.layers.context_block` name) inserted before the last
            residual block of each stage in ``at`` (``"res4"``, ``"res3+4+5"``).

    Returns:
        A dict of results (also written to ``results.json``) with the trained
        model under ``"model"``.
    """
    label = model_label(model, backbone, context, at)
    try:  # checked before training, not when the plot is drawn
        import matplotlib  # noqa: F401
    except ImportError:
        raise ImportError("classification.train plots the history with matplotlib: "
                          "pip install 'kctx[classification]'") from None
    config = get_config(config, epochs=epochs, batch_size=batch_size,
                        learning_rate=learning_rate, width_multiplier=width_multiplier)
    model_dir = pathlib.Path(model_dir or f"runs/classification-{config.name}-{label}-seed{seed}")
    model_dir.mkdir(parents=True, exist_ok=True)
    strategy = strategy or get_strategy(tpu, log=log)
    replicas = check_global_batch(config.batch_size, strategy)
    keras.utils.set_random_seed(seed)
    # Both pipelines first: a missing dataset stops the run before anything is built.
    stream, steps_per_epoch = training_batches(config, seed, 0, data_dir, manual_dir, download)
    held_out = evaluation_batches(config, data_dir=data_dir, manual_dir=manual_dir,
                                  download=download, replicas=replicas)
    with strategy.scope():
        network = build_model(model, config, backbone, context, at)
        optimizer = build_optimizer(config, steps_per_epoch)
        optimizer.build(network.trainable_variables)
        compile_model(network, optimizer)
    checkpoint = StepCheckpoint(model_dir / "checkpoints",
                                {"model": network, "optimizer": optimizer})
    start = checkpoint.restore(log)
    if start % steps_per_epoch:
        raise ValueError(f"{model_dir} holds a checkpoint at step {start}, not at an epoch end "
                         f"of {steps_per_epoch} steps: was the batch size changed?")
    run = {"config": config.name, "model": label, "seed": seed, "epochs": config.epochs,
           "batch_size": config.batch_size, "learning_rate": config.learning_rate,
           "width_multiplier": config.width_multiplier,
           "replicas": replicas}
    (model_dir / "run.json").write_text(json.dumps(run, indent=2))
    log(f"{label}: {network.count_params():,} parameters; {config.epochs} epochs of "
        f"{steps_per_epoch} steps (batch {config.batch_size}) on {config.dataset}")

    end_epoch = min(config.epochs, stop_after_epoch or config.epochs)
    if start < end_epoch * steps_per_epoch:
        if start:
            stream, _ = training_batches(config, seed, start, data_dir, manual_dir, download)
        callbacks = [_EpochSeconds(), checkpoint.callback(steps_per_epoch),
                     keras.callbacks.CSVLogger(str(model_dir / "history.csv"), append=True)]
        board = tensorboard_callback(model_dir / "logs")
        if board is not None:
            callbacks.append(board)
        network.fit(stream, steps_per_epoch=steps_per_epoch, epochs=end_epoch,
                    initial_epoch=start // steps_per_epoch, validation_data=held_out,
                    validation_freq=config.validation_freq, callbacks=callbacks,
                    verbose=verbose)
    scores = network.evaluate(held_out, verbose=0, return_dict=True)
    network.save(model_dir / "model.keras")
    epochs = read_history(model_dir / "history.csv")
    history = plot_history(epochs, model_dir / "history.png", f"{label} on {config.name}")
    # Summed over the logged epochs, so a resumed run reports its whole training time
    # (validation included; model building and the final evaluation not).
    train_seconds = sum(row.get("seconds", float("nan")) for row in epochs)
    results = dict(run, epochs_done=int(optimizer.iterations.numpy()) // steps_per_epoch,
                   top1=float(scores["top1"]), top5=float(scores["top5"]),
                   loss=float(scores["loss"]), params=int(network.count_params()),
                   eval_split=config.eval_split, train_seconds=round(train_seconds, 1),
                   history=str(history), model_dir=str(model_dir))
    (model_dir / "results.json").write_text(json.dumps(results, indent=2))
    log(f"top-1 {results['top1']:.4f}, top-5 {results['top5']:.4f} on {config.dataset} "
        f"{config.eval_split} ({label}); model: {model_dir / 'model.keras'}")
    results["model"] = network
    return results


def main(argv=None):
    parser = workflow_parser("python -m classification.train", __doc__)
    parser.add_argument("--config", default="digits", choices=sorted(CONFIGS))
    parser.add_argument("--model", default="kanet_kv", choices=MODELS)
    parser.add_argument("--epochs", type=int, help="training epochs (default: per config)")
    parser.add_argument("--batch-size", type=int, help="global batch size")
    parser.add_argument("--learning-rate", type=float, help="initial learning rate")
    parser.add_argument("--width-multiplier", type=float, help="MobileNetV2's α")
    add_run_arguments(parser, "checkpoints, history, model (resumes from here)")
    parser.add_argument("--stop-after-epoch", type=int,
                        help="end this call after that epoch (resume later with the same command)")
    parser.add_argument("--backbone", choices=BACKBONES,
                        help="train this keras.applications network instead of --model")
    parser.add_argument("--context", choices=context_block_names(),
                        help="context block inserted into --backbone (e.g. poly_nl)")
    parser.add_argument("--at", default="res4",
                        help="stages to insert it in: res2..res5 or e.g. res3+4+5 (default res4)")
    add_tfds_arguments(parser)
    args = parser.parse_args(argv)
    train(args.config, args.model, args.epochs, args.batch_size, args.learning_rate,
          args.width_multiplier, args.model_dir, args.tpu, seed=args.seed, verbose=args.verbose,
          data_dir=args.data_dir, manual_dir=args.manual_dir, download=args.download,
          stop_after_epoch=args.stop_after_epoch, backbone=args.backbone, context=args.context,
          at=args.at)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    raise SystemExit(main())
