"""``python -m sequence.train --task adding --length 1024 --model psf``: train and report accuracy.

Trains the authors' PSF-Attn network (``--model psf``) or their Transformer
baseline of the same embedding width (``--model transformer``) on the Adding
or Temporal Order task of Khalitov et al. (Sec. 5.2) with Adam (lr 1e-3,
batch 40, the paper's settings), on fresh batches generated from (seed,
step), with a Keras progress bar. ``--task listops|text|image|pathfinder`` trains on a Long Range Arena
task instead (Sec. 5.3; local files or TFDS under ``--data-dir``, scored on
its test split). Every ``--eval-every`` steps the model is scored on 5,000 held-out
sequences; training stops at ``--steps`` or once the held-out accuracy
reaches ``--target-accuracy``. Writes ``results.json`` (the JSON record),
``history.csv`` and ``model.keras`` to the run directory.
"""

import json
import os
import pathlib
import time

import keras

from kctx.distribute import get_strategy
from kctx.training import add_run_arguments, workflow_parser
from kctx.models.sequence import psf_sequence_model, transformer_sequence_model
from kctx.data import add_tfds_arguments
from sequence.data import ADDING_TOLERANCE, LRA_TASKS, TASKS, TEMPORAL_ORDER_CLASSES, held_out, \
    lra_dataset, training_stream

MODELS = ("psf", "transformer")
ALL_TASKS = TASKS + tuple(LRA_TASKS)


@keras.saving.register_keras_serializable(package="sequence")
def adding_accuracy(y_true, y_pred):
    """1 where |ŷ − y| < 0.04 (the paper's criterion for the Adding problem), else 0."""
    error = keras.ops.abs(keras.ops.cast(y_true, y_pred.dtype) - y_pred)
    return keras.ops.cast(error < ADDING_TOLERANCE, "float32")


def build_model(task, model, length, embed_dim=32, num_blocks=1, hidden_units=32, num_heads=1,
                pooling="flatten", value_units=8, residual="factor"):
    """The ``model`` network for ``task`` at ``length``, compiled (Adam 1e-3).

    As the authors' code: a position embedding for token tasks, none for
    Adding (real-valued (a, b) pairs through a linear embedding)."""
    if model not in MODELS:
        raise ValueError(f"Unknown `model`: expected one of {MODELS}. Received: {model!r}")
    if task == "adding":
        data = dict(input_dim=2, outputs=1)
        loss, metric = "mse", keras.metrics.MeanMetricWrapper(adding_accuracy, name="accuracy")
    else:
        vocab_size, classes = ((6, TEMPORAL_ORDER_CLASSES) if task == "temporal_order"
                               else LRA_TASKS[task][1:])
        data = dict(vocab_size=vocab_size, outputs=classes)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        metric = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
    common = dict(seq_len=length, embed_dim=embed_dim, num_blocks=num_blocks, pooling=pooling,
                  positions=task != "adding", **data)
    network = (psf_sequence_model(hidden_units=hidden_units, value_units=value_units,
                                  residual=residual, **common)
               if model == "psf"
               else transformer_sequence_model(num_heads=num_heads, **common))
    network.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss, metrics=[metric])
    return network


class _StopAtAccuracy(keras.callbacks.Callback):
    def __init__(self, target):
        super().__init__()
        self.target = target

    def on_epoch_end(self, epoch, logs=None):
        if self.target and (logs or {}).get("val_accuracy", 0.0) >= self.target:
            self.model.stop_training = True


class _Seconds(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs["seconds"] = time.perf_counter() - self.start


def train(task="adding", model="psf", length=1024, steps=1500, batch_size=40, eval_every=250,
          target_accuracy=0.99, embed_dim=32, num_blocks=1, hidden_units=32, num_heads=1,
          eval_examples=5000, seed=0, model_dir=None, tpu=None, strategy=None, verbose=1,
          data_dir=None, download=False, pooling="flatten", value_units=8, residual="factor",
          log=print):
    """Train ``model`` on ``task``; returns the JSON record (with the model under ``"model"``).

    The record holds the task, model, length, parameters, steps trained,
    wall-clock seconds, the held-out accuracy and loss after each evaluation,
    and the final held-out accuracy. LRA tasks (``listops``, ``text``,
    ``image``, ``pathfinder``) use their fixed length and are scored on the
    first ``eval_examples`` of their test split (all with 0); ``data_dir`` /
    ``download`` locate them (:mod:`sequence.data`).
    """
    if task not in ALL_TASKS:
        raise ValueError(f"Unknown `task`: expected one of {ALL_TASKS}. Received: task={task!r}")
    if task in LRA_TASKS:
        length = LRA_TASKS[task][0]
        training = (lra_dataset(task, "train", data_dir, download)
                    .shuffle(10_000, seed=seed).repeat().batch(batch_size, drop_remainder=True)
                    .prefetch(2))
        validation = lra_dataset(task, "test", data_dir, download).batch(100)
        if eval_examples:
            validation = validation.take(max(1, eval_examples // 100))
    else:
        training = training_stream(task, length, batch_size, seed)
        validation = held_out(task, length, eval_examples, seed=seed)
    model_dir = pathlib.Path(model_dir or f"runs/sequence-{task}-{length}-{model}-seed{seed}")
    model_dir.mkdir(parents=True, exist_ok=True)
    strategy = strategy or get_strategy(tpu, log=log)
    keras.utils.set_random_seed(seed)
    with strategy.scope():
        network = build_model(task, model, length, embed_dim, num_blocks, hidden_units,
                              num_heads, pooling, value_units, residual)
    log(f"{model} on {task} (length {length}): {network.count_params():,} parameters; up to "
        f"{steps} steps of batch {batch_size}, held-out accuracy every {eval_every} steps")
    started = time.perf_counter()
    history = network.fit(
        training, steps_per_epoch=eval_every,
        epochs=max(1, steps // eval_every), validation_data=validation, verbose=verbose,
        callbacks=[_Seconds(), _StopAtAccuracy(target_accuracy),
                   keras.callbacks.CSVLogger(str(model_dir / "history.csv"))])
    seconds = time.perf_counter() - started
    scores = network.evaluate(validation, verbose=0, return_dict=True)
    network.save(model_dir / "model.keras")
    record = {"task": task, "model": model, "length": length, "seed": seed, "pooling": pooling,
              "residual": residual if model == "psf" else None,
              "params": int(network.count_params()), "batch_size": batch_size,
              "steps": int(network.optimizer.iterations.numpy()), "seconds": round(seconds, 1),
              "accuracy": float(scores["accuracy"]), "loss": float(scores["loss"]),
              "val_accuracy": [float(v) for v in history.history["val_accuracy"]],
              "eval_examples": eval_examples, "target_accuracy": target_accuracy,
              "model_dir": str(model_dir)}
    (model_dir / "results.json").write_text(json.dumps(record, indent=2))
    log(f"held-out accuracy {record['accuracy']:.4f} ({task}, length {length}, {model}) after "
        f"{record['steps']} steps, {record['seconds']:.0f} s; record: {model_dir / 'results.json'}")
    record["model"] = network
    return record


def main(argv=None):
    parser = workflow_parser("python -m sequence.train", __doc__)
    parser.add_argument("--task", default="adding", choices=ALL_TASKS)
    parser.add_argument("--model", default="psf", choices=MODELS)
    parser.add_argument("--length", type=int, default=1024,
                        help="sequence length n (synthetic tasks; LRA tasks have their own)")
    parser.add_argument("--steps", type=int, default=1500,
                        help="most training steps (PSF-Attn reaches 99%% on Adding at length "
                             "1024 in about 1,000, 3 minutes on 2 CPU cores)")
    parser.add_argument("--batch-size", type=int, default=40)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--target-accuracy", type=float, default=0.99,
                        help="stop once the held-out accuracy reaches this (0: never)")
    parser.add_argument("--embed-dim", type=int, default=32)
    parser.add_argument("--num-blocks", type=int, default=1)
    parser.add_argument("--hidden-units", type=int, default=32, help="PSF-Attn MLP width")
    parser.add_argument("--value-units", type=int, default=8, help="PSF-Attn V channels")
    parser.add_argument("--residual", default="factor", choices=("factor", "output", "none"),
                        help="PSF-Attn: add V after every factor (the authors' code), once "
                             "to the output, or not at all")
    parser.add_argument("--num-heads", type=int, default=1, help="Transformer heads")
    parser.add_argument("--pooling", default="flatten", choices=("flatten", "cls"),
                        help="all positions into the head, or a prepended [CLS] token's output")
    parser.add_argument("--eval-examples", type=int, default=5000)
    add_run_arguments(parser, "where results.json, history.csv, model.keras go")
    add_tfds_arguments(parser, data_dir_help="LRA: the directory holding lra_release/ (ListOps, "
                                             "Pathfinder) or the TFDS data directory (Text, Image)")
    args = parser.parse_args(argv)
    options = vars(args)
    options.pop("manual_dir")  # no LRA task needs TFDS manual downloads
    options["residual"] = None if args.residual == "none" else args.residual
    train(**options)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    raise SystemExit(main())
