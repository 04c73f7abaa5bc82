"""The embedded default dataset: scikit-learn's handwritten digits.

1,797 real 8×8 grey-scale scans (UCI ML hand-written digits), shipped inside
the scikit-learn wheel, so kctx's default workflows run offline.
"""

import pathlib

import numpy as np

DIGITS_TRAIN_FRACTION = 0.8
DIGITS_SPLIT_SEED = 0


def digits(split="train", image_size=32):
    """Digits as float32 images in [-1, 1] and int32 labels.

    Args:
        split: ``"train"`` (80%, 1,437 images), ``"test"`` (the other 360) or
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
    if image_size != 8:
        import tensorflow as tf

        images = tf.image.resize(images, (image_size, image_size), method="bilinear").numpy()
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
