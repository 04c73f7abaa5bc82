"""Segmentation data: the embedded ``digits_seg`` and the real benchmarks' loaders.

Every dataset is read through :func:`load_split`, which returns the split's
light examples (arrays, file paths or still-encoded bytes, in a fixed order),
their count and a ``decode`` function to (image float32 (H, W, 3) in [-1, 1],
labels int32 (H, W) with 255 ignored). Registered datasets (:data:`DATASETS`):

- ``digits_seg`` and ``digits_seg_large`` (embedded, below).
- ``voc``: PASCAL VOC 2012 from a local ``VOCdevkit`` (TFDS ``voc`` has no
  masks), splits ``train`` (1,464) / ``val`` (1,449) / ``trainval``, and
  ``train_aug`` (10,582) with the SBD annotations (``benchmark_RELEASE``
  ``.mat`` files, or the ``SegmentationClassAug`` PNGs). 21 classes.
- ``ade20k``: ADE20K / SceneParse150 from a local ``ADEChallengeData2016``
  (150 classes, label 0 "other" ignored), splits ``train`` / ``val``.
- ``cityscapes``: Cityscapes' fine annotations from a local ``cityscapes`` directory
  (``leftImg8bit`` and ``gtFine``; 19 classes, the train ids; 255 ignored), splits
  ``train`` (2,975) / ``val`` (500).
- ``oxford_iiit_pet`` (TFDS): the trimaps as background 0 / pet 1, the border
  ignored; splits ``train`` / ``test``.
- ``scene_parse150`` (TFDS): TFDS builds it from the Places Challenge
  *instance* annotations, whose red channel holds 100 object categories (not
  the 150 semantic classes of ``ADEChallengeData2016``; use ``ade20k`` for
  the benchmark); label 0 (unannotated) is ignored. Splits ``train`` / ``test``.

``digits_seg`` is built from scikit-learn's real digit scans. Each 64×64
canvas holds 2–4 digits pasted at random scales (12–28 px) and positions
whose boxes do not overlap (a digit that finds no free place in 20 draws is
left out). ``digits_seg_large`` draws 2–4 digits of 48–96 px on 128×128 canvases
(its configs set ``image_size=128``), of which 1–3 fit (1.14 on average on the test
split, median side 71 px): objects larger than the effective receptive field of
the ResNet-tiny backbone at the head (``python -m segmentation.receptive_field``).
Its label map is 0 for background and d + 1 for a pixel of digit d (11
classes). Pixels of intermediate intensity at the strokes' edges are labelled
255 (ignored), as VOC marks object boundaries. Training canvases use the
training digits and test canvases the held-out digits
(:func:`kctx.data.digits`), so no scan appears in both.
"""

import os
import pathlib
from typing import Callable, NamedTuple

import numpy as np

from kctx.data import (
    DatasetNotFoundError,
    array_examples,
    decode_rgb,
    digits,
    streaming_batches,
    tfds_encoded_examples,
)

IGNORE_LABEL = 255
DIGITS_SEG_CLASSES = 11  # background + 10 digits
ADE20K_CLASSES = 150
SCENE_PARSE150_TFDS_CLASSES = 100  # the instance categories of TFDS's annotations
DIGITS_SEG_SIZES = {"train": 2000, "test": 300}
_STROKE, _EDGE = 0.35, 0.2  # normalised intensity: ≥ stroke → digit, [edge, stroke) → ignored
_PLACEMENT_TRIES = 20


def _scaled(digit, size):
    """An 8×8 scan (0..16) bilinearly resized to size×size, in [0, 1]."""
    from scipy.ndimage import zoom

    return np.clip(zoom(digit / 16.0, size / 8.0, order=1), 0.0, 1.0)


# The embedded digit datasets: canvas layouts (digit sides in px, digits per canvas; the
# canvas side is the config's image_size).
DIGIT_LAYOUTS = {
    "digits_seg": dict(digit_sizes=(12, 28), digit_counts=(2, 4)),
    # Objects larger than the ResNet-tiny's effective receptive field at the head (128²
    # canvases: python -m segmentation.receptive_field --config digits_seg_large).
    "digits_seg_large": dict(digit_sizes=(48, 96), digit_counts=(2, 4)),
}


def digits_seg(split="train", num_images=None, image_size=64, seed=0, digit_sizes=(12, 28),
               digit_counts=(2, 4), return_boxes=False):
    """Canvases of pasted digits with per-pixel labels.

    Args:
        split: ``"train"`` (2,000 canvases from the 1,438 training scans) or
            ``"test"`` (300 from the 359 held-out scans).
        num_images: canvases to make (default per split).
        image_size: canvas side.
        seed: canvas i is drawn from ``numpy.random.default_rng((seed, split, i))``.
        digit_sizes: (smallest, largest) side of a pasted digit, in pixels (capped at
            ``image_size``).
        digit_counts: (fewest, most) digits drawn per canvas (a digit that finds no
            free place in 20 draws is left out).
        return_boxes: also return each canvas's digit boxes.

    Returns:
        ``(images, labels)``: float32 (n, S, S, 3) in [-1, 1] (grey copied to
        RGB) and uint8 (n, S, S) with values 0..10 and 255; with ``return_boxes``
        also a list (per canvas) of ``(top, left, bottom, right, class)`` boxes.
    """
    if split not in DIGITS_SEG_SIZES:
        raise ValueError(f"`split` must be 'train' or 'test'. Received: split={split!r}")
    low, high = (int(v) for v in digit_sizes)
    fewest, most = (int(v) for v in digit_counts)
    if not (1 <= low <= high and 1 <= fewest <= most):
        raise ValueError("`digit_sizes` and `digit_counts` must be (low, high) with "
                         f"1 <= low <= high. Received: digit_sizes={digit_sizes!r}, "
                         f"digit_counts={digit_counts!r}")
    count = DIGITS_SEG_SIZES[split] if num_images is None else int(num_images)
    scans, classes = digits(split, image_size=8)
    scans = (scans[..., 0] + 1.0) * 8.0  # back to the 0..16 scale of the originals
    images = np.zeros((count, image_size, image_size), np.float32)
    labels = np.zeros((count, image_size, image_size), np.uint8)
    split_key = 0 if split == "train" else 1
    all_boxes = []
    for i in range(count):
        rng = np.random.default_rng((seed, split_key, i))
        boxes = []
        for _ in range(rng.integers(fewest, most + 1)):
            index = rng.integers(len(scans))
            size = int(rng.integers(min(low, image_size), min(high, image_size) + 1))
            for _ in range(_PLACEMENT_TRIES):
                top, left = (int(v) for v in rng.integers(0, image_size - size + 1, size=2))
                if all(top >= b + 1 or top + size + 1 <= t or left >= r + 1 or
                       left + size + 1 <= l for t, l, b, r, _ in boxes):
                    break
            else:
                continue
            boxes.append((top, left, top + size, left + size, int(classes[index])))
            glyph = _scaled(scans[index], size)
            window = np.s_[top:top + size, left:left + size]
            images[i][window] = np.maximum(images[i][window], glyph)
            label = labels[i][window]
            label[(glyph >= _EDGE) & (label == 0)] = IGNORE_LABEL
            label[glyph >= _STROKE] = classes[index] + 1
        all_boxes.append(boxes)
    images = np.repeat(images[..., None] * 2.0 - 1.0, 3, axis=-1).astype(np.float32)
    return (images, labels, all_boxes) if return_boxes else (images, labels)


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


class Split(NamedTuple):
    """A dataset split: light ``examples`` in a fixed order, their count, and
    ``decode(example) -> (image float32 (H, W, 3) in [-1, 1], labels int32 (H, W))``.
    ``fixed_size`` when every image has the same size (they can be batched as they are)."""

    examples: object
    num_examples: int
    decode: Callable
    fixed_size: bool = False


def _to_unit_range(image):
    import tensorflow as tf

    return tf.cast(image, tf.float32) / 127.5 - 1.0


def _shift_zero_label(label, num_classes):
    """Annotations where 0 means "unlabelled" and c ≥ 1 class c − 1 → 255 / c − 1
    (values above ``num_classes`` are ignored too)."""
    import tensorflow as tf

    label = tf.cast(label, tf.int32) - 1
    return tf.where((label < 0) | (label >= num_classes), IGNORE_LABEL, label)


def _file_split(pairs):
    """``(examples, count)`` of (image file, label file) path pairs."""
    import tensorflow as tf

    images, labels = zip(*[(str(image), str(label)) for image, label in pairs])
    examples = tf.data.Dataset.from_tensor_slices({"image": list(images), "label": list(labels)})
    return examples, len(images)


def read_label_file(path):
    """A label map (uint8, (H, W)) from a VOC palette PNG (the palette indices, 255 kept),
    a greyscale PNG of class indices, or an SBD ``GTcls`` ``.mat`` file."""
    path = path.item() if isinstance(path, np.ndarray) else path  # from tf.numpy_function
    path = path.decode() if isinstance(path, bytes) else str(path)
    if path.endswith(".mat"):
        from scipy.io import loadmat

        return np.asarray(loadmat(path, squeeze_me=True, struct_as_record=False)
                          ["GTcls"].Segmentation, np.uint8)
    from PIL import Image

    with Image.open(path) as image:
        if image.mode not in ("P", "L"):
            raise ValueError(f"Label files must be palette or greyscale PNGs of class indices. "
                             f"Received: mode {image.mode!r} in {path}")
        return np.asarray(image, np.uint8)


def _decode_files(example):
    import tensorflow as tf

    image = decode_rgb(tf.io.read_file(example["image"]))
    label = tf.numpy_function(read_label_file, [example["label"]], tf.uint8, stateful=False)
    label = tf.ensure_shape(label, (None, None))
    return _to_unit_range(image), tf.cast(label, tf.int32)


def _ids(path):
    return [line.split()[0] for line in pathlib.Path(path).read_text().splitlines() if line.strip()]


def _first_dir(candidates, marker):
    return next((c for c in candidates if (c / marker).is_dir()), None)


VOC_LAYOUT = ("ROOT/VOCdevkit/VOC2012/{JPEGImages, SegmentationClass, ImageSets/Segmentation} "
              "(VOCtrainval_11-May-2012.tar from host.robots.ox.ac.uk/pascal/VOC/voc2012)")
SBD_LAYOUT = ("ROOT/benchmark_RELEASE/dataset/{img, cls, train.txt, val.txt} (SBD, "
              "benchmark.tgz from www2.eecs.berkeley.edu/Research/Projects/CS/vision/grouping/"
              "semantic_contours) or ROOT/VOCdevkit/VOC2012/SegmentationClassAug/*.png")


def voc_files(root, split):
    """(image, label) file pairs of a PASCAL VOC 2012 segmentation split.

    ``train`` / ``val`` / ``trainval`` follow ``ImageSets/Segmentation``.
    ``train_aug`` is the usual augmented set: VOC ``train`` plus SBD ``train``
    and ``val`` (or ``ImageSets/Segmentation/train_aug.txt`` when present),
    minus VOC ``val``; labels from ``SegmentationClass`` where VOC has one,
    else ``SegmentationClassAug``, else SBD's ``cls/*.mat``.

    Raises:
        DatasetNotFoundError: naming the directory and the expected layout.
    """
    root = pathlib.Path(root).expanduser()
    voc = _first_dir([root / "VOCdevkit" / "VOC2012", root / "VOC2012", root], "JPEGImages")
    if voc is None or not (voc / "ImageSets" / "Segmentation").is_dir():
        raise DatasetNotFoundError(f"PASCAL VOC 2012 was not found in {root}: expected "
                                   f"{VOC_LAYOUT.replace('ROOT', str(root))}; pass its "
                                   "parent directory as data_dir / --data-dir")
    sets = voc / "ImageSets" / "Segmentation"
    if split in ("train", "val", "trainval"):
        return [(voc / "JPEGImages" / f"{n}.jpg", voc / "SegmentationClass" / f"{n}.png")
                for n in _ids(sets / f"{split}.txt")]
    if split != "train_aug":
        raise ValueError("`split` of voc must be 'train', 'val', 'trainval' or 'train_aug'. "
                         f"Received: split={split!r}")
    sbd = _first_dir([root / "benchmark_RELEASE" / "dataset", root / "SBD" / "dataset",
                      root / "dataset"], "cls")
    aug = _first_dir([voc, root], "SegmentationClassAug")
    aug = aug / "SegmentationClassAug" if aug else None
    if sbd is None and aug is None:
        raise DatasetNotFoundError(f"The SBD annotations for voc 'train_aug' were not found in "
                                   f"{root}: expected {SBD_LAYOUT.replace('ROOT', str(root))}; "
                                   "or train on split 'train'")
    if (sets / "train_aug.txt").is_file():
        names = _ids(sets / "train_aug.txt")
    else:
        extra = (_ids(sbd / "train.txt") + _ids(sbd / "val.txt") if sbd
                 else sorted(path.stem for path in aug.glob("*.png")))
        names = sorted(set(_ids(sets / "train.txt")) | set(extra))
    val = set(_ids(sets / "val.txt"))
    pairs = []
    for name in (n for n in names if n not in val):
        image = voc / "JPEGImages" / f"{name}.jpg"
        if not image.is_file() and sbd:
            image = sbd / "img" / f"{name}.jpg"
        label = voc / "SegmentationClass" / f"{name}.png"
        if not label.is_file() and aug and (aug / f"{name}.png").is_file():
            label = aug / f"{name}.png"
        elif not label.is_file() and sbd:
            label = sbd / "cls" / f"{name}.mat"
        pairs.append((image, label))
    return pairs


def _check_files(name, root, pairs):
    missing = [str(path) for pair in pairs for path in pair if not pathlib.Path(path).is_file()]
    if missing:
        raise DatasetNotFoundError(f"{name} in {root} lists {len(missing)} files that do not "
                                   f"exist, e.g. {missing[0]}")
    if not pairs:
        raise DatasetNotFoundError(f"{name} in {root}: the split is empty")


def _local_root(data_dir):
    return pathlib.Path(data_dir or os.environ.get("KCTX_DATA_DIR", "~/datasets")).expanduser()


def _voc(split, data_dir=None, **_):
    root = _local_root(data_dir)
    pairs = voc_files(root, split)
    _check_files(f"voc {split!r}", root, pairs)
    examples, count = _file_split(pairs)
    return Split(examples, count, _decode_files)


ADE_LAYOUT = "ROOT/ADEChallengeData2016/{images, annotations}/{training, validation}"


def ade20k_files(root, split):
    """(image, label) file pairs of ``ADEChallengeData2016`` (``train`` = training,
    ``val`` = validation), sorted by name."""
    root = pathlib.Path(root).expanduser()
    ade = _first_dir([root / "ADEChallengeData2016", root], "annotations")
    folders = {"train": "training", "val": "validation"}
    if split not in folders:
        raise ValueError(f"`split` of ade20k must be 'train' or 'val'. Received: split={split!r}")
    if ade is None or not (ade / "images" / folders[split]).is_dir():
        raise DatasetNotFoundError(f"ADE20K was not found in {root}: expected "
                                   f"{ADE_LAYOUT.replace('ROOT', str(root))} (ADEChallengeData2016"
                                   ".zip from sceneparsing.csail.mit.edu); pass its parent "
                                   "directory as data_dir / --data-dir")
    images = sorted((ade / "images" / folders[split]).glob("*.jpg"))
    return [(image, ade / "annotations" / folders[split] / f"{image.stem}.png")
            for image in images]


def _ade20k(split, data_dir=None, **_):
    import tensorflow as tf

    root = _local_root(data_dir)
    pairs = ade20k_files(root, split)
    _check_files(f"ade20k {split!r}", root, pairs)
    examples, count = _file_split(pairs)

    def decode(example):
        image = decode_rgb(tf.io.read_file(example["image"]))
        label = tf.io.decode_png(tf.io.read_file(example["label"]), channels=1)[..., 0]
        return _to_unit_range(image), _shift_zero_label(label, ADE20K_CLASSES)

    return Split(examples, count, decode)


CITYSCAPES_LAYOUT = ("ROOT/cityscapes/{leftImg8bit, gtFine}/{train, val}/<city>/ with "
                     "*_leftImg8bit.png and *_gtFine_labelTrainIds.png (or *_gtFine_labelIds.png)")
CITYSCAPES_CLASSES = 19
# cityscapesScripts' labels.py: label id → train id of the 19 evaluated classes (road,
# sidewalk, building, wall, fence, pole, traffic light, traffic sign, vegetation, terrain,
# sky, person, rider, car, truck, bus, train, motorcycle, bicycle); every other id → 255.
CITYSCAPES_TRAIN_IDS = {7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9,
                        23: 10, 24: 11, 25: 12, 26: 13, 27: 14, 28: 15, 31: 16, 32: 17, 33: 18}
_CITYSCAPES_IMAGE = "_leftImg8bit.png"


def cityscapes_files(root, split):
    """(image, label) file pairs of Cityscapes' fine annotations, sorted by city and name.

    Images are ``leftImg8bit/<split>/<city>/<name>_leftImg8bit.png``; labels
    ``gtFine/<split>/<city>/<name>_gtFine_labelTrainIds.png`` (the 19 train ids and 255,
    written by cityscapesScripts' ``createTrainIdLabelImgs``) when present, else
    ``<name>_gtFine_labelIds.png`` (mapped with :data:`CITYSCAPES_TRAIN_IDS` when read).

    Args:
        root: the directory holding ``cityscapes/`` (or ``cityscapes`` itself).
        split: ``"train"`` or ``"val"``.

    Raises:
        DatasetNotFoundError: naming the directory and the expected layout.
    """
    root = pathlib.Path(root).expanduser()
    if split not in ("train", "val"):
        raise ValueError("`split` of cityscapes must be 'train' or 'val'. "
                         f"Received: split={split!r}")
    city = _first_dir([root / "cityscapes", root], "leftImg8bit")
    if city is None or not (city / "leftImg8bit" / split).is_dir():
        raise DatasetNotFoundError(f"Cityscapes was not found in {root}: expected "
                                   f"{CITYSCAPES_LAYOUT.replace('ROOT', str(root))} "
                                   "(leftImg8bit_trainvaltest.zip and gtFine_trainvaltest.zip "
                                   "from cityscapes-dataset.com); pass its parent directory "
                                   "as data_dir / --data-dir")
    pairs = []
    for image in sorted((city / "leftImg8bit" / split).glob(f"*/*{_CITYSCAPES_IMAGE}")):
        stem = image.name[:-len(_CITYSCAPES_IMAGE)]
        labels = city / "gtFine" / split / image.parent.name
        train_ids = labels / f"{stem}_gtFine_labelTrainIds.png"
        pairs.append((image, train_ids if train_ids.is_file()
                      else labels / f"{stem}_gtFine_labelIds.png"))
    return pairs


def _cityscapes(split, data_dir=None, **_):
    import tensorflow as tf

    root = _local_root(data_dir)
    pairs = cityscapes_files(root, split)
    _check_files(f"cityscapes {split!r}", root, pairs)
    examples, count = _file_split(pairs)
    table = np.full(256, IGNORE_LABEL, np.int32)
    table[list(CITYSCAPES_TRAIN_IDS)] = list(CITYSCAPES_TRAIN_IDS.values())
    table = tf.constant(table)

    def decode(example):
        image = decode_rgb(tf.io.read_file(example["image"]))
        label = tf.cast(tf.io.decode_png(tf.io.read_file(example["label"]), channels=1)[..., 0],
                        tf.int32)
        label_ids = tf.strings.regex_full_match(example["label"], r".*_labelIds\.png")
        label = tf.where(label_ids, tf.gather(table, label), label)
        return _to_unit_range(image), label

    return Split(examples, count, decode)


def _pets(split, data_dir=None, manual_dir=None, download=False):
    import tensorflow as tf

    examples, count = tfds_encoded_examples("oxford_iiit_pet", split,
                                            ("image", "segmentation_mask"), data_dir,
                                            manual_dir, download)

    def decode(example):
        trimap = tf.cast(tf.io.decode_png(example["segmentation_mask"], channels=1)[..., 0],
                         tf.int32)  # 1 pet, 2 background, 3 border
        label = tf.where(trimap == 1, 1, tf.where(trimap == 2, 0, IGNORE_LABEL))
        return _to_unit_range(decode_rgb(example["image"])), label

    return Split(examples, count, decode)


def _scene_parse150(split, data_dir=None, manual_dir=None, download=False):
    import tensorflow as tf

    examples, count = tfds_encoded_examples("scene_parse150", split, ("image", "annotation"),
                                            data_dir, manual_dir, download)

    def decode(example):
        category = tf.io.decode_png(example["annotation"], channels=3)[..., 0]
        label = _shift_zero_label(category, SCENE_PARSE150_TFDS_CLASSES)
        return _to_unit_range(decode_rgb(example["image"])), label

    return Split(examples, count, decode)


def _digits_seg(split, image_size=64, num_images=None, layout="digits_seg", **_):
    import tensorflow as tf

    images, labels = digits_seg(split, num_images=num_images, image_size=image_size,
                                **DIGIT_LAYOUTS[layout])
    indices, lookup = array_examples({"image": images, "label": labels})

    def decode(index):
        example = lookup(index)
        return example["image"], tf.cast(example["label"], tf.int32)

    return Split(indices, len(images), decode, fixed_size=True)


# name → (loader, number of classes, where its data comes from).
DATASETS = {
    "digits_seg": (_digits_seg, DIGITS_SEG_CLASSES, "embedded (scikit-learn digits)"),
    "digits_seg_large": (_digits_seg, DIGITS_SEG_CLASSES,
                         "embedded (scikit-learn digits, 48–96 px on 128² canvases)"),
    "voc": (_voc, 21, "local VOCdevkit (+ SBD)"),
    "ade20k": (_ade20k, ADE20K_CLASSES, "local ADEChallengeData2016"),
    "cityscapes": (_cityscapes, CITYSCAPES_CLASSES, "local cityscapes (leftImg8bit, gtFine)"),
    "oxford_iiit_pet": (_pets, 2, "TFDS"),
    "scene_parse150": (_scene_parse150, SCENE_PARSE150_TFDS_CLASSES, "TFDS (instance categories)"),
}


def load_split(config, split, data_dir=None, manual_dir=None, download=False, num_images=None):
    """The :class:`Split` ``split`` of ``config.dataset`` (the first ``num_images`` when given).

    ``data_dir``: the TFDS data directory for TFDS datasets; for ``voc``, ``ade20k``
    and ``cityscapes`` the directory holding ``VOCdevkit`` (and ``benchmark_RELEASE``),
    ``ADEChallengeData2016`` or ``cityscapes`` (default ``$KCTX_DATA_DIR`` or
    ``~/datasets``).

    Raises:
        DatasetNotFoundError: when the data is not there, naming what and where.
    """
    if config.dataset not in DATASETS:
        raise ValueError(f"Unknown `dataset`: expected one of {sorted(DATASETS)}. "
                         f"Received: {config.dataset!r}")
    loader = DATASETS[config.dataset][0]
    if config.dataset in DIGIT_LAYOUTS:
        return loader(split, image_size=config.image_size, num_images=num_images,
                      layout=config.dataset)
    source = loader(split, data_dir=data_dir, manual_dir=manual_dir, download=download)
    if num_images is not None and num_images < source.num_examples:
        source = source._replace(examples=source.examples.take(num_images),
                                 num_examples=int(num_images))
    return source


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


def training_batches(config, seed=0, start_step=0, data_dir=None, manual_dir=None,
                     download=False, source=None, input_context=None):
    """The endless, step-indexed training stream of ``config`` from ``start_step``.

    Batches are ``(images (B, crop, crop, 3), labels (B, crop, crop) int32)``;
    batch k is a function of (seed, k) (:func:`kctx.data.streaming_batches`),
    each example decoded after the shuffle and augmented with :func:`augment`
    keyed on (seed, its index) with the config's ``scale_range``, ``train_scale``,
    ``cat_max_ratio`` and ``photometric``. ``source``: the training :class:`Split` if
    already loaded; ``input_context``: yield this input pipeline's per-replica
    slices (:func:`kctx.data.replica_slices`), decoding only those.
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


def evaluation_image(image, config):
    """The evaluation preprocessing of one [-1, 1] image under ``config``: resized with
    :func:`rescale_keep_ratio` to ``config.eval_resize`` when set (the official test
    pipelines' ``Resize(scale, keep_ratio=True)``), else unchanged. The labels stay at
    the image's own size: predictions are resized back to it."""
    if config.eval_resize:
        return rescale_keep_ratio(image, config.eval_resize)
    return image


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
