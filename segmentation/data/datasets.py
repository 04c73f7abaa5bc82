"""The registered datasets (:data:`DATASETS`), each read through :func:`load_split`.

Every loader returns a :class:`~segmentation.data.split.Split`: the split's light
examples (arrays, file paths or still-encoded bytes, in a fixed order), their count and
a ``decode`` function to (image float32 (H, W, 3) in [-1, 1], labels int32 (H, W) with
255 ignored).

- ``digits_seg`` and ``digits_seg_large`` (embedded, :mod:`segmentation.data.digits`).
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

The local folders' layouts are in :mod:`segmentation.data.local_files`.
"""

import numpy as np

from kctx.data import array_examples, decode_rgb, tfds_encoded_examples
from segmentation.data.digits import DIGIT_LAYOUTS, DIGITS_SEG_CLASSES, digits_seg
from segmentation.data.local_files import (
    ade20k_files,
    check_files,
    cityscapes_files,
    local_root,
    read_label_file,
    voc_files,
)
from segmentation.data.split import IGNORE_LABEL, Split

ADE20K_CLASSES = 150
SCENE_PARSE150_TFDS_CLASSES = 100  # the instance categories of TFDS's annotations
CITYSCAPES_CLASSES = 19
# cityscapesScripts' labels.py: label id → train id of the 19 evaluated classes (road,
# sidewalk, building, wall, fence, pole, traffic light, traffic sign, vegetation, terrain,
# sky, person, rider, car, truck, bus, train, motorcycle, bicycle); every other id → 255.
CITYSCAPES_TRAIN_IDS = {7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9,
                        23: 10, 24: 11, 25: 12, 26: 13, 27: 14, 28: 15, 31: 16, 32: 17, 33: 18}


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


def _decode_files(example):
    import tensorflow as tf

    image = decode_rgb(tf.io.read_file(example["image"]))
    label = tf.numpy_function(read_label_file, [example["label"]], tf.uint8, stateful=False)
    label = tf.ensure_shape(label, (None, None))
    return _to_unit_range(image), tf.cast(label, tf.int32)


def _local_examples(name, find_files, split, data_dir):
    """``(examples, count)`` of the (image, label) files ``find_files`` lists for
    ``split`` in the local folder ``data_dir``, all checked to exist."""
    root = local_root(data_dir)
    pairs = find_files(root, split)
    check_files(f"{name} {split!r}", root, pairs)
    return _file_split(pairs)


def _voc(split, data_dir=None, **_):
    examples, count = _local_examples("voc", voc_files, split, data_dir)
    return Split(examples, count, _decode_files)


def _ade20k(split, data_dir=None, **_):
    import tensorflow as tf

    examples, count = _local_examples("ade20k", ade20k_files, split, data_dir)

    def decode(example):
        image = decode_rgb(tf.io.read_file(example["image"]))
        label = tf.io.decode_png(tf.io.read_file(example["label"]), channels=1)[..., 0]
        return _to_unit_range(image), _shift_zero_label(label, ADE20K_CLASSES)

    return Split(examples, count, decode)


def _cityscapes(split, data_dir=None, **_):
    import tensorflow as tf

    examples, count = _local_examples("cityscapes", cityscapes_files, split, data_dir)
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
