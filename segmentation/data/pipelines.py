"""The tf.data pipelines of the workflow: the endless, step-indexed training stream
(:func:`training_batches`) and the held-out split once (:func:`evaluation_batches`)."""

from kctx.data import streaming_batches
from segmentation.data.datasets import load_split
from segmentation.data.transforms import augment, evaluation_image, fit_to_square


def training_batches(config, seed=0, start_step=0, data_dir=None, manual_dir=None,
                     download=False, source=None, input_context=None):
    """The endless, step-indexed training stream of ``config`` from ``start_step``.

    Batches are ``(images (B, crop, crop, 3), labels (B, crop, crop) int32)``;
    batch k is a function of (seed, k) (:func:`kctx.data.streaming_batches`),
    each example decoded after the shuffle and augmented with :func:`augment`
    keyed on (seed, its index) with the config's ``scale_range``, ``train_scale``,
    ``cat_max_ratio`` and ``photometric``. ``source``: the training
    :class:`~segmentation.data.split.Split` if already loaded; ``input_context``: yield
    this input pipeline's per-replica slices (:func:`kctx.data.replica_slices`),
    decoding only those.
    """
    import tensorflow as tf

    source = source or load_split(config, config.train_split, data_dir, manual_dir, download)

    def preprocess(index, example):
        image, label = source.decode(example)
        seed_pair = tf.stack([tf.cast(seed, tf.int64), tf.cast(index, tf.int64)])
        return augment(image, label, seed_pair, config.crop_size, config.scale_range,
                       train_scale=config.train_scale, cat_max_ratio=config.cat_max_ratio,
                       photometric=config.photometric)

    return streaming_batches(source.examples, preprocess, source.num_examples, config.batch_size,
                             seed=seed, start_step=start_step,
                             shuffle_buffer=min(source.num_examples, config.shuffle_buffer),
                             input_context=input_context)


def evaluation_batches(config, batch_size=None, split=None, num_images=None, eval_size=None,
                       data_dir=None, manual_dir=None, download=False, shard=None):
    """The held-out split, every example once (or the first ``num_images``), with labels.

    Images of one size (``digits_seg``) come in batches of ``batch_size``. Others
    come one per batch at their own size (the exact protocol), unless
    ``eval_size`` (default ``config.eval_size``) is set: then each is fitted into
    an eval_size² square (:func:`fit_to_square`) and they are batched. With
    ``config.eval_resize`` the images are resized (:func:`evaluation_image`) and the
    labels keep their size, so the two differ.
    ``shard``: ``(index, count)``, this worker's share of the examples
    (``Dataset.shard``, before decoding).
    """
    import tensorflow as tf

    source = load_split(config, split or config.eval_split, data_dir, manual_dir, download,
                        num_images)
    eval_size = eval_size or config.eval_size
    examples = source.examples
    if shard is not None and shard[1] > 1:
        examples = examples.shard(shard[1], shard[0])
    dataset = examples.map(source.decode, num_parallel_calls=tf.data.AUTOTUNE,
                           deterministic=True)
    if eval_size:
        dataset = dataset.map(lambda image, label: fit_to_square(image, label, eval_size),
                              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    elif config.eval_resize:
        dataset = dataset.map(lambda image, label: (evaluation_image(image, config), label),
                              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if not eval_size and not source.fixed_size:
        batch_size = 1
    return dataset.batch(batch_size or config.batch_size).prefetch(tf.data.AUTOTUNE)
