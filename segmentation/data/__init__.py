"""Segmentation data: the embedded ``digits_seg`` and the real benchmarks' loaders.

Every dataset is read through :func:`load_split`, which returns the split's light
examples, their count and a ``decode`` function to (image float32 (H, W, 3) in
[-1, 1], labels int32 (H, W) with 255 ignored). One idea per module:

- :mod:`~segmentation.data.split`: the :class:`Split` every loader returns and
  :data:`IGNORE_LABEL`.
- :mod:`~segmentation.data.digits`: the embedded ``digits_seg`` / ``digits_seg_large``
  canvases of pasted digit scans (:func:`digits_seg`).
- :mod:`~segmentation.data.local_files`: where PASCAL VOC (+ SBD), ADE20K and
  Cityscapes keep their files in a local folder (:func:`voc_files`,
  :func:`ade20k_files`, :func:`cityscapes_files`).
- :mod:`~segmentation.data.datasets`: the registered datasets (:data:`DATASETS`:
  local folders, TFDS, embedded), their decoding, and :func:`load_split`.
- :mod:`~segmentation.data.transforms`: mmseg's transforms (:func:`keep_ratio_size`,
  :func:`rescale_keep_ratio`, :func:`photometric_distortion`, the training
  :func:`augment`, :func:`fit_to_square`, :func:`evaluation_image`).
- :mod:`~segmentation.data.pipelines`: the tf.data streams (:func:`training_batches`,
  :func:`evaluation_batches`).
"""

from segmentation.data.datasets import (
    ADE20K_CLASSES,
    CITYSCAPES_CLASSES,
    CITYSCAPES_TRAIN_IDS,
    DATASETS,
    SCENE_PARSE150_TFDS_CLASSES,
    load_split,
)
from segmentation.data.digits import (
    DIGIT_LAYOUTS,
    DIGITS_SEG_CLASSES,
    DIGITS_SEG_SIZES,
    digits_seg,
)
from segmentation.data.local_files import (
    ADE_LAYOUT,
    CITYSCAPES_LAYOUT,
    SBD_LAYOUT,
    VOC_LAYOUT,
    ade20k_files,
    cityscapes_files,
    read_label_file,
    voc_files,
)
from segmentation.data.pipelines import evaluation_batches, training_batches
from segmentation.data.split import IGNORE_LABEL, Split
from segmentation.data.transforms import (
    augment,
    evaluation_image,
    fit_to_square,
    keep_ratio_size,
    photometric_distortion,
    rescale_keep_ratio,
)

__all__ = [
    "ADE20K_CLASSES", "ADE_LAYOUT", "CITYSCAPES_CLASSES", "CITYSCAPES_LAYOUT",
    "CITYSCAPES_TRAIN_IDS", "DATASETS", "DIGITS_SEG_CLASSES", "DIGITS_SEG_SIZES",
    "DIGIT_LAYOUTS", "IGNORE_LABEL", "SBD_LAYOUT", "SCENE_PARSE150_TFDS_CLASSES", "Split",
    "VOC_LAYOUT", "ade20k_files", "augment", "cityscapes_files", "digits_seg",
    "evaluation_batches", "evaluation_image", "fit_to_square", "keep_ratio_size",
    "load_split", "photometric_distortion", "read_label_file", "rescale_keep_ratio",
    "training_batches", "voc_files",
]
