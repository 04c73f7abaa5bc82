"""Named segmentation configurations: data, model and the optimisation recipe."""

import dataclasses

from kctx.training import replace_config


@dataclasses.dataclass(frozen=True)
class SegmentationConfig:
    """One experiment's settings.

    ``dataset`` is a name in :data:`segmentation.data.DATASETS`; ``image_size``
    is the side of the embedded ``digits_seg`` canvases. Training crops are
    ``crop_size``² after a random rescale by a factor in ``scale_range`` and a
    random left-right flip; padding uses image value 0 and the ignore label.
    SGD with ``momentum`` and weight decay, learning rate
    ``learning_rate · (1 − step / steps)^power`` (the "poly" policy).
    Evaluation is at each image's own size unless ``eval_size`` is set
    (:func:`segmentation.data.evaluation_batches`).
    """

    name: str
    dataset: str
    num_classes: int
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
    image_size: int = 64
    eval_size: int = None
    shuffle_buffer: int = 4096


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
    # HamNet on PASCAL VOC (Appendix E.3): dilated ResNet-101 at output stride 8, crops
    # 513², batch 16, 60k steps, lr 0.009 poly, weight decay 1e-4, scales 0.5–2, the
    # 10,582-image train_aug set (VOC train + SBD), evaluated on the 1,449 val images.
    "voc": SegmentationConfig(
        name="voc", dataset="voc", num_classes=21, backbone="resnet101", output_stride=8,
        crop_size=513, batch_size=16, steps=60_000, learning_rate=0.009,
        train_split="train_aug", eval_split="val", checkpoint_every=1000,
    ),
    # A cheaper VOC recipe: ResNet-50 at output stride 16 (4× fewer head positions).
    "voc_fast": SegmentationConfig(
        name="voc_fast", dataset="voc", num_classes=21, backbone="resnet50", output_stride=16,
        crop_size=513, batch_size=12, steps=30_000, learning_rate=0.009,
        train_split="train_aug", eval_split="val", checkpoint_every=1000,
    ),
    # ADE20K (ADEChallengeData2016, 150 classes): the common 160k-step, 512² recipe.
    "ade20k": SegmentationConfig(
        name="ade20k", dataset="ade20k", num_classes=150, backbone="resnet101",
        output_stride=8, crop_size=512, batch_size=16, steps=160_000, learning_rate=0.01,
        train_split="train", eval_split="val", checkpoint_every=2000,
    ),
    # Oxford-IIIT Pet trimaps (TFDS): pet vs background, borders ignored.
    "pets": SegmentationConfig(
        name="pets", dataset="oxford_iiit_pet", num_classes=2, backbone="resnet50",
        output_stride=16, crop_size=384, batch_size=16, steps=10_000, learning_rate=0.01,
        train_split="train", eval_split="test", checkpoint_every=1000,
    ),
    # TFDS scene_parse150 (its 100 instance categories, see segmentation.data).
    "scene_parse150": SegmentationConfig(
        name="scene_parse150", dataset="scene_parse150", num_classes=100, backbone="resnet50",
        output_stride=16, crop_size=512, batch_size=16, steps=80_000, learning_rate=0.01,
        train_split="train", eval_split="test", checkpoint_every=2000,
    ),
}


def get_config(name, **overrides):
    """A named config, optionally with fields replaced (``None`` values are ignored)."""
    return replace_config(CONFIGS, name, "segmentation", **overrides)
