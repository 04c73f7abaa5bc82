"""The embedded datasets ``digits_seg`` and ``digits_seg_large``: digits pasted on canvases.

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

import functools

import numpy as np

from kctx.data import digits
from segmentation.data.split import IGNORE_LABEL

DIGITS_SEG_CLASSES = 11  # background + 10 digits
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
        RGB) and uint8 (n, S, S) with values 0..10 and 255, both read-only (copy
        them to change them); with ``return_boxes`` also a list (per canvas) of
        ``(top, left, bottom, right, class)`` boxes.
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
    images, labels, boxes = _canvases(split, count, int(image_size), int(seed), low, high,
                                      fewest, most)
    return (images, labels, [list(b) for b in boxes]) if return_boxes else (images, labels)


# A run reads a split more than once (the runner's data check, then its pipeline): the
# canvases are made once per process (the 2,000 training canvases took 1.1 of a
# segmentation run's 11 CPU seconds on digits_seg), handed out read-only.
@functools.lru_cache(maxsize=4)
def _canvases(split, count, image_size, seed, low, high, fewest, most):
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
    for array in (images, labels):
        array.setflags(write=False)
    return images, labels, tuple(tuple(b) for b in all_boxes)
