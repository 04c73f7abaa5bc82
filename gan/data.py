"""GAN input pipelines: images in [-1, 1] with labels, plus each step's noise as data.

A training batch is a dict ``{"images", "labels", "z_d", "labels_d", "z_g",
"labels_g"}``: the latent noise and sampled class labels for the D and G steps
come with the data, drawn with stateless random ops keyed on (seed, step). A
step is then the same function of the global batch on 1 or N replicas, and a
run is a deterministic function of its seed.
"""

import numpy as np
import tensorflow as tf

from kctx.data import decode_rgb, digits, indexed_batches, tfds_image_examples
from kctx.data import streaming_batches as kctx_streaming_batches


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


def _attach_noise(seed, batch_size, latent_dim, num_classes):
    """``transform(step, batch, offset)``: the batch with its examples' slice of the
    global batch's noise (drawn for the whole global batch, so every replica slice
    gets the noise the one-device step would give those examples)."""
    def attach(step, batch, offset):
        batch = dict(batch)
        size = batch["labels"].shape[0] or tf.shape(batch["labels"])[0]  # static if known
        index = tf.cast(offset, tf.int32) + tf.range(size)
        for key, value in _noise(step, seed, batch_size, latent_dim, num_classes).items():
            batch[key] = tf.gather(value, index)
        return batch

    return attach


def in_memory_batches(images, labels, batch_size, latent_dim, num_classes, seed=0,
                      start_step=0, input_context=None):
    """Training batches from in-memory arrays; batch k is a pure function of (seed, k).

    The images and labels of :func:`kctx.data.indexed_batches` (an exact,
    O(1) resume at ``start_step``; per-replica slices with an
    ``input_context``) with the step's noise attached.
    """
    return indexed_batches(
        {"images": np.asarray(images, np.float32), "labels": np.asarray(labels, np.int32)},
        batch_size, seed=seed, start_step=start_step, input_context=input_context,
        transform=_attach_noise(seed, batch_size, latent_dim, num_classes))


def streaming_batches(examples, preprocess, num_examples, batch_size, latent_dim, num_classes,
                      seed=0, start_step=0, shuffle_buffer=10_000, input_context=None):
    """Training batches from a large ``tf.data`` dataset (TFDS), batch k a function of (seed, k).

    :func:`kctx.data.streaming_batches` (epoch-seeded shuffles, a resume
    that skips at most one epoch of encoded records, each host decoding only
    its slices) with the step's noise attached; ``preprocess(example)``
    decodes one example.
    """
    return kctx_streaming_batches(
        examples, lambda index, example: preprocess(example), num_examples, batch_size,
        seed=seed, start_step=start_step, shuffle_buffer=shuffle_buffer,
        input_context=input_context,
        transform=_attach_noise(seed, batch_size, latent_dim, num_classes))


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
    examples, num_examples = tfds_image_examples(name, split, data_dir, manual_dir, download)

    def preprocess(example):
        return {"images": center_crop_resize(decode_rgb(example["image"]), resolution),
                "labels": example["label"]}

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
                   image_size=32, input_context=None):
    """The embedded default: scikit-learn digits (1,797 real scans) at 32×32 in [-1, 1]."""
    images, labels = digits(split, image_size=image_size)
    return in_memory_batches(images, labels, batch_size, latent_dim, num_classes, seed=seed,
                             start_step=start_step, input_context=input_context)


def training_batches(config, seed=0, start_step=0, data_dir=None, manual_dir=None,
                     download=False, input_context=None):
    """The training stream of ``config`` (a :class:`gan.configs.GANConfig`) from
    ``start_step`` (this input pipeline's per-replica slices with an ``input_context``)."""
    if config.dataset == "digits":
        return digits_batches(config.batch_size, config.latent_dim, config.num_classes,
                              seed=seed, start_step=start_step, split=config.train_split,
                              image_size=config.resolution, input_context=input_context)
    examples, preprocess, num_examples = tfds_examples(
        config.dataset, config.train_split, config.resolution, data_dir, manual_dir, download)
    return streaming_batches(examples, preprocess, num_examples, config.batch_size,
                             config.latent_dim, config.num_classes, seed=seed,
                             start_step=start_step, input_context=input_context)
