"""The embedded default dataset: scikit-learn's handwritten digits.

1,797 real 8×8 grey-scale scans (UCI ML hand-written digits), shipped inside
the scikit-learn wheel, so kctx's default workflows run offline.
"""

import pathlib

import numpy as np

__all__ = ["array_examples", "DatasetNotFoundError", "decode_rgb", "digits", "DIGITS_SPLIT_SEED",
           "DIGITS_TRAIN_FRACTION", "indexed_batches", "replica_batches", "replica_slices",
           "sharded_examples", "SHUFFLE_PERIOD", "streaming_batches", "tfds_dataset",
           "tfds_encoded_examples", "tfds_image_examples"]

DIGITS_TRAIN_FRACTION = 0.8
DIGITS_SPLIT_SEED = 0


def digits(split="train", image_size=32):
    """Digits as float32 images in [-1, 1] and int32 labels.

    Args:
        split: ``"train"`` (80%, 1,438 images), ``"test"`` (the other 359) or
            ``"all"``; a fixed seeded permutation, so the split never changes.
        image_size: side of the returned square images (bilinear resize from
            8×8; 8 keeps the originals).

    Returns:
        ``(images, labels)``: (n, image_size, image_size, 1) float32 and (n,) int32.
    """
    if split not in ("train", "test", "all"):
        raise ValueError(f"`split` must be 'train', 'test' or 'all'. Received: split={split!r}")
    try:
        from sklearn.datasets import load_digits
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "The embedded digits dataset needs scikit-learn: pip install 'kctx[data]'"
        ) from error
    data = load_digits()
    images = (data.images.astype("float32") / 8.0 - 1.0)[..., None]  # 0..16 → [-1, 1]
    labels = data.target.astype("int32")
    order = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(images))
    cut = int(round(DIGITS_TRAIN_FRACTION * len(images)))
    index = {"train": order[:cut], "test": order[cut:], "all": order}[split]
    images, labels = images[index], labels[index]
    if image_size != 8:  # tf.image.resize's bilinear sampling, on every backend
        import keras

        from kctx.ops.resize import resize_bilinear

        images = keras.ops.convert_to_numpy(resize_bilinear(images, (image_size, image_size)))
        images = np.clip(images, -1.0, 1.0).astype("float32")
    return images, labels


class DatasetNotFoundError(FileNotFoundError):
    """A dataset is neither prepared locally nor obtainable here (offline, no manual files)."""


# What a TFDS dataset needs beyond `tfds build NAME` when it cannot be downloaded.
_MANUAL_FILES = {
    "imagenet2012": "ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar (from image-net.org)",
}


def tfds_dataset(name, split, data_dir=None, manual_dir=None, download=False, decoders=None):
    """A split of a TensorFlow Datasets dataset, prepared locally or with one clear error.

    Args:
        name: TFDS name, e.g. ``"cifar10"``, ``"celeb_a"``, ``"imagenet2012"``.
        split: TFDS split string, e.g. ``"train"``.
        data_dir: TFDS data directory (default ``$TFDS_DATA_DIR`` or
            ``~/tensorflow_datasets``).
        manual_dir: where manually downloaded archives are (ImageNet); default
            ``<data_dir>/downloads/manual``.
        download: when the dataset is not prepared, download and prepare it
            (needs network, or the archives in ``manual_dir``). Off by default:
            offline, TFDS retries for minutes before failing.
        decoders: passed to ``as_dataset`` (e.g. ``{"image": tfds.decode.SkipDecoding()}``).

    Returns:
        ``(dataset, info)``: the ``tf.data.Dataset`` of feature dicts (files
        read in a fixed order) and the builder's ``DatasetInfo``.

    Raises:
        DatasetNotFoundError: naming the dataset, the directory it was looked
            for in and how to provide it.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:
        raise ImportError(
            f"Dataset {name!r} is read with TensorFlow Datasets: pip install 'kctx[datasets]'"
        ) from error
    builder = tfds.builder(name, data_dir=data_dir)
    if not builder.is_prepared():
        root = getattr(builder, "_data_dir_root", None) or pathlib.Path(builder.data_dir).parents[1]
        manual = manual_dir or str(pathlib.Path(root) / "downloads" / "manual")
        needs = _MANUAL_FILES.get(name)
        how = (f"put {needs} in {manual} (manual_dir / --manual-dir) and prepare it with "
               "download=True / --download" if needs else
               f"prepare it on a machine with network (`tfds build {name} --data_dir DIR`, or "
               "download=True / --download) and copy DIR here, or pass its data_dir / --data-dir")
        message = f"Dataset {name!r} is not prepared in {builder.data_dir}: {how}."
        if not download:
            raise DatasetNotFoundError(message)
        try:
            builder.download_and_prepare(
                download_config=tfds.download.DownloadConfig(manual_dir=manual))
        except Exception as error:  # noqa: BLE001 - network / archive errors vary
            raise DatasetNotFoundError(
                f"{message} Preparing it failed: {type(error).__name__}: {error}") from error
    dataset = builder.as_dataset(split=split, shuffle_files=False, decoders=decoders)
    return dataset, builder.info


def tfds_encoded_examples(name, split, features=("image",), data_dir=None, manual_dir=None,
                          download=False):
    """A TFDS split with the image ``features`` still encoded, and its size.

    Returns:
        ``(examples, num_examples)``: ``examples`` yields the feature dicts in
        file order with each of ``features`` as encoded bytes (decode them
        after shuffling, so shuffle buffers and skips hold bytes, not pixels);
        ``num_examples`` from the dataset info, else by counting.
    """
    import tensorflow_datasets as tfds

    dataset, info = tfds_dataset(name, split, data_dir=data_dir, manual_dir=manual_dir,
                                 download=download,
                                 decoders={key: tfds.decode.SkipDecoding() for key in features})
    try:
        num_examples = int(info.splits[split].num_examples)
    except (KeyError, ValueError, TypeError):
        num_examples = 0
    if num_examples <= 0:
        num_examples = int(dataset.cardinality())
    if num_examples <= 0:
        num_examples = int(dataset.reduce(0, lambda count, _: count + 1))
    return dataset, num_examples


def tfds_image_examples(name, split, data_dir=None, manual_dir=None, download=False):
    """A TFDS image-classification split as still-encoded examples, and its size.

    Returns:
        ``(examples, num_examples)``: ``examples`` yields ``{"image": the
        encoded bytes, "label": int32}`` in file order (label 0 for datasets
        without one, e.g. ``celeb_a``); decode with :func:`decode_rgb` after
        shuffling (:func:`tfds_encoded_examples`).
    """
    import tensorflow as tf

    dataset, num_examples = tfds_encoded_examples(name, split, ("image",), data_dir, manual_dir,
                                                  download)

    def light(example):
        label = example["label"] if "label" in example else tf.zeros((), tf.int64)
        return {"image": example["image"], "label": tf.cast(label, tf.int32)}

    return dataset.map(light, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True), \
        num_examples


def decode_rgb(encoded):
    """Encoded image bytes (JPEG / PNG, any channel count) → uint8 (H, W, 3)."""
    import tensorflow as tf

    return tf.io.decode_image(encoded, channels=3, expand_animations=False)


def array_examples(arrays):
    """In-memory arrays as light examples: ``(indices, lookup)``.

    ``indices`` is the dataset 0, 1, ..., n - 1 (int64) and ``lookup(index)`` the
    dict of the arrays' rows at ``index``. Shuffle and skip the indices and look
    the rows up afterwards (in the ``preprocess`` of :func:`streaming_batches`):
    that pipeline refers to its examples once per epoch of its period, and
    tf.data serializes a shared input once per reference, so rows in the
    examples themselves were held 64 times while the pipeline was built (6.8 GB
    for the 2,000 digits_seg canvases); captured by ``lookup``, they are held once.
    Shuffling n indices gives the order that shuffling the n rows gives.

    Args:
        arrays: dict of equally long arrays.
    """
    import tensorflow as tf

    tensors = {key: tf.constant(np.asarray(value)) for key, value in arrays.items()}
    count = int(next(iter(tensors.values())).shape[0])

    def lookup(index):
        return {key: tf.gather(value, index) for key, value in tensors.items()}

    return tf.data.Dataset.range(count), lookup


def _stream_seed(seed, *more):
    import tensorflow as tf

    return tf.stack([tf.cast(seed, tf.int64)] + [tf.cast(m, tf.int64) for m in more])


def replica_slices(batch_size, input_context=None):
    """The slices of every global batch that one input pipeline yields, in order.

    Under ``strategy.distribute_datasets_from_function`` each input pipeline
    (one per host) feeds its local replicas one batch each, in turn. Pipeline
    i of P, with R/P of the R replicas, yields for global batch k the slices
    at offsets ``(i·R/P + j)·b``, j = 0 … R/P − 1, of ``b = batch_size / R``
    examples each: the replicas together see exactly global batch k, and each
    host reads and augments only its own part.

    Args:
        batch_size: the global batch size.
        input_context: a ``tf.distribute.InputContext``, or None for one
            pipeline and one replica.

    Returns:
        ``(per_replica_batch_size, offsets)``.
    """
    if input_context is None:
        return batch_size, (0,)
    replicas = input_context.num_replicas_in_sync
    pipelines = input_context.num_input_pipelines
    if batch_size % replicas:
        raise ValueError(f"`batch_size` must be a multiple of the {replicas} replicas. "
                         f"Received: batch_size={batch_size}")
    per_replica, local = batch_size // replicas, replicas // pipelines
    first = input_context.input_pipeline_id * local
    return per_replica, tuple((first + j) * per_replica for j in range(local))


def indexed_batches(arrays, batch_size, seed=0, start_step=0, transform=None,
                    input_context=None):
    """Endless training batches from in-memory arrays; batch k a pure function of (seed, k).

    Epoch e visits the examples in the order of a stateless permutation keyed
    on (seed, e) (the last partial batch of an epoch is dropped). The stream
    therefore does not depend on how many times it is iterated (Keras iterates
    once more to build a model under a strategy), and a resume at
    ``start_step`` starts exactly there, in O(1).

    Args:
        arrays: dict of equally long arrays (e.g. ``{"images", "labels"}``).
        batch_size: examples per global batch.
        seed: the stream's seed.
        start_step: index of the first batch.
        transform: optional ``fn(step, batch, offset) -> batch`` applied to
            each batch, which holds the examples ``offset``, ``offset + 1``,
            ... of global batch ``step`` (augmentation or noise keyed on the
            step, e.g. with stateless ops seeded by ``(seed, step)``).
        input_context: a ``tf.distribute.InputContext``: yield this input
            pipeline's per-replica slices of every batch
            (:func:`replica_slices`) rather than whole batches.

    Returns:
        A ``tf.data.Dataset`` of batches (dicts, or what ``transform`` returns).
    """
    import tensorflow as tf

    arrays = {key: tf.constant(np.asarray(value)) for key, value in arrays.items()}
    count = int(next(iter(arrays.values())).shape[0])
    steps_per_epoch = count // batch_size
    if steps_per_epoch < 1:
        raise ValueError(
            f"`batch_size` must not exceed the dataset's {count} examples. "
            f"Received: batch_size={batch_size}")
    size, offsets = replica_slices(batch_size, input_context)
    offsets = tf.constant(offsets, tf.int64)
    local = int(offsets.shape[0])

    def batch_at(slot):
        step, offset = slot // local, offsets[slot % local]
        epoch, position = step // steps_per_epoch, step % steps_per_epoch
        order = tf.random.experimental.stateless_shuffle(
            tf.range(count), seed=_stream_seed(tf.cast(seed, tf.int64) + 7919, epoch))
        index = tf.gather(order, tf.cast(position * batch_size + offset, tf.int32)
                          + tf.range(size))
        batch = {key: tf.gather(value, index) for key, value in arrays.items()}
        return transform(step, batch, offset) if transform else batch

    dataset = tf.data.Dataset.range(start_step * local, 2**62)
    return dataset.map(batch_at, num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=True).prefetch(tf.data.AUTOTUNE)


SHUFFLE_PERIOD = 64  # distinct epoch orders of a streaming pipeline; then they repeat


def streaming_batches(examples, preprocess, num_examples, batch_size, seed=0, start_step=0,
                      shuffle_buffer=10_000, transform=None, input_context=None):
    """Endless training batches from a large ``tf.data`` dataset; batch k a function of (seed, k).

    Epoch e is ``examples`` shuffled with a buffer whose seed is the int
    ``seed · 1,000,003 + (e mod 64)`` (combined with the global seed, as
    tf.data does), so every iteration of the returned dataset yields the same
    stream, and a resume at ``start_step`` skips at most one epoch of encoded
    records (the images are decoded after the skip).

    Args:
        examples: dataset of light examples (still encoded, or indices into
            in-memory arrays: :func:`array_examples`), read in a fixed order.
        preprocess: ``fn(index, example) -> dict`` with static shapes; ``index``
            is the example's position in the whole stream (int64), so random
            augmentation can use stateless ops keyed on ``(seed, index)`` and
            stay reproducible across resumes.
        num_examples: examples per epoch.
        batch_size: as :func:`indexed_batches`.
        seed: as :func:`indexed_batches`.
        start_step: as :func:`indexed_batches`.
        transform: as :func:`indexed_batches`.
        input_context: as :func:`indexed_batches`. With an ``input_context`` the
            other pipelines' examples are dropped before ``preprocess``, so each
            host decodes and augments only its own slices.
        shuffle_buffer: examples in the shuffle buffer.
    """
    import tensorflow as tf

    size, offsets = replica_slices(batch_size, input_context)
    local = len(offsets)
    start_epoch, skip = divmod(start_step * batch_size, num_examples)
    # One shuffle per epoch with a Python-int seed (tf.data rejects tensor seeds
    # once a global seed is set), built for one period and repeated.
    order = [(start_epoch + i) % SHUFFLE_PERIOD for i in range(SHUFFLE_PERIOD)]
    epochs = [examples.shuffle(shuffle_buffer, seed=seed * 1_000_003 + e,
                               reshuffle_each_iteration=False) for e in order]
    stream = _concatenate(epochs).repeat().skip(skip)
    stream = tf.data.Dataset.zip(tf.data.Dataset.range(start_step * batch_size, 2**62), stream)
    if local * size < batch_size:  # keep this pipeline's slices of each global batch
        first, last = offsets[0], offsets[-1] + size
        stream = stream.filter(
            lambda index, _: (index % batch_size >= first) & (index % batch_size < last))
    stream = stream.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    stream = stream.batch(size, drop_remainder=True)
    if transform:
        offsets = tf.constant(offsets, tf.int64)

        def apply(slot, batch):
            return transform(slot // local, batch, offsets[slot % local])

        stream = tf.data.Dataset.zip(tf.data.Dataset.range(start_step * local, 2**62), stream)
        stream = stream.map(apply, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return stream.prefetch(tf.data.AUTOTUNE)


def replica_batches(global_batches, batch_size, input_context=None):
    """Cut a dataset of global batches into this input pipeline's per-replica batches
    (:func:`replica_slices`), for streams that are cheapest to make whole (synthetic
    tasks): every host makes each global batch and keeps its replicas' slices.

    Args:
        global_batches: a dataset of batches of ``batch_size`` (any nested structure).
        batch_size: the global batch size.
        input_context: a ``tf.distribute.InputContext`` or None (returns the input).
    """
    import tensorflow as tf

    size, offsets = replica_slices(batch_size, input_context)
    if size == batch_size:
        return global_batches

    def split(*batch):
        parts = tf.nest.map_structure(
            lambda tensor: tf.stack([tensor[o:o + size] for o in offsets]), batch)
        return tf.data.Dataset.from_tensor_slices(parts if len(parts) > 1 else parts[0])

    return global_batches.flat_map(split)


def sharded_examples(examples, num_examples, batch_size, blank, input_context=None,
                     preprocess=None):
    """A finite held-out set for evaluation under any strategy: every example once,
    padded with weight-0 ``blank`` examples so all replicas get equal batches.

    Each input pipeline takes its shard of ``examples`` (``shard(P, i)``)
    and pads it to the same number of per-replica batches as the others, so
    no replica waits for a batch that never comes. Weighted metrics then
    count every real example exactly once.

    Args:
        examples: a dataset of ``(inputs, target)`` pairs (or of what
            ``preprocess`` maps to them), in a fixed order.
        num_examples: how many ``examples`` holds.
        batch_size: the global evaluation batch size (rounded down to a
            multiple of the replicas, at least one per replica).
        blank: an ``(inputs, target)`` pair of the examples' shapes (padding).
        input_context: a ``tf.distribute.InputContext`` or None.
        preprocess: ``fn(example) -> (inputs, target)``, applied after the
            shard, so each host decodes only its own examples.

    Returns:
        A dataset of ``(inputs, targets, weights)`` per-replica batches.
    """
    import tensorflow as tf

    replicas = input_context.num_replicas_in_sync if input_context else 1
    pipelines = input_context.num_input_pipelines if input_context else 1
    index = input_context.input_pipeline_id if input_context else 0
    size = max(1, batch_size // replicas)
    if pipelines > 1:
        examples = examples.shard(pipelines, index)
    if preprocess is not None:
        examples = examples.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE,
                                deterministic=True)
    own = num_examples // pipelines + (index < num_examples % pipelines)
    per_pipeline = -(-num_examples // pipelines)
    chunk = size * (replicas // pipelines)
    padded = -(-per_pipeline // chunk) * chunk if replicas > 1 else own  # one replica: no pad
    weighted = examples.map(lambda inputs, target: (inputs, target, tf.constant(1.0)))
    padding = tf.data.Dataset.from_tensors(tuple(blank) + (tf.constant(0.0),))
    return weighted.concatenate(padding.repeat(padded - own)).batch(size)


def _concatenate(datasets):
    """Concatenate as a balanced tree, so no element passes through more than log₂(n) levels."""
    if len(datasets) == 1:
        return datasets[0]
    middle = len(datasets) // 2
    return _concatenate(datasets[:middle]).concatenate(_concatenate(datasets[middle:]))
