"""GAN input pipelines: images in [-1, 1] with labels, plus each step's noise as data.

A training batch is a dict ``{"images", "labels", "z_d", "labels_d", "z_g",
"labels_g"}``: the latent noise and sampled class labels for the D and G steps
come with the data, drawn with stateless random ops keyed on (seed, step). A
step is then the same function of the global batch on 1 or N replicas, and a
run is a deterministic function of its seed.
"""

import numpy as np
import tensorflow as tf

from kctx.data import digits, tfds_dataset


def _noise(step, seed, batch_size, latent_dim, num_classes):
    keys = tf.random.experimental.stateless_split(
        tf.stack([tf.cast(seed, tf.int64), tf.cast(step, tf.int64)]), num=4
    )
    return {
        "z_d": tf.random.stateless_normal((batch_size, latent_dim), keys[0]),
        "z_g": tf.random.stateless_normal((batch_size, latent_dim), keys[1]),
        "labels_d": tf.random.stateless_uniform((batch_size,), keys[2], minval=0,
                                                maxval=num_classes, dtype=tf.int32),
        "labels_g": tf.random.stateless_uniform((batch_size,), keys[3], minval=0,
                                                maxval=num_classes, dtype=tf.int32),
    }


def in_memory_batches(images, labels, batch_size, latent_dim, num_classes, seed=0,
                      start_step=0):
    """Training batches from in-memory arrays; batch k is a pure function of (seed, k).

    Epoch e visits the examples in the order of a stateless permutation keyed
    on (seed, e) (the last partial batch of an epoch is dropped), so the
    stream does not depend on how many times the dataset is iterated (Keras
    iterates once more to build a model under a strategy) and resuming at
    ``start_step`` starts exactly there, in O(1).
    """
    images = tf.constant(np.asarray(images, np.float32))
    labels = tf.constant(np.asarray(labels, np.int32))
    count = int(images.shape[0])
    steps_per_epoch = count // batch_size
    if steps_per_epoch < 1:
        raise ValueError(
            f"batch_size={batch_size} is larger than the dataset ({count} examples)"
        )

    def batch_at(step):
        epoch = step // steps_per_epoch
        position = step % steps_per_epoch
        order = tf.random.experimental.stateless_shuffle(
            tf.range(count), seed=tf.stack([tf.cast(seed, tf.int64) + 7919, epoch])
        )
        index = order[position * batch_size:(position + 1) * batch_size]
        batch = {"images": tf.gather(images, index), "labels": tf.gather(labels, index)}
        batch.update(_noise(step, seed, batch_size, latent_dim, num_classes))
        return batch

    dataset = tf.data.Dataset.range(start_step, 2**62)
    return dataset.map(batch_at, num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=True).prefetch(tf.data.AUTOTUNE)


SHUFFLE_PERIOD = 64  # distinct epoch orders of a streaming pipeline; then they repeat


def streaming_batches(examples, preprocess, num_examples, batch_size, latent_dim, num_classes,
                      seed=0, start_step=0, shuffle_buffer=10_000):
    """Training batches from a large ``tf.data`` dataset (TFDS), batch k a function of (seed, k).

    Args:
        examples: dataset of light (still encoded) examples, read in a fixed order.
        preprocess: maps one example to ``{"images", "labels"}`` with static shapes.
        num_examples: examples per epoch.

    Epoch e is ``examples`` shuffled with a buffer whose seed is the int
    ``seed · 1,000,003 + (e mod 64)`` (combined with the global seed, as
    tf.data does), so every iteration of the returned dataset yields the same
    stream, and a resume at ``start_step`` skips at most one epoch of encoded
    records (the images are decoded after the skip).
    """
    start_epoch, offset = divmod(start_step * batch_size, num_examples)
    # One shuffle per epoch with a Python-int seed (tf.data rejects tensor seeds
    # once a global seed is set), built for one period and repeated.
    order = [(start_epoch + i) % SHUFFLE_PERIOD for i in range(SHUFFLE_PERIOD)]
    epochs = [examples.shuffle(shuffle_buffer, seed=seed * 1_000_003 + e,
                               reshuffle_each_iteration=False) for e in order]
    stream = _concatenate(epochs).repeat().skip(offset)
    stream = stream.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    stream = stream.batch(batch_size, drop_remainder=True)

    def attach(step, batch):
        batch = dict(batch)
        batch.update(_noise(step, seed, batch_size, latent_dim, num_classes))
        return batch

    stream = tf.data.Dataset.zip(tf.data.Dataset.range(start_step, 2**62), stream)
    stream = stream.map(attach, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return stream.prefetch(tf.data.AUTOTUNE)


def _concatenate(datasets):
    """Concatenate as a balanced tree, so no element passes through more than log₂(n) levels."""
    if len(datasets) == 1:
        return datasets[0]
    middle = len(datasets) // 2
    return _concatenate(datasets[:middle]).concatenate(_concatenate(datasets[middle:]))


def center_crop_resize(image, resolution):
    """Central square crop (side min(H, W)), antialiased resize, scaled to [-1, 1].

    SAGAN's ImageNet 128×128 preprocessing; a no-op resize when the crop is
    already ``resolution`` (CIFAR-10 at 32).
    """
    shape = tf.shape(image)
    height, width = shape[0], shape[1]
    side = tf.minimum(height, width)
    image = tf.image.crop_to_bounding_box(image, (height - side) // 2, (width - side) // 2,
                                          side, side)
    image = tf.image.resize(tf.cast(image, tf.float32), (resolution, resolution),
                            method="bilinear", antialias=True)
    image = tf.clip_by_value(image / 127.5 - 1.0, -1.0, 1.0)
    image.set_shape((resolution, resolution, image.shape[-1]))
    return image


def tfds_examples(name, split, resolution, data_dir=None, manual_dir=None, download=False):
    """A TFDS image dataset as encoded examples, their decoder and the epoch size.

    Returns ``(examples, preprocess, num_examples)``: ``examples`` holds the
    undecoded image bytes and the class label (0 for datasets without one,
    e.g. ``celeb_a``); ``preprocess`` decodes to RGB, centre-crops and resizes
    to ``resolution`` and returns ``{"images": float32 (R, R, 3) in [-1, 1],
    "labels": int32}``.
    """
    import tensorflow_datasets as tfds

    dataset, info = tfds_dataset(name, split, data_dir=data_dir, manual_dir=manual_dir,
                                 download=download,
                                 decoders={"image": tfds.decode.SkipDecoding()})

    def light(example):
        label = example["label"] if "label" in example else tf.zeros((), tf.int64)
        return {"image": example["image"], "label": tf.cast(label, tf.int32)}

    def preprocess(example):
        image = tf.io.decode_image(example["image"], channels=3, expand_animations=False)
        return {"images": center_crop_resize(image, resolution), "labels": example["label"]}

    examples = dataset.map(light, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    try:
        num_examples = int(info.splits[split].num_examples)
    except (KeyError, ValueError, TypeError):
        num_examples = 0
    if num_examples <= 0:
        num_examples = int(examples.cardinality())
    if num_examples <= 0:
        num_examples = int(examples.reduce(0, lambda count, _: count + 1))
    return examples, preprocess, num_examples


def gan_images(name, split, resolution, data_dir=None, manual_dir=None, download=False):
    """Decoded ``{"images", "labels"}`` examples of ``name`` in file order (for FID, inspection)."""
    if name == "digits":
        images, labels = digits(split, image_size=resolution)
        return tf.data.Dataset.from_tensor_slices({"images": images, "labels": labels})
    examples, preprocess, _ = tfds_examples(name, split, resolution, data_dir, manual_dir,
                                            download)
    return examples.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def digits_batches(batch_size, latent_dim, num_classes=10, seed=0, start_step=0, split="all",
                   image_size=32):
    """The embedded default: scikit-learn digits (1,797 real scans) at 32×32 in [-1, 1]."""
    images, labels = digits(split, image_size=image_size)
    return in_memory_batches(images, labels, batch_size, latent_dim, num_classes, seed=seed,
                             start_step=start_step)


def training_batches(config, seed=0, start_step=0, data_dir=None, manual_dir=None,
                     download=False):
    """The training stream of ``config`` (a :class:`gan.configs.GANConfig`) from ``start_step``."""
    if config.dataset == "digits":
        return digits_batches(config.batch_size, config.latent_dim, config.num_classes,
                              seed=seed, start_step=start_step, split=config.train_split,
                              image_size=config.resolution)
    examples, preprocess, num_examples = tfds_examples(
        config.dataset, config.train_split, config.resolution, data_dir, manual_dir, download)
    return streaming_batches(examples, preprocess, num_examples, config.batch_size,
                             config.latent_dim, config.num_classes, seed=seed,
                             start_step=start_step)


def add_data_arguments(parser):
    """The TFDS location flags shared by ``gan.train`` and ``gan.evaluate``."""
    parser.add_argument("--data-dir", help="TFDS data directory (cifar10, celeb_a, imagenet2012)")
    parser.add_argument("--manual-dir", help="TFDS manual download directory (ImageNet archives)")
    parser.add_argument("--download", action="store_true",
                        help="download and prepare the TFDS dataset when it is not prepared")
