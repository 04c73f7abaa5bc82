"""Named segmentation configurations: data, model and the optimisation recipe."""

import dataclasses

from kctx.training import replace_config


@dataclasses.dataclass(frozen=True)
class SegmentationConfig:
    """One experiment's settings.

    ``image_size`` is the side of the embedded canvases. Training crops are
    ``crop_size``² after a random rescale by a factor in ``scale_range`` and a
    random left-right flip; padding uses image value 0 and the ignore label.
    SGD with ``momentum`` and weight decay, learning rate
    ``learning_rate · (1 − step / steps)^power`` (the "poly" policy).
    """

    name: str
    dataset: str
    num_classes: int
    image_size: int
    backbone: str
    output_stride: int
    crop_size: int
    batch_size: int
    steps: int
    learning_rate: float = 0.009
    momentum: float = 0.9
    weight_decay: float = 1e-4
    power: float = 0.9
    scale_range: tuple = (0.5, 2.0)
    head_channels: int = 512
    train_split: str = "train"
    eval_split: str = "test"
    checkpoint_every: int = 500


CONFIGS = {
    # The embedded default: 2,000 / 300 canvases of real digits (segmentation.data),
    # a 1/4-width one-block-per-stage ResNet trained from scratch at output stride 8
    # (8×8 features for 64×64 crops), a 128-wide head, a few minutes on 2 CPU cores.
    "digits_seg": SegmentationConfig(
        name="digits_seg", dataset="digits_seg", num_classes=11, image_size=64,
        backbone="resnet_tiny",
        output_stride=8, crop_size=64, batch_size=16, steps=1500, learning_rate=0.02,
        head_channels=128, scale_range=(0.75, 1.5), checkpoint_every=250,
    ),
}


def get_config(name, **overrides):
    """A named config, optionally with fields replaced (``None`` values are ignored)."""
    return replace_config(CONFIGS, name, "segmentation", **overrides)
