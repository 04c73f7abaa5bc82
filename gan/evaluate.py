"""``python -m gan.evaluate --model-dir DIR [--num-samples N]``: FID / FCD of a trained generator.

Loads the generator of a ``gan.train`` run (the EMA generator when the run
keeps one) from its newest checkpoint, or from ``generator.keras`` when the
run has finished and kept no checkpoint, draws ``N`` samples (default 50,000
as in the paper) with uniformly sampled classes and compares them with the
config's evaluation split. The extractor is named in every report: the digits
classifier (FCD) for ``digits``, InceptionV3 pool features (FID) otherwise.
"""

import json
import os
import pathlib

import keras
import tensorflow as tf

from gan.configs import get_config
from gan.data import gan_images
from gan.models import build_generator
from kctx.data import add_tfds_arguments
from kctx.training import read_run, workflow_parser


def default_extractor(config):
    return "digits_classifier" if config.dataset == "digits" else "inception_v3"


def real_image_batches(config, num_images, batch_size, data_dir=None, manual_dir=None,
                       download=False):
    """Up to ``num_images`` real images of ``config.eval_split``, in file order, batched."""
    dataset = gan_images(config.dataset, config.eval_split, config.resolution,
                         data_dir=data_dir, manual_dir=manual_dir, download=download)
    dataset = dataset.take(num_images).map(lambda example: example["images"])
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def evaluate_generator(generator, config, num_samples=50_000, seed=0, batch_size=200,
                       extractor=None, extractor_weights=None, num_real=None, data_dir=None,
                       manual_dir=None, download=False, log=None):
    """Fréchet distance (and classifier score when the extractor has a classifier head).

    Args:
        generator: maps ``[z, labels]`` to images in [-1, 1].
        config: the run's :class:`gan.configs.GANConfig`.
        num_samples: generated images; classes are drawn uniformly.
        extractor: ``"digits_classifier"``, ``"inception_v3"``, a ``keras.Model``
            or ``None`` for the config's default.
        extractor_weights: weights file of the extractor (InceptionV3 ``.h5``).
        num_real: real images (default: max(num_samples, 10,000), at most the
            whole split; all 1,797 on digits).

    Returns:
        A dict with ``metric`` ("fid" / "fcd"), ``extractor``, ``value``,
        ``num_samples``, ``num_real`` and, when available, ``classifier_score``.
    """
    from kctx.metrics import ClassifierScore, FrechetInceptionDistance

    metric = FrechetInceptionDistance(extractor or default_extractor(config), value_range=(-1, 1),
                                      weights=extractor_weights)
    has_logits = metric.extractor.logits_model is not None
    score = ClassifierScore(metric.extractor.logits_model.output_shape[-1]) if has_logits else None
    for images in real_image_batches(config, num_real or max(num_samples, 10_000), batch_size,
                                     data_dir,
                                     manual_dir, download):
        metric.update_state(images, None)

    @tf.function
    def sample(step, n):
        keys = tf.random.experimental.stateless_split(
            tf.stack([tf.cast(seed, tf.int64), tf.cast(1000 + step, tf.int64)]), 2)
        z = tf.random.stateless_normal((n, config.latent_dim), keys[0])
        labels = tf.random.stateless_uniform((n,), keys[1], 0, config.num_classes, tf.int32)
        return generator([z, labels], training=False)

    produced = step = 0
    while produced < num_samples:
        n = min(batch_size, num_samples - produced)
        fake = sample(tf.constant(step), n)
        metric.update_state(None, fake)
        if score is not None:
            score.update_state(metric.extractor.logits(keras.ops.cast(fake, "float32")))
        produced += n
        step += 1
        if log and step % 50 == 0:
            log(f"  {produced}/{num_samples} samples")
    result = {
        "metric": metric.name,
        "extractor": metric.extractor_name,
        "value": float(metric.result()),
        "num_samples": num_samples,
        "num_real": metric.counts()[0],
    }
    if score is not None:
        result["classifier_score"] = float(score.result())
    return result


def format_result(result):
    """One line naming the metric, the extractor and the sample counts."""
    line = (f"{result['metric'].upper()} ({result['extractor']}, {result['num_samples']} "
            f"generated vs {result['num_real']} real): {result['value']:.3f}")
    if "classifier_score" in result:
        line += f"; classifier score {result['classifier_score']:.3f}"
    return line


def load_generator(model_dir, checkpoint=None, ema=True):
    """The generator of a ``gan.train`` run, its config and where it came from.

    ``checkpoint``: a checkpoint prefix; default the newest in
    ``model_dir/checkpoints``, else ``model_dir/generator.keras``. With
    ``ema`` the EMA weights are loaded when the run keeps them.
    """
    model_dir = pathlib.Path(model_dir)
    run = read_run(model_dir, "gan.train")
    config = get_config(run["config"])
    checkpoint = checkpoint or tf.train.latest_checkpoint(str(model_dir / "checkpoints"))
    if checkpoint is None:
        final = model_dir / "generator.keras"
        if not final.exists():
            raise FileNotFoundError(f"{model_dir} holds neither a checkpoint nor generator.keras")
        return keras.saving.load_model(final), config, str(final)
    generator = build_generator(config, run["context"])
    names = {name for name, _ in tf.train.list_variables(checkpoint)}
    key = "ema_generator" if ema and any(n.startswith("ema_generator/") for n in names) \
        else "generator"
    tf.train.Checkpoint(**{key: list(generator.variables)}).restore(checkpoint).expect_partial() \
        .assert_existing_objects_matched()
    return generator, config, f"{checkpoint} ({key})"


def main(argv=None):
    parser = workflow_parser("python -m gan.evaluate", __doc__)
    parser.add_argument("--model-dir", required=True, help="a gan.train --model-dir")
    parser.add_argument("--checkpoint", help="checkpoint prefix (default: the newest)")
    parser.add_argument("--num-samples", type=int, default=50_000)
    parser.add_argument("--num-real", type=int,
                        help="real images (default: max(num-samples, 10000), at most the split)")
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-ema", action="store_true", help="score the raw generator")
    parser.add_argument("--extractor", choices=("digits_classifier", "inception_v3"),
                        help="default: digits_classifier for digits, else inception_v3")
    parser.add_argument("--extractor-weights", help="weights file of the extractor")
    add_tfds_arguments(parser)
    parser.add_argument("--output", help="JSON file (default: MODEL_DIR/evaluation.json)")
    args = parser.parse_args(argv)
    generator, config, source = load_generator(args.model_dir, args.checkpoint,
                                               ema=not args.no_ema)
    print(f"generator: {source}")
    result = evaluate_generator(
        generator, config, args.num_samples, seed=args.seed, batch_size=args.batch_size,
        extractor=args.extractor, extractor_weights=args.extractor_weights,
        num_real=args.num_real, data_dir=args.data_dir, manual_dir=args.manual_dir,
        download=args.download, log=print)
    result.update({"config": config.name, "generator": source})
    print(format_result(result))
    output = pathlib.Path(args.output or pathlib.Path(args.model_dir) / "evaluation.json")
    output.write_text(json.dumps(result, indent=2))
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    raise SystemExit(main())
