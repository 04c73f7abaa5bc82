"""The embedded default dataset: scikit-learn's handwritten digits.

1,797 real 8×8 grey-scale scans (UCI ML hand-written digits), shipped inside
the scikit-learn wheel, so kctx's default workflows run offline.
"""

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
