"""The GAN workflow for :func:`kctx.training.run`: HamGAN's model, data, samples and FID / IS / KID.

``python -m gan.train`` and ``python -m gan.evaluate`` run it. What is the
GAN's own: the ``ConditionalGAN`` (custom ``train_step``, two optimizers,
EMA), the step's noise in the data, sample-grid PNGs during training, and
FID / IS / KID (FCD / classifier score / KID on digits) of the sampling generator
(saved as ``generator.keras``) at the end.
"""

import pathlib

import keras
import numpy as np
import tensorflow as tf

from gan.configs import CONFIGS, get_config
from gan.data import gan_images, tfds_examples, training_batches
from gan.models import build_gan
from kctx.convert import CheckpointMismatchError
from kctx.metrics import GenerativeMetrics
from kctx.training import Workflow


def sample_grid(generator, config, path, seed=0, per_class=10):
    """Save a PNG grid: one column per class (up to 10), ``per_class`` rows."""
    classes = min(config.num_classes, 10)
    z = tf.random.stateless_normal((per_class * classes, config.latent_dim), [seed, 17])
    labels = tf.tile(tf.range(classes, dtype=tf.int32), [per_class])
    inputs = [z.numpy(), labels.numpy()]
    if keras.backend.backend() == "tensorflow":  # eager: no slower than a traced call, once
        images = generator(inputs, training=False)
    else:  # one program: on JAX 2.5 CPU s for the digits G's first grid, eager ops 6.1
        images = generator.predict_on_batch(inputs)
    images = keras.ops.convert_to_numpy(images)
    images = ((images + 1.0) * 127.5).clip(0, 255).astype("uint8")
    size, channels = config.resolution, config.image_channels
    grid = images.reshape(per_class, classes, size, size, channels)
    grid = grid.transpose(0, 2, 1, 3, 4).reshape(per_class * size, classes * size, channels)
    keras.utils.save_img(str(path), grid, scale=False)
    return path


def sampling_generator(gan, config=None):
    """The EMA generator when the run keeps one (and ``config.sample_with_ema``), else G."""
    use_ema = config is None or config.sample_with_ema
    return gan.ema_generator if use_ema and gan.ema_generator is not None else gan.generator


class SampleGrids(keras.callbacks.Callback):
    """A sample grid ``samples_<step>.png`` at the first checkpoint after each multiple
    of ``config.sample_every`` steps (the step is the G optimizer's count)."""

    def __init__(self, run):
        super().__init__()
        self.run, self.previous = run, None

    def on_epoch_end(self, epoch, logs=None):
        step = int(self.model.g_optimizer.iterations.numpy())
        every = min(self.run.config.sample_every, self.run.config.steps)
        if self.previous is not None and step // every > self.previous // every \
                and self.run.chief:
            sample_grid(sampling_generator(self.model, self.run.config), self.run.config,
                        self.run.directory / f"samples_{step:07d}.png", seed=self.run.seed)
        self.previous = step

    def on_train_begin(self, logs=None):
        self.previous = int(self.model.g_optimizer.iterations.numpy())


def default_extractor(config):
    return config.extractor or ("digits_classifier" if config.dataset == "digits"
                                else "fid_inception_v3")


def real_image_batches(config, num_images, batch_size, data_dir=None, manual_dir=None,
                       download=False):
    """Up to ``num_images`` real images of ``config.eval_split``, in file order, batched."""
    dataset = gan_images(config.dataset, config.eval_split, config.resolution,
                         data_dir=data_dir, manual_dir=manual_dir, download=download)
    dataset = dataset.take(num_images).map(lambda example: example["images"])
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def evaluation_metrics(config, extractor=None, extractor_weights=None, fid_weights=None,
                       fid_resize=None, reference=None):
    """The :class:`kctx.metrics.GenerativeMetrics` of a run: FID / IS / KID with the FID
    Inception (FCD / classifier score / KID with the digits classifier), one pass."""
    extractor = extractor or default_extractor(config)
    fid_inception = extractor == "fid_inception_v3"
    weights = (fid_weights or config.fid_weights) if fid_inception else extractor_weights
    return GenerativeMetrics(
        extractor, value_range=(-1, 1), weights=weights,
        resize=(fid_resize or config.fid_resize) if fid_inception else None,
        reference=reference, name="fid" if fid_inception else "generative_metrics",
        # The Inception Score's 10 splits with the FID Inception (the papers'); the
        # digits classifier's score stays one split (as the committed studies report it).
        splits=10 if fid_inception else 1)


def evaluate_generator(generator, config, num_samples=50_000, seed=0, batch_size=200,
                       extractor=None, extractor_weights=None, num_real=None, data_dir=None,
                       manual_dir=None, download=False, log=None, fid_weights=None,
                       fid_resize=None, fid_reference=None):
    """FID / IS / KID (FCD / classifier score / KID on digits) of a generator, one pass.

    Args:
        generator: maps ``[z, labels]`` to images in [-1, 1].
        config: the run's :class:`gan.configs.GANConfig`.
        num_samples: generated images; classes are drawn uniformly.
        extractor: ``"digits_classifier"``, ``"fid_inception_v3"``, ``"inception_v3"``,
            a ``keras.Model`` or ``None`` for the config's default.
        extractor_weights: weights file of the ``inception_v3`` / digits extractors.
        num_real: real images (default: max(num_samples, 10,000), at most the
            whole split; all 1,797 on digits).
        fid_weights, fid_resize: the FID Inception's weights file and resize (default:
            the config's).
        fid_reference: reference statistics (.npz) of the real images: read when the
            file exists, else computed from the real images and written there.

    Returns:
        A dict with ``metric`` ("fid" / "fcd"), ``extractor``, ``value``,
        ``num_samples``, ``num_real``, ``inception_score`` (and ``_std``) or
        ``classifier_score``, ``kid`` (and ``_std``, ``kid_subset_size``) when real
        features are at hand, and for the FID Inception ``resize`` and
        ``weights_sha256``.
    """
    reference = fid_reference or config.fid_reference
    existing = reference if reference and pathlib.Path(reference).exists() else None
    metric = evaluation_metrics(config, extractor, extractor_weights, fid_weights, fid_resize,
                                existing)
    if existing is None:
        for images in real_image_batches(config, num_real or max(num_samples, 10_000),
                                         batch_size, data_dir, manual_dir, download):
            metric.update_state(images, None)
        if reference:
            metric.save_reference(reference)
            if log:
                log(f"reference statistics of {metric.counts()[0]} real images written to "
                    f"{reference}")

    def noise(step, n):
        keys = tf.random.experimental.stateless_split(
            tf.stack([tf.cast(seed, tf.int64), tf.cast(1000 + step, tf.int64)]), 2)
        z = tf.random.stateless_normal((n, config.latent_dim), keys[0])
        labels = tf.random.stateless_uniform((n,), keys[1], 0, config.num_classes, tf.int32)
        return z, labels

    if keras.backend.backend() == "tensorflow":
        @tf.function
        def sample(step, n):
            return generator(list(noise(step, n)), training=False)
    else:  # the same noise from TensorFlow's stateless ops; the generator jitted by Keras
        def sample(step, n):
            z, labels = noise(step, n)
            return generator.predict_on_batch([z.numpy(), labels.numpy()])

    produced = step = 0
    while produced < num_samples:
        n = min(batch_size, num_samples - produced)
        metric.update_state(None, sample(tf.constant(step), n))
        produced += n
        step += 1
        if log and step % 50 == 0:
            log(f"  {produced}/{num_samples} samples")
    return scores_of(metric.result(), num_samples, reference)


def scores_of(values, num_samples, reference=None):
    """The run's result fields from :meth:`GenerativeMetrics.result`."""
    fid_inception = values["extractor"] == "fid_inception_v3"
    result = {"metric": "fcd" if values["extractor"] == "digits_classifier" else "fid",
              "extractor": values["extractor"], "num_samples": num_samples,
              "num_real": values["real_count"]}
    if "frechet_inception_distance" in values:
        result["value"] = values["frechet_inception_distance"]
    else:
        result["evaluation_error"] = values["frechet_inception_distance_error"]
    if "inception_score_mean" in values:
        name = "inception_score" if fid_inception else "classifier_score"
        result[name] = values["inception_score_mean"]
        if fid_inception:
            result["inception_score_std"] = values["inception_score_std"]
    if "kernel_inception_distance_mean" in values:
        result.update(kid=values["kernel_inception_distance_mean"],
                      kid_std=values["kernel_inception_distance_std"],
                      kid_subset_size=values["kid_subset_size"])
    if fid_inception:
        result.update(resize=values["resize"], weights_sha256=values["weights_sha256"])
    if reference:
        result["reference"] = str(reference)
    return result


def format_result(result):
    """One line naming the metrics, the extractor (resize, weights) and the sample counts."""
    if "extractor" not in result:  # nothing scored: no samples, or no extractor weights
        return f"no FID / FCD: {result.get('evaluation_error', 'eval_samples=0')}"
    extractor = result["extractor"]
    if "resize" in result:
        extractor += f", resize {result['resize']}, weights {result['weights_sha256'][:12]}"
    value = (f"{result['value']:.3f}" if "value" in result
             else f"undefined ({result['evaluation_error']})")
    line = (f"{result['metric'].upper()} ({extractor}, {result['num_samples']} "
            f"generated vs {result['num_real']} real): {value}")
    if "inception_score" in result:
        line += (f"; IS {result['inception_score']:.3f} ± "
                 f"{result['inception_score_std']:.3f}")
    if "classifier_score" in result:
        line += f"; classifier score {result['classifier_score']:.3f}"
    if "kid" in result:
        line += f"; KID {result['kid']:.4g} ± {result['kid_std']:.3g}"
    return line


class GANWorkflow(Workflow):
    """HamGAN: a ``ConditionalGAN`` (custom ``train_step``), its noise in the data, sample
    grids, and FID / IS / KID of the sampling generator."""

    name = "gan"
    configs = CONFIGS
    variant_field = "context"
    default_config = "digits"
    model_file = "generator.keras"
    evaluation_fields = ("eval_samples", "eval_real", "extractor", "extractor_weights",
                         "fid_weights", "fid_resize", "fid_reference")

    def get_config(self, name, **overrides):
        return get_config(name, **overrides)

    def variant(self, config):
        return config.context

    def build(self, run):
        return build_gan(run.config)

    def train_data(self, run, start_step, input_context):
        location = run.data
        return training_batches(run.config, run.seed, start_step, location.data_dir,
                                location.manual_dir, location.download,
                                input_context=input_context)

    def check_data(self, run):
        if run.config.dataset != "digits":  # a missing TFDS dataset fails before building
            tfds_examples(run.config.dataset, run.config.train_split, run.config.resolution,
                          run.data.data_dir, run.data.manual_dir, run.data.download)

    def callbacks(self, run, gan):
        return [SampleGrids(run)]

    def checkpoint_objects(self, gan):
        objects = {"generator": gan.generator, "discriminator": gan.discriminator,
                   "g_optimizer": gan.g_optimizer, "d_optimizer": gan.d_optimizer}
        if gan.ema_generator is not None:
            objects["ema_generator"] = gan.ema_generator
        return objects

    def inference_model(self, run, gan):
        return sampling_generator(gan, run.config)

    def example_inputs(self, run, count):
        """Latents z ~ N(0, I) (seeded by the run) and classes 0, 1, 2, ... in turn."""
        config = run.config
        z = np.random.default_rng(run.seed).standard_normal((count, config.latent_dim))
        return [z.astype("float32"), (np.arange(count) % config.num_classes).astype("int32")]

    def evaluate(self, run, generator):
        config = run.config
        results = {"samples": sample_grid(generator, config,
                                          run.directory / "samples_final.png",
                                          seed=run.seed).name}
        if not config.eval_samples:
            return results
        try:
            results.update(evaluate_generator(
                generator, config, config.eval_samples, seed=run.seed,
                num_real=config.eval_real, extractor=default_extractor(config),
                extractor_weights=config.extractor_weights, data_dir=run.data.data_dir,
                manual_dir=run.data.manual_dir, download=run.data.download))
        except (RuntimeError, FileNotFoundError, CheckpointMismatchError) as error:
            # No extractor weights (offline), or a file that is not the extractor's.
            results["evaluation_error"] = str(error)
        return results

    def summary(self, results):
        return f"{format_result(results)}\nsamples: {results['samples']} in the run folder"

    def scores(self, results):
        scores = {results["metric"]: results["value"]} if "value" in results else {}
        for name in ("inception_score", "classifier_score", "kid"):
            if name in results:
                scores[name] = results[name]
        return scores


WORKFLOW = GANWorkflow()
