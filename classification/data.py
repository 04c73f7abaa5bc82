"""Classification input pipelines: ``(images, labels)`` batches in [-1, 1] for ``fit``.

Training batches form an endless stream in which batch k is a function of
(seed, k) (:func:`kctx.data.streaming_batches`): epoch e is shuffled with a
seed of its own, and each example's random crop and flip are stateless ops
keyed on (seed, the example's index in the stream), so a resumed run sees
exactly the batches the uninterrupted one would. Evaluation batches are the
held-out split in file order, centre-cropped, every example once.
"""

import numpy as np
import tensorflow as tf

from kctx.data import (
    array_examples,
    decode_rgb,
    digits,
    sharded_examples,
    streaming_batches,
    tfds_image_examples,
)


def split_examples(config, split, data_dir=None, manual_dir=None, download=False):
    """``(examples, count, lookup)``: ``lookup(example)`` is an example's
    ``{"image", "label"}``: digits as RGB floats (the examples are indices,
    :func:`kctx.data.array_examples`), TFDS still encoded (the examples themselves)."""
    if config.dataset == "digits":
        images, labels = digits(split, image_size=config.image_size)
        images = np.repeat(images, 3, axis=-1)  # grey → RGB, as the models expect
        examples, lookup = array_examples({"image": images, "label": labels})
        return examples, len(labels), lookup
    examples, count = tfds_image_examples(config.dataset, split, data_dir, manual_dir, download)
    return examples, count, lambda example: example


def _to_unit_range(image):
    """uint8 pixels → float32 in [-1, 1]; float images (digits) are already there."""
    if image.dtype == tf.uint8:
        return tf.cast(image, tf.float32) / 127.5 - 1.0
    return tf.cast(image, tf.float32)


def _resized(config, example):
    image = example["image"]
    if image.dtype == tf.string:
        image = decode_rgb(image)
    image = _to_unit_range(image)
    if config.resize:
        image = tf.image.resize(image, (config.resize, config.resize), method="bilinear",
                                antialias=True)
    return image


def train_preprocess(config, seed=0):
    """``fn(index, example) -> (image, label)``: resize, pad, random crop, random flip.

    The crop offset and the flip of the example at stream position ``index``
    are drawn with stateless ops keyed on ``(seed, index)``.
    """
    def preprocess(index, example):
        image = _resized(config, example)
        if config.pad:
            pad = config.pad
            image = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]], constant_values=-1.0)
        keys = tf.random.experimental.stateless_split(
            tf.stack([tf.cast(seed, tf.int64), tf.cast(index, tf.int64)]), num=2)
        size = config.image_size
        image = tf.image.stateless_random_crop(image, (size, size, 3), seed=keys[0])
        if config.flip:
            image = tf.image.stateless_random_flip_left_right(image, seed=keys[1])
        return tf.clip_by_value(image, -1.0, 1.0), tf.cast(example["label"], tf.int32)

    return preprocess


def eval_preprocess(config):
    """``fn(example) -> (image, label)``: resize, then the central ``image_size`` square."""
    def preprocess(example):
        image = _resized(config, example)
        shape = tf.shape(image)
        size = config.image_size
        image = tf.image.crop_to_bounding_box(image, (shape[0] - size) // 2,
                                              (shape[1] - size) // 2, size, size)
        image = tf.ensure_shape(tf.clip_by_value(image, -1.0, 1.0), (size, size, 3))
        return image, tf.cast(example["label"], tf.int32)

    return preprocess


def training_batches(config, seed=0, start_step=0, data_dir=None, manual_dir=None,
                     download=False, shuffle_buffer=10_000, input_context=None):
    """The endless training stream of ``config`` from ``start_step``, and its epoch length.

    Returns:
        ``(dataset, steps_per_epoch)``: batches ``(images (B, S, S, 3)
        float32, labels (B,) int32)`` with static shapes (with an
        ``input_context``: this input pipeline's per-replica slices, see
        :func:`kctx.data.replica_slices`); an epoch is ``num_examples //
        batch_size`` steps.
    """
    examples, count, lookup = split_examples(config, config.train_split, data_dir, manual_dir,
                                             download)
    steps_per_epoch = count // config.batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"`batch_size` must not exceed the {count} training examples of "
                         f"{config.dataset}. Received: batch_size={config.batch_size}")
    preprocess = train_preprocess(config, seed)
    stream = streaming_batches(examples, lambda index, example: preprocess(index, lookup(example)),
                               count, config.batch_size, seed=seed, start_step=start_step,
                               shuffle_buffer=min(shuffle_buffer, count),
                               input_context=input_context)
    return stream, steps_per_epoch


def evaluation_batches(config, batch_size=None, data_dir=None, manual_dir=None,
                       download=False, split=None, input_context=None):
    """The held-out split (``config.eval_split``), centre-cropped, every example once.

    Yields ``(images, labels, weights)``: the split is padded with weight-0
    blank images so that every replica of every input pipeline gets equally
    many equal batches (:func:`kctx.data.sharded_examples`); weighted top-k
    accuracies are then exact, and the mean loss of the last batch counts the
    padding in its denominator. ``batch_size`` (default
    ``config.eval_batch_size`` or ``config.batch_size``) is the global batch.
    """
    examples, count, lookup = split_examples(config, split or config.eval_split, data_dir,
                                             manual_dir, download)
    preprocess = eval_preprocess(config)
    blank = (tf.fill((config.image_size, config.image_size, 3), -1.0), tf.constant(0))
    size = batch_size or config.eval_batch_size or config.batch_size
    batches = sharded_examples(examples, count, size, blank, input_context,
                               preprocess=lambda example: preprocess(lookup(example)))
    return batches.prefetch(tf.data.AUTOTUNE)
