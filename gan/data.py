"""GAN input pipelines: images in [-1, 1] with labels, plus each step's noise as data.

A training batch is a dict ``{"images", "labels", "z_d", "labels_d", "z_g",
"labels_g"}``: the latent noise and sampled class labels for the D and G steps
come with the data, drawn with stateless random ops keyed on (seed, step). A
step is then the same function of the global batch on 1 or N replicas, and a
run is a deterministic function of its seed.
"""

import numpy as np
import tensorflow as tf

from kctx.data import digits


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


def streaming_batches(dataset, batch_size, latent_dim, num_classes, seed=0, start_step=0,
                      shuffle_buffer=10_000):
    """Training batches from a (large) ``tf.data`` dataset of {"images", "labels"}.

    Shuffled with a seeded buffer, repeated, batched with static shapes; the
    noise is keyed on the step. Resuming skips ``start_step`` batches. Unlike
    :func:`in_memory_batches`, a second iterator over the same dataset object
    sees a different order (``reshuffle_each_iteration``).
    """
    dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.repeat().batch(batch_size, drop_remainder=True).enumerate()

    def attach(step, batch):
        batch = dict(batch)
        batch.update(_noise(step, seed, batch_size, latent_dim, num_classes))
        return batch

    dataset = dataset.map(attach, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if start_step:
        dataset = dataset.skip(start_step)
    return dataset.prefetch(tf.data.AUTOTUNE)


def digits_batches(batch_size, latent_dim, num_classes=10, seed=0, start_step=0, split="all",
                   image_size=32):
    """The embedded default: scikit-learn digits (1,797 real scans) at 32×32 in [-1, 1]."""
    images, labels = digits(split, image_size=image_size)
    return in_memory_batches(images, labels, batch_size, latent_dim, num_classes, seed=seed,
                             start_step=start_step)
