"""Segmentation data: the embedded ``digits_seg`` dataset.

``digits_seg`` is built from scikit-learn's real digit scans. Each 64×64
canvas holds 2–4 digits pasted at random scales (12–28 px) and positions
whose boxes do not overlap (a digit that finds no free place in 20 draws is
left out).
Its label map is 0 for background and d + 1 for a pixel of digit d (11
classes). Pixels of intermediate intensity at the strokes' edges are labelled
255 (ignored), as VOC marks object boundaries. Training canvases use the
training digits and test canvases the held-out digits
(:func:`kctx.data.digits`), so no scan appears in both.
"""

import numpy as np

from kctx.data import digits

IGNORE_LABEL = 255
DIGITS_SEG_CLASSES = 11  # background + 10 digits
DIGITS_SEG_SIZES = {"train": 2000, "test": 300}
_STROKE, _EDGE = 0.35, 0.2  # normalised intensity: ≥ stroke → digit, [edge, stroke) → ignored
_PLACEMENT_TRIES = 20


def _scaled(digit, size):
    """An 8×8 scan (0..16) bilinearly resized to size×size, in [0, 1]."""
    from scipy.ndimage import zoom

    return np.clip(zoom(digit / 16.0, size / 8.0, order=1), 0.0, 1.0)


def digits_seg(split="train", num_images=None, image_size=64, seed=0):
    """Canvases of pasted digits with per-pixel labels.

    Args:
        split: ``"train"`` (2,000 canvases from the 1,438 training scans) or
            ``"test"`` (300 from the 359 held-out scans).
        num_images: canvases to make (default per split).
        image_size: canvas side.
        seed: canvas i is drawn from ``numpy.random.default_rng((seed, split, i))``.

    Returns:
        ``(images, labels)``: float32 (n, S, S, 3) in [-1, 1] (grey copied to
        RGB) and uint8 (n, S, S) with values 0..10 and 255.
    """
    if split not in DIGITS_SEG_SIZES:
        raise ValueError(f"`split` must be 'train' or 'test'. Received: split={split!r}")
    count = DIGITS_SEG_SIZES[split] if num_images is None else int(num_images)
    scans, classes = digits(split, image_size=8)
    scans = (scans[..., 0] + 1.0) * 8.0  # back to the 0..16 scale of the originals
    images = np.zeros((count, image_size, image_size), np.float32)
    labels = np.zeros((count, image_size, image_size), np.uint8)
    split_key = 0 if split == "train" else 1
    for i in range(count):
        rng = np.random.default_rng((seed, split_key, i))
        boxes = []
        for _ in range(rng.integers(2, 5)):
            index = rng.integers(len(scans))
            size = int(rng.integers(12, min(28, image_size) + 1))
            for _ in range(_PLACEMENT_TRIES):
                top, left = (int(v) for v in rng.integers(0, image_size - size + 1, size=2))
                if all(top >= b + 1 or top + size + 1 <= t or left >= r + 1 or
                       left + size + 1 <= l for t, l, b, r in boxes):
                    break
            else:
                continue
            boxes.append((top, left, top + size, left + size))
            glyph = _scaled(scans[index], size)
            window = np.s_[top:top + size, left:left + size]
            images[i][window] = np.maximum(images[i][window], glyph)
            label = labels[i][window]
            label[(glyph >= _EDGE) & (label == 0)] = IGNORE_LABEL
            label[glyph >= _STROKE] = classes[index] + 1
    images = np.repeat(images[..., None] * 2.0 - 1.0, 3, axis=-1)
    return images.astype(np.float32), labels


def augment(image, label, seed, crop_size, scale_range=(0.5, 2.0), ignore_label=IGNORE_LABEL):
    """Random rescale, pad, crop and left-right flip of an image and its label map, aligned.

    The image is resized bilinearly and the labels by nearest neighbour with the
    same factor (drawn from ``scale_range``); both are padded to at least
    ``crop_size`` (image 0, labels ``ignore_label``), cropped at the same
    random offset and flipped together. Every draw is a stateless op keyed on
    ``seed`` (a shape-(2,) int tensor), so an example's augmentation is a
    function of its seed.

    Args:
        image: (H, W, C) float.
        label: (H, W) integer.

    Returns:
        ``(image (crop, crop, C) float32, label (crop, crop) int32)``.
    """
    import tensorflow as tf

    keys = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=4)
    shape = tf.shape(image)
    scale = tf.random.stateless_uniform((), keys[0], scale_range[0], scale_range[1])
    size = tf.maximum(tf.cast(tf.round(tf.cast(shape[:2], tf.float32) * scale), tf.int32), 1)
    image = tf.image.resize(tf.cast(image, tf.float32), size, method="bilinear")
    label = tf.image.resize(tf.cast(label, tf.int32)[..., None], size, method="nearest")[..., 0]
    pad_height = tf.maximum(crop_size - size[0], 0)
    pad_width = tf.maximum(crop_size - size[1], 0)
    image = tf.pad(image, [[0, pad_height], [0, pad_width], [0, 0]])
    label = tf.pad(label, [[0, pad_height], [0, pad_width]], constant_values=ignore_label)
    height, width = size[0] + pad_height, size[1] + pad_width
    top = tf.random.stateless_uniform((), keys[1], 0, height - crop_size + 1, dtype=tf.int32)
    left = tf.random.stateless_uniform((), keys[2], 0, width - crop_size + 1, dtype=tf.int32)
    image = image[top:top + crop_size, left:left + crop_size]
    label = label[top:top + crop_size, left:left + crop_size]
    flip = tf.random.stateless_uniform((), keys[3]) < 0.5
    image = tf.cond(flip, lambda: tf.reverse(image, [1]), lambda: image)
    label = tf.cond(flip, lambda: tf.reverse(label, [1]), lambda: label)
    channels = image.shape[-1]
    return (tf.ensure_shape(image, (crop_size, crop_size, channels)),
            tf.ensure_shape(label, (crop_size, crop_size)))


def dataset_arrays(config, split, num_images=None):
    """The in-memory ``(images, labels)`` of ``config.dataset`` (``digits_seg``); with
    ``num_images``, the first that many (canvases depend only on their index)."""
    if config.dataset != "digits_seg":
        raise ValueError(f"`dataset` has no loader in this release. Received: {config.dataset!r}")
    return digits_seg(split, num_images=num_images, image_size=config.image_size)


def training_batches(config, seed=0, start_step=0):
    """The endless, step-indexed training stream of ``config`` from ``start_step``.

    Batches are ``(images (B, crop, crop, 3), labels (B, crop, crop) int32)``;
    batch k is a function of (seed, k) (:func:`kctx.data.streaming_batches`),
    each example augmented with :func:`augment` keyed on (seed, its index).
    """
    import tensorflow as tf

    from kctx.data import streaming_batches

    images, labels = dataset_arrays(config, config.train_split)
    examples = tf.data.Dataset.from_tensor_slices({"image": images, "label": labels})

    def preprocess(index, example):
        seed_pair = tf.stack([tf.cast(seed, tf.int64), tf.cast(index, tf.int64)])
        return augment(example["image"], example["label"], seed_pair, config.crop_size,
                       config.scale_range)

    return streaming_batches(examples, preprocess, len(images), config.batch_size, seed=seed,
                             start_step=start_step, shuffle_buffer=len(images))


def evaluation_batches(config, batch_size=None, split=None, num_images=None):
    """The held-out images at full size with their labels (int32), every example once
    (or the first ``num_images``)."""
    import tensorflow as tf

    images, labels = dataset_arrays(config, split or config.eval_split, num_images)
    dataset = tf.data.Dataset.from_tensor_slices((images, labels.astype(np.int32)))
    return dataset.batch(batch_size or config.batch_size).prefetch(tf.data.AUTOTUNE)
