"""``python -m segmentation.train``: train a HamNet-style segmenter with ``fit``; report mIoU.

With no arguments: the ``digits_seg`` config (canvases of scikit-learn's real
digit scans, 11 classes) with the Hamburger NMF head on a small dilated
ResNet, a few minutes on 2 CPU cores. Prints the validation mIoU and pixel
accuracy (ignore label 255 excluded) and writes ``model.keras`` and
``results.json``. SGD with momentum 0.9, weight decay 1e-4 and the poly
learning rate (1 − step/steps)^0.9; random flip, rescale and crop. Runs
resume from ``--model-dir`` and train under any ``tf.distribute`` strategy
(batch norm synchronised across replicas).

``--config voc`` (HamNet's PASCAL VOC recipe), ``voc_fast``, ``ade20k``, ``pets``
or ``scene_parse150`` train on real data found with ``--data-dir``
(``segmentation.data``).
"""

import json
import os
import pathlib

import keras
import numpy as np

from kctx.data import add_tfds_arguments
from kctx.distribute import get_strategy
from kctx.layers import context_block_names
from kctx.training import StepCheckpoint, add_run_arguments, check_global_batch, sgd, \
    steps_per_checkpoint, tensorboard_callback, workflow_parser
from segmentation.configs import CONFIGS, get_config
from segmentation.data import IGNORE_LABEL, evaluation_batches, load_split, training_batches
from segmentation.models import BACKBONES, HEADS, segmenter

CONTEXTS = HEADS + context_block_names()
DATA_DIR_HELP = ("voc / ade20k: the directory holding VOCdevkit (+ benchmark_RELEASE) or "
                 "ADEChallengeData2016 (default $KCTX_DATA_DIR or ~/datasets); TFDS datasets: "
                 "the TFDS data directory")


def poly_schedule(config):
    """``learning_rate · (1 − step / steps)^power``, reaching 0 at ``steps``."""
    return keras.optimizers.schedules.PolynomialDecay(
        config.learning_rate, decay_steps=config.steps, end_learning_rate=0.0,
        power=config.power)


def segmentation_scores(model, dataset, num_classes):
    """mIoU and pixel accuracy of ``model`` on ``dataset`` (labels 255 ignored).

    Both come from one confusion matrix accumulated over the dataset (keras'
    ``MeanIoU``: classes absent from both labels and predictions do not count).
    """
    metric = keras.metrics.MeanIoU(num_classes, ignore_class=IGNORE_LABEL, sparse_y_pred=False)
    for images, labels in dataset:
        metric.update_state(labels, model(images, training=False))
    confusion = keras.ops.convert_to_numpy(metric.total_cm).astype(np.float64)
    total = confusion.sum()
    return {"miou": float(metric.result()),
            "pixel_accuracy": float(np.trace(confusion) / total) if total else float("nan"),
            "pixels": int(total)}


def build_model(config, context, replicas=1, backbone_weights=None):
    return segmenter(config.backbone, config.output_stride, context, config.num_classes,
                     head_channels=config.head_channels, synchronized_batch_norm=replicas > 1,
                     backbone_weights=backbone_weights)


def train(config="digits_seg", context="ham_nmf", steps=None, batch_size=None, crop_size=None,
          model_dir=None, tpu=None, strategy=None, seed=0, verbose=1, backbone_weights=None,
          backbone=None, output_stride=None, eval_size=None, data_dir=None, manual_dir=None,
          download=False, log=print):
    """Train (or resume from ``model_dir``) and evaluate on the held-out split.

    Args:
        config: a name in :data:`segmentation.configs.CONFIGS`; ``steps``,
            ``batch_size``, ``crop_size``, ``backbone``, ``output_stride`` and
            ``eval_size`` override its fields when given.
        context: ``"aspp"`` or a :func:`kctx.layers.context_block` name.
        backbone_weights: a ``.weights.h5`` file for the backbone (random
            initialisation otherwise; a resumed run takes its weights from the
            checkpoint).
        data_dir, manual_dir, download: where the dataset is
            (:func:`segmentation.data.load_split`); it is looked up before
            anything is built.

    Returns a dict of results (also written to ``results.json``) with the
    trained model under ``"model"``.
    """
    if context not in CONTEXTS:
        raise ValueError(f"Unknown `context`: expected one of {CONTEXTS}. Received: {context!r}")
    config = get_config(config, steps=steps, batch_size=batch_size, crop_size=crop_size,
                        backbone=backbone, output_stride=output_stride, eval_size=eval_size)
    locations = {"data_dir": data_dir, "manual_dir": manual_dir, "download": download}
    source = load_split(config, config.train_split, **locations)
    load_split(config, config.eval_split, **locations)  # fail now, not after training
    model_dir = pathlib.Path(model_dir or f"runs/segmentation-{config.name}-{context}-seed{seed}")
    model_dir.mkdir(parents=True, exist_ok=True)
    strategy = strategy or get_strategy(tpu, log=log)
    replicas = check_global_batch(config.batch_size, strategy)
    keras.utils.set_random_seed(seed)
    with strategy.scope():
        model = build_model(config, context, replicas, backbone_weights)
        optimizer = sgd(poly_schedule(config), config.momentum, config.weight_decay)
        optimizer.build(model.trainable_variables)
        model.compile(optimizer=optimizer,
                      loss=keras.losses.SparseCategoricalCrossentropy(
                          from_logits=True, ignore_class=IGNORE_LABEL))
    checkpoint = StepCheckpoint(model_dir / "checkpoints", {"model": model, "optimizer": optimizer})
    start = checkpoint.restore(log)
    run = {"config": config.name, "context": context, "seed": seed, "steps": config.steps,
           "batch_size": config.batch_size, "crop_size": config.crop_size, "replicas": replicas,
           "backbone": config.backbone, "output_stride": config.output_stride,
           "eval_size": config.eval_size, "data_dir": data_dir, "manual_dir": manual_dir}
    (model_dir / "run.json").write_text(json.dumps(run, indent=2))
    log(f"{config.backbone} (output stride {config.output_stride}) + {context}: "
        f"{model.count_params():,} parameters; {config.steps} steps of batch {config.batch_size}")
    if start < config.steps:
        steps_per_epoch = steps_per_checkpoint(config.steps, config.checkpoint_every, start)
        callbacks = [checkpoint.callback(steps_per_epoch)]
        board = tensorboard_callback(model_dir / "logs")
        if board is not None:
            callbacks.append(board)
        model.fit(training_batches(config, seed, start, source=source),
                  steps_per_epoch=steps_per_epoch,
                  epochs=config.steps // steps_per_epoch, initial_epoch=start // steps_per_epoch,
                  callbacks=callbacks, verbose=verbose)
    scores = segmentation_scores(model, evaluation_batches(config, **locations),
                                 config.num_classes)
    model.save(model_dir / "model.keras")
    results = dict(run, **scores, params=int(model.count_params()), eval_split=config.eval_split,
                   model_dir=str(model_dir))
    (model_dir / "results.json").write_text(json.dumps(results, indent=2))
    log(f"validation mIoU {scores['miou']:.4f}, pixel accuracy {scores['pixel_accuracy']:.4f} "
        f"({config.dataset} {config.eval_split}, {context}); model: {model_dir / 'model.keras'}")
    results["model"] = model
    return results


def main(argv=None):
    parser = workflow_parser("python -m segmentation.train", __doc__)
    parser.add_argument("--config", default="digits_seg", choices=sorted(CONFIGS))
    parser.add_argument("--context", default="ham_nmf", choices=CONTEXTS)
    parser.add_argument("--steps", type=int, help="training steps (default: per config)")
    parser.add_argument("--batch-size", type=int, help="global batch size")
    parser.add_argument("--crop", type=int, dest="crop_size", help="training crop size")
    parser.add_argument("--backbone", choices=sorted(BACKBONES), help="default: per config")
    parser.add_argument("--output-stride", type=int, choices=(8, 16), help="default: per config")
    parser.add_argument("--eval-size", type=int,
                        help="evaluate images fitted into this square, batched (default: per "
                             "config; none = each image at its own size)")
    add_run_arguments(parser, "checkpoints, model, results (resumes from here)")
    parser.add_argument("--backbone-weights", help="backbone .weights.h5 (default: random init)")
    add_tfds_arguments(parser, data_dir_help=DATA_DIR_HELP)
    args = parser.parse_args(argv)
    train(args.config, args.context, args.steps, args.batch_size, args.crop_size, args.model_dir,
          args.tpu, seed=args.seed, verbose=args.verbose, backbone_weights=args.backbone_weights,
          backbone=args.backbone, output_stride=args.output_stride, eval_size=args.eval_size,
          data_dir=args.data_dir, manual_dir=args.manual_dir, download=args.download)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    raise SystemExit(main())
