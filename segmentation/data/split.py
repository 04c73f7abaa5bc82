"""What every segmentation dataset gives: a :class:`Split` and the ignored label.

A loader (:func:`segmentation.data.datasets.load_split`) returns the split's light
examples (arrays, file paths or still-encoded bytes, in a fixed order), their count and
a ``decode`` function to (image float32 (H, W, 3) in [-1, 1], labels int32 (H, W)),
where :data:`IGNORE_LABEL` marks pixels that count in no loss or score.
"""

from typing import Callable, NamedTuple

IGNORE_LABEL = 255


class Split(NamedTuple):
    """A dataset split: light ``examples`` in a fixed order, their count, and
    ``decode(example) -> (image float32 (H, W, 3) in [-1, 1], labels int32 (H, W))``.
    ``fixed_size`` when every image has the same size (they can be batched as they are)."""

    examples: object
    num_examples: int
    decode: Callable
    fixed_size: bool = False
