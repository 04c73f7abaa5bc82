"""mmseg's image transforms in TensorFlow: keep-ratio resizing, the training augmentation
(random rescale, pad, crop, flip, photometric distortion) and the evaluation
preprocessing. Every random draw is stateless, keyed on a seed, so an example's
augmentation is a function of its seed."""

from segmentation.data.split import IGNORE_LABEL


def keep_ratio_size(height, width, scale, ratio=1.0):
    """The size mmcv's ``imrescale`` gives an image of ``height`` × ``width`` for ``scale``.

    The factor is f = min(long / max(H, W), short / min(H, W)) with (long, short) the
    larger and smaller entry of ``scale`` times ``ratio``, and the new size
    int(H·f + 0.5) × int(W·f + 0.5): the image fits in long × short either way round
    (mmseg's ``Resize(scale=(2048, 512), keep_ratio=True)``; ``RandomResize`` draws the
    ratio).

    Args:
        height, width: the image's size (ints or scalar tensors).
        scale: two sides, e.g. ``(2048, 512)``.
        ratio: a factor of both sides (a float or a scalar tensor).

    Returns:
        ``(new height, new width)``: ints for int inputs, else int32 tensors.

    Example:

    >>> keep_ratio_size(375, 500, (2048, 512))
    (512, 683)

    Reference:
        mmcv 2.x ``mmcv.image.geometric.rescale_size`` and ``_scale_size``.
    """
    long, short = max(scale), min(scale)
    if all(isinstance(v, (int, float)) for v in (height, width, ratio)):
        long, short = long * ratio, short * ratio
        factor = min(long / max(height, width), short / min(height, width))
        return int(height * factor + 0.5), int(width * factor + 0.5)
    import tensorflow as tf

    size = tf.cast(tf.stack([height, width]), tf.float64)
    ratio = tf.cast(ratio, tf.float64)
    factor = tf.minimum(long * ratio / tf.reduce_max(size), short * ratio / tf.reduce_min(size))
    new = tf.cast(tf.floor(size * factor + 0.5), tf.int32)
    return new[0], new[1]


def rescale_keep_ratio(image, scale):
    """Resize a [-1, 1] image to :func:`keep_ratio_size` as mmcv's ``imrescale`` does.

    The official test pipelines (``Resize(scale=..., keep_ratio=True)``) resize the
    uint8 image with OpenCV's bilinear interpolation (half-pixel centres, no
    antialiasing) and keep uint8: here the image's 0–255 levels are resized bilinearly
    (the same sampling, in float) and rounded back to levels. OpenCV's fixed-point
    arithmetic differs from that by at most one level (measured on the fixtures of
    ``tools/ade20k_pipeline_fixtures.py``; see the tests).

    Args:
        image: (H, W, C) float in [-1, 1] whose values are uint8 levels (x / 127.5 − 1),
            as the loaders decode them.
        scale: two sides, e.g. ``(2048, 512)``.

    Returns:
        (H', W', C) float32 in [-1, 1], again on uint8 levels.
    """
    import tensorflow as tf

    shape = tf.shape(image)
    size = tf.stack(keep_ratio_size(shape[0], shape[1], scale))
    levels = (tf.cast(image, tf.float32) + 1.0) * 127.5
    resized = tf.image.resize(levels, size, method="bilinear")
    return tf.clip_by_value(tf.round(resized), 0.0, 255.0) / 127.5 - 1.0


# PhotoMetricDistortion's ranges (mmseg 1.x defaults, on 0–255 values; hue in OpenCV's
# 0–180 units).
_BRIGHTNESS_DELTA, _CONTRAST_RANGE, _SATURATION_RANGE, _HUE_DELTA = 32.0, (0.5, 1.5), \
    (0.5, 1.5), 18


def photometric_distortion(image, seed):
    """mmseg's ``PhotoMetricDistortion`` on a [-1, 1] RGB image, keyed on ``seed``.

    Each with probability 1/2, in this order: brightness + U(−32, 32) (on 0–255);
    contrast · U(0.5, 1.5), either here or last (probability 1/2 each); saturation ·
    U(0.5, 1.5) and hue + k/180 of the circle, k uniform in −18..17 (in HSV); every step
    clipped to 0–255. mmseg rounds each step down to uint8 and converts HSV with
    OpenCV; here values stay float and HSV is TensorFlow's (the same hexcone model).

    Args:
        image: (H, W, 3) float in [-1, 1].
        seed: a shape-(2,) int tensor; the distortion is a function of it.

    Returns:
        (H, W, 3) float32 in [-1, 1].

    Reference:
        mmsegmentation 1.x ``mmseg/datasets/transforms/transforms.py``
        (``PhotoMetricDistortion``); Howard, "Some Improvements on Deep Convolutional
        Neural Network Based Image Classification", 2013.
    """
    import tensorflow as tf

    keys = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=9)

    def chance(key):
        return tf.random.stateless_uniform((), key) < 0.5

    def uniform(key, low, high):
        return tf.random.stateless_uniform((), key, low, high)

    x = (tf.cast(image, tf.float32) + 1.0) * 127.5
    x = tf.where(chance(keys[0]), tf.clip_by_value(
        x + uniform(keys[1], -_BRIGHTNESS_DELTA, _BRIGHTNESS_DELTA), 0.0, 255.0), x)
    contrast_first = chance(keys[2])
    apply_contrast, alpha = chance(keys[3]), uniform(keys[4], *_CONTRAST_RANGE)

    def contrast(x, now):
        return tf.where(now & apply_contrast, tf.clip_by_value(x * alpha, 0.0, 255.0), x)

    x = contrast(x, contrast_first)
    unit = x / 255.0
    unit = tf.where(chance(keys[5]), tf.image.adjust_saturation(
        unit, uniform(keys[6], *_SATURATION_RANGE)), unit)
    hue = tf.cast(tf.random.stateless_uniform((), keys[8], -_HUE_DELTA, _HUE_DELTA,
                                              dtype=tf.int32), tf.float32) / 180.0
    unit = tf.where(chance(keys[7]), tf.image.adjust_hue(unit, hue), unit)
    x = contrast(tf.clip_by_value(unit * 255.0, 0.0, 255.0), ~contrast_first)
    return x / 127.5 - 1.0


_CROP_TRIES = 10  # mmseg RandomCrop's attempts at cat_max_ratio


def _crop_offset(label, crop_size, keys, cat_max_ratio, ignore_label):
    """(top, left) of a crop of the padded ``label``: one draw, or with ``cat_max_ratio``
    < 1 mmseg's ``RandomCrop`` rule: the first of 10 draws whose crop holds at least two
    counted classes, the largest below ``cat_max_ratio`` of the counted pixels (the
    ignore label uncounted), else an 11th draw."""
    import tensorflow as tf

    height, width = tf.shape(label)[0], tf.shape(label)[1]

    def draw(top_key, left_key, shape=()):
        return (tf.random.stateless_uniform(shape, top_key, 0, height - crop_size + 1,
                                            dtype=tf.int32),
                tf.random.stateless_uniform(shape, left_key, 0, width - crop_size + 1,
                                            dtype=tf.int32))

    top, left = draw(keys[1], keys[2])
    if cat_max_ratio >= 1.0:
        return top, left
    more = tf.random.experimental.stateless_split(
        tf.random.experimental.stateless_fold_in(keys[1], 1), num=2)
    tops, lefts = draw(more[0], more[1], (_CROP_TRIES,))
    tops = tf.concat([top[None], tops], 0)  # the first draw is the one without the rule
    lefts = tf.concat([left[None], lefts], 0)
    accepted = []
    for index in range(_CROP_TRIES):
        window = label[tops[index]:tops[index] + crop_size, lefts[index]:lefts[index] + crop_size]
        counts = tf.math.bincount(tf.reshape(window, [-1]), minlength=256, maxlength=256)
        counts = tf.tensor_scatter_nd_update(counts, [[ignore_label]], [0])
        accepted.append((tf.math.count_nonzero(counts) > 1) & (
            tf.cast(tf.reduce_max(counts), tf.float32) <
            cat_max_ratio * tf.cast(tf.reduce_sum(counts), tf.float32)))
    accepted = tf.stack(accepted)
    choice = tf.where(tf.reduce_any(accepted), tf.argmax(tf.cast(accepted, tf.int32)),
                      tf.constant(_CROP_TRIES, tf.int64))
    return tops[choice], lefts[choice]


def augment(image, label, seed, crop_size, scale_range=(0.5, 2.0), ignore_label=IGNORE_LABEL,
            train_scale=None, cat_max_ratio=1.0, photometric=False):
    """Random rescale, pad, crop and left-right flip of an image and its label map, aligned.

    The image is resized bilinearly and the labels by nearest neighbour with the
    same factor, drawn from ``scale_range``: relative to the image's own size, or with
    ``train_scale`` = (long, short) to the keep-ratio size of (r·long, r·short) (mmseg's
    ``RandomResize(scale, ratio_range, keep_ratio=True)``, :func:`keep_ratio_size`);
    both are padded to at least ``crop_size`` (image 0, labels ``ignore_label``),
    cropped at the same random offset (with ``cat_max_ratio`` < 1 as mmseg's
    ``RandomCrop``: no class above that share of a crop, in up to 10 tries), with
    ``photometric`` distorted in colour (:func:`photometric_distortion`; the padding
    stays 0) and flipped together. Every draw is a stateless op keyed on ``seed`` (a
    shape-(2,) int tensor), so an example's augmentation is a function of its seed.

    Args:
        image: (H, W, C) float.
        label: (H, W) integer.
        seed: a shape-(2,) int tensor.
        crop_size: the crops' side.
        scale_range: (low, high) of the random factor.
        ignore_label: the label of padding.
        train_scale: (long, short) the factor applies to, or None (the image's size).
        cat_max_ratio: the largest share of one class in a crop (1: any crop).
        photometric: whether to distort brightness, contrast, saturation and hue.

    Returns:
        ``(image (crop, crop, C) float32, label (crop, crop) int32)``.
    """
    import tensorflow as tf

    keys = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=4)
    shape = tf.shape(image)
    scale = tf.random.stateless_uniform((), keys[0], scale_range[0], scale_range[1])
    if train_scale is None:
        size = tf.maximum(tf.cast(tf.round(tf.cast(shape[:2], tf.float32) * scale), tf.int32),
                          1)
    else:
        size = tf.maximum(tf.stack(keep_ratio_size(shape[0], shape[1], train_scale, scale)), 1)
    image = tf.image.resize(tf.cast(image, tf.float32), size, method="bilinear")
    label = tf.image.resize(tf.cast(label, tf.int32)[..., None], size, method="nearest")[..., 0]
    pad_height = tf.maximum(crop_size - size[0], 0)
    pad_width = tf.maximum(crop_size - size[1], 0)
    image = tf.pad(image, [[0, pad_height], [0, pad_width], [0, 0]])
    label = tf.pad(label, [[0, pad_height], [0, pad_width]], constant_values=ignore_label)
    top, left = _crop_offset(label, crop_size, keys, cat_max_ratio, ignore_label)
    image = image[top:top + crop_size, left:left + crop_size]
    label = label[top:top + crop_size, left:left + crop_size]
    if photometric:
        inside = (tf.range(crop_size)[:, None] < size[0] - top) & (
            tf.range(crop_size)[None, :] < size[1] - left)
        distorted = photometric_distortion(image, tf.random.experimental.stateless_fold_in(
            keys[3], 1))
        image = tf.where(inside[..., None], distorted, 0.0)
    flip = tf.random.stateless_uniform((), keys[3]) < 0.5
    image = tf.cond(flip, lambda: tf.reverse(image, [1]), lambda: image)
    label = tf.cond(flip, lambda: tf.reverse(label, [1]), lambda: label)
    channels = image.shape[-1]
    return (tf.ensure_shape(image, (crop_size, crop_size, channels)),
            tf.ensure_shape(label, (crop_size, crop_size)))


def fit_to_square(image, label, size, ignore_label=IGNORE_LABEL):
    """Shrink (keeping the aspect ratio) so the longer side is at most ``size``, then pad
    the bottom / right to size×size (image 0, labels ``ignore_label``): static-shaped
    evaluation batches whose padding does not count in the scores."""
    import tensorflow as tf

    shape = tf.shape(label)
    scale = tf.minimum(1.0, size / tf.cast(tf.reduce_max(shape), tf.float32))
    new = tf.maximum(tf.cast(tf.round(tf.cast(shape, tf.float32) * scale), tf.int32), 1)
    image = tf.image.resize(image, new, method="bilinear")
    label = tf.image.resize(label[..., None], new, method="nearest")[..., 0]
    image = tf.pad(image, [[0, size - new[0]], [0, size - new[1]], [0, 0]])
    label = tf.pad(label, [[0, size - new[0]], [0, size - new[1]]], constant_values=ignore_label)
    return (tf.ensure_shape(image, (size, size, image.shape[-1])),
            tf.ensure_shape(label, (size, size)))


def evaluation_image(image, config):
    """The evaluation preprocessing of one [-1, 1] image under ``config``: resized with
    :func:`rescale_keep_ratio` to ``config.eval_resize`` when set (the official test
    pipelines' ``Resize(scale, keep_ratio=True)``), else unchanged. The labels stay at
    the image's own size: predictions are resized back to it."""
    if config.eval_resize:
        return rescale_keep_ratio(image, config.eval_resize)
    return image
