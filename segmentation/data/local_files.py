"""The benchmarks' files in a local folder: where each split's (image, label) file pairs
are, and how a label file reads.

- PASCAL VOC 2012 (:func:`voc_files`) from ``VOCdevkit``, and the SBD annotations of
  ``train_aug`` (``benchmark_RELEASE``, or the ``SegmentationClassAug`` PNGs).
- ADE20K / SceneParse150 (:func:`ade20k_files`) from ``ADEChallengeData2016``.
- Cityscapes' fine annotations (:func:`cityscapes_files`) from ``cityscapes``.

A folder that is not there, or lacks what a split needs, raises
:class:`kctx.data.DatasetNotFoundError` naming the directory and the expected layout.
"""

import os
import pathlib

import numpy as np

from kctx.data import DatasetNotFoundError


def local_root(data_dir):
    """The folder holding the datasets: ``data_dir``, else ``$KCTX_DATA_DIR``, else
    ``~/datasets``."""
    return pathlib.Path(data_dir or os.environ.get("KCTX_DATA_DIR", "~/datasets")).expanduser()


def check_files(name, root, pairs):
    """Raise :class:`DatasetNotFoundError` when a file of ``pairs`` is missing or there
    are none."""
    missing = [str(path) for pair in pairs for path in pair if not pathlib.Path(path).is_file()]
    if missing:
        raise DatasetNotFoundError(f"{name} in {root} lists {len(missing)} files that do not "
                                   f"exist, e.g. {missing[0]}")
    if not pairs:
        raise DatasetNotFoundError(f"{name} in {root}: the split is empty")


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


CITYSCAPES_LAYOUT = ("ROOT/cityscapes/{leftImg8bit, gtFine}/{train, val}/<city>/ with "
                     "*_leftImg8bit.png and *_gtFine_labelTrainIds.png (or *_gtFine_labelIds.png)")
_CITYSCAPES_IMAGE = "_leftImg8bit.png"


def cityscapes_files(root, split):
    """(image, label) file pairs of Cityscapes' fine annotations, sorted by city and name.

    Images are ``leftImg8bit/<split>/<city>/<name>_leftImg8bit.png``; labels
    ``gtFine/<split>/<city>/<name>_gtFine_labelTrainIds.png`` (the 19 train ids and 255,
    written by cityscapesScripts' ``createTrainIdLabelImgs``) when present, else
    ``<name>_gtFine_labelIds.png`` (mapped with
    :data:`segmentation.data.datasets.CITYSCAPES_TRAIN_IDS` when read).

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
