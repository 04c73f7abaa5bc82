"""``python -m gan.train``: train a class-conditional GAN with a kctx context block.

With no arguments: the ``digits`` config (scikit-learn's real digits, 32×32)
with the Hamburger NMF block, a budget of about 10 minutes on 2 CPU cores,
then the Fréchet classifier distance (FCD) of the generator and a sample
grid PNG. Other configs read TFDS datasets (``--data-dir``, ``--download``) and
report FID with InceptionV3; runs that keep an EMA of G sample and score with
it. Runs resume from ``--model-dir`` where they stopped.
"""

import json
import os
import pathlib

import keras
import tensorflow as tf

from gan.configs import CONFIGS, get_config
from gan.data import training_batches
from gan.evaluate import evaluate_generator, format_result
from gan.model import ConditionalGAN
from gan.models import CONTEXTS, build_discriminator, build_generator
from kctx.data import add_tfds_arguments
from kctx.distribute import get_strategy
from kctx.training import StepCheckpoint, add_run_arguments, steps_per_checkpoint, \
    tensorboard_callback, workflow_parser

def build_gan(config, context, strategy=None):
    """G, D, EMA and both Adam optimizers (TTUR), created in the strategy scope."""
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        gan = ConditionalGAN(
            build_generator(config, context), build_discriminator(config, context),
            ema_decay=config.ema_decay, ema_start=config.ema_start, d_steps=config.d_steps,
        )
        gan.compile(
            keras.optimizers.Adam(config.g_learning_rate, config.beta_1, config.beta_2),
            keras.optimizers.Adam(config.d_learning_rate, config.beta_1, config.beta_2),
        )
    return gan


def sample_grid(generator, config, path, seed=0, per_class=10):
    """Save a PNG grid: one column per class (up to 10), ``per_class`` rows."""
    classes = min(config.num_classes, 10)
    z = tf.random.stateless_normal((per_class * classes, config.latent_dim), [seed, 17])
    labels = tf.tile(tf.range(classes, dtype=tf.int32), [per_class])
    images = keras.ops.convert_to_numpy(generator([z, labels], training=False))
    images = ((images + 1.0) * 127.5).clip(0, 255).astype("uint8")
    size, channels = config.resolution, config.image_channels
    grid = images.reshape(per_class, classes, size, size, channels)
    grid = grid.transpose(0, 2, 1, 3, 4).reshape(per_class * size, classes * size, channels)
    keras.utils.save_img(str(path), grid, scale=False)
    return path


def sampling_generator(gan):
    """The EMA generator when the run keeps one (BigGAN), else the generator."""
    return gan.ema_generator if gan.ema_generator is not None else gan.generator


def checkpoint_variables(gan):
    """Every variable a resume needs, as ordered lists per object (see
    :class:`kctx.training.StepCheckpoint`)."""
    objects = {"generator": gan.generator, "discriminator": gan.discriminator,
               "g_optimizer": gan.g_optimizer, "d_optimizer": gan.d_optimizer}
    if gan.ema_generator is not None:
        objects["ema_generator"] = gan.ema_generator
    return {name: list(obj.variables) for name, obj in objects.items()}


class _Samples(keras.callbacks.Callback):
    """A sample grid at the first epoch end after each multiple of ``every`` steps."""

    def __init__(self, gan, config, directory, every, steps_per_epoch, seed):
        super().__init__()
        self.gan, self.config, self.directory = gan, config, directory
        self.every, self.steps_per_epoch, self.seed = every, steps_per_epoch, seed

    def on_epoch_end(self, epoch, logs=None):
        step = (epoch + 1) * self.steps_per_epoch
        if step // self.every > (step - self.steps_per_epoch) // self.every:
            generator = sampling_generator(self.gan)
            sample_grid(generator, self.config, self.directory / f"samples_{step:07d}.png",
                        seed=self.seed)


def train(config="digits", context="ham_nmf", steps=None, batch_size=None, model_dir=None,
          tpu=None, seed=0, eval_samples=None, verbose=1, checkpoint_every=None, data_dir=None,
          manual_dir=None, download=False, extractor_weights=None, log=print):
    """Train (or resume from ``model_dir``) and evaluate.

    ``data_dir`` / ``manual_dir`` / ``download`` locate TFDS datasets (see
    :func:`kctx.data.tfds_dataset`); ``eval_samples`` generated images are
    scored at the end (default 2,000 on digits, 10,000 otherwise; 0 skips),
    with ``extractor_weights`` for InceptionV3 when not in the Keras cache.

    Returns a dict with the run's results (also written to results.json) and
    the trained ``ConditionalGAN`` under ``"model"``.
    """
    if context not in CONTEXTS:
        raise ValueError(f"Unknown `context`: expected one of {CONTEXTS}. Received: {context!r}")
    try:  # checked before training, not when the first sample grid is written
        import PIL.Image  # noqa: F401
    except ImportError:
        raise ImportError("gan.train writes sample grids with Pillow: pip install 'kctx[gan]'")
    config = get_config(config, batch_size=batch_size)
    steps = int(steps or config.steps)
    model_dir = pathlib.Path(model_dir or f"runs/{config.name}-{context}-seed{seed}")
    model_dir.mkdir(parents=True, exist_ok=True)
    strategy = get_strategy(tpu, log=log)
    keras.utils.set_random_seed(seed)
    gan = build_gan(config, context, strategy)

    checkpoint = StepCheckpoint(model_dir / "checkpoints", checkpoint_variables(gan))
    start = checkpoint.restore(log)
    (model_dir / "run.json").write_text(json.dumps(
        {"config": config.name, "context": context, "seed": seed, "steps": steps,
         "batch_size": config.batch_size}, indent=2))

    # Keras epochs are the checkpoint interval; a resumed run keeps its
    # checkpoint step on an epoch boundary.
    steps_per_epoch = steps_per_checkpoint(steps, checkpoint_every or config.checkpoint_every,
                                           start)
    board = tensorboard_callback(model_dir / "logs")
    if start < steps:
        callbacks = [
            checkpoint.callback(steps_per_epoch),
            _Samples(gan, config, model_dir, min(config.sample_every, steps), steps_per_epoch,
                     seed),
        ]
        if board is not None:
            callbacks.append(board)
        gan.fit(
            training_batches(config, seed, start, data_dir, manual_dir, download),
            steps_per_epoch=steps_per_epoch, epochs=steps // steps_per_epoch,
            initial_epoch=start // steps_per_epoch,
            callbacks=callbacks, verbose=verbose, shuffle=False,
        )
    generator = sampling_generator(gan)
    grid = sample_grid(generator, config, model_dir / "samples_final.png", seed=seed)
    generator.save(model_dir / "generator.keras")
    results = {"config": config.name, "context": context, "steps": steps, "seed": seed,
               "samples": str(grid), "model_dir": str(model_dir)}
    if eval_samples != 0:
        default_samples = 2000 if config.dataset == "digits" else 10_000
        try:
            evaluation = evaluate_generator(
                generator, config, eval_samples or default_samples, seed=seed,
                extractor_weights=extractor_weights, data_dir=data_dir, manual_dir=manual_dir)
        except RuntimeError as error:  # the InceptionV3 weights are not available offline
            log(f"evaluation skipped: {error}")
            results["evaluation_error"] = str(error)
        else:
            results.update(evaluation)
            log(format_result(evaluation))
            if board is not None:
                with tf.summary.create_file_writer(str(model_dir / "logs" / "eval")).as_default():
                    tf.summary.scalar(evaluation["metric"], evaluation["value"], step=steps)
    (model_dir / "results.json").write_text(json.dumps(results, indent=2))
    log(f"samples: {grid}")
    results["model"] = gan
    return results


def main(argv=None):
    parser = workflow_parser("python -m gan.train", __doc__)
    parser.add_argument("--config", default="digits", choices=sorted(CONFIGS))
    parser.add_argument("--context", default="ham_nmf", choices=CONTEXTS)
    parser.add_argument("--steps", type=int, help="total training steps (default: per config)")
    parser.add_argument("--batch-size", type=int, help="global batch size")
    add_run_arguments(parser, "checkpoints, samples, results (resumes from here)")
    parser.add_argument("--eval-samples", type=int, help="generated samples for FCD (0: skip)")
    add_tfds_arguments(parser)
    parser.add_argument("--extractor-weights", help="InceptionV3 weights file for the final FID")
    args = parser.parse_args(argv)
    train(args.config, args.context, args.steps, args.batch_size, args.model_dir, args.tpu,
          args.seed, args.eval_samples, args.verbose, data_dir=args.data_dir,
          manual_dir=args.manual_dir, download=args.download,
          extractor_weights=args.extractor_weights)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    raise SystemExit(main())
