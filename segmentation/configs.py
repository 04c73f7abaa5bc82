"""Named segmentation configurations: data, model, the optimisation recipe and evaluation."""

import dataclasses

from kctx.layers import check_context_block
from kctx.training import check_nonnegative, check_one_of, check_positive, replace_config
from segmentation.models import BACKBONES, HEADS


@dataclasses.dataclass(frozen=True)
class SegmentationConfig:
    """One experiment's settings (every field is a ``python -m segmentation.train`` flag).

    ``dataset`` is a name in :data:`segmentation.data.DATASETS`; ``image_size``
    is the side of the embedded ``digits_seg`` canvases. Training crops are
    ``crop_size``² after a random rescale by a factor in ``scale_range`` and a
    random left-right flip; padding uses image value 0 and the ignore label.
    SGD with ``momentum`` and weight decay, learning rate
    ``learning_rate · (1 − step / steps)^power`` (the "poly" policy).
    Evaluation is at each image's own size unless ``eval_size`` is set
    (:func:`segmentation.data.evaluation_batches`).

    Attributes:
        name: the config's name.
        dataset: digits_seg (embedded), voc, ade20k (local directories), oxford_iiit_pet or
            scene_parse150 (TFDS).
        num_classes: classes of the dataset (label 255 is ignored).
        backbone: the dilated ResNet (kctx.models.dilated_resnet): resnet50, resnet101 or
            resnet_tiny (one bottleneck per stage, 1/4 width, for from-scratch CPU runs).
        output_stride: the backbone's downsampling, 8 or 16.
        crop_size: side of the training crops.
        batch_size: global batch size.
        steps: training steps.
        context: the head: aspp (DeepLabV3) or a context block between the head's two 3×3
            convs (a kctx.layers.context_block name; hams with HamNet's r = 64, K = 6).
        context_options: arguments of the context block, e.g. {"rank": 16, "steps": 3,
            "one_step_gradient": false} for a ham (none: the block's segmentation recipe).
        learning_rate: initial learning rate of the poly schedule.
        momentum: SGD momentum.
        weight_decay: decoupled weight decay on kernels.
        power: exponent of the poly schedule, lr · (1 − step/steps)^power.
        scale_range: random rescale factors of the training images (low, high).
        head_channels: width of the head's first conv (the context block's d).
        train_split: the split trained on.
        eval_split: the held-out split.
        checkpoint_every: steps between checkpoints.
        image_size: side of the digits_seg canvases.
        eval_size: evaluate images fitted into this square, batched (none: each image at
            its own size, one per batch).
        shuffle_buffer: examples in the training shuffle buffer.
        backbone_weights: the backbone's initial weights: a torchvision ResNet-50 / -101
            checkpoint (.pth, e.g. torchvision's ImageNet resnet101-63fe2227.pth, HamNet's
            and DeepLab's initialisation; read without PyTorch) or a Keras .weights.h5 of
            the backbone (none: random initialisation). The model normalises its [-1, 1]
            images as torchvision's ImageNet models expect.
        eval_multi_scale: score with softmax averaged over input scales 0.5–1.75 (the
            paper's protocol with eval_flip).
        eval_flip: also score the mirrored images.
        eval_images: score only the first N held-out images (none: all).
        eval_ham_steps: K of every Hamburger at evaluation (none: the K it was trained
            with; HamNet, Appendix F, tests other K at evaluation).
        prediction_images: held-out images drawn with their labels and predictions in
            predictions*.png (0: no PNG).
    """

    name: str
    dataset: str
    num_classes: int
    backbone: str
    output_stride: int
    crop_size: int
    batch_size: int
    steps: int
    context: str = "ham_nmf"
    context_options: dict | None = None
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
    eval_size: int | None = None
    shuffle_buffer: int = 4096
    backbone_weights: str | None = None
    eval_multi_scale: bool = False
    eval_flip: bool = False
    eval_images: int | None = None
    eval_ham_steps: int | None = None
    prediction_images: int = 6

    def __post_init__(self):
        check_positive(self, "num_classes", "crop_size", "batch_size", "steps", "head_channels",
                       "checkpoint_every", "image_size", "shuffle_buffer")
        check_positive(self, "learning_rate", "power", integer=False)
        check_nonnegative(self, "momentum", "weight_decay", integer=False)
        check_nonnegative(self, "prediction_images")
        check_one_of(self, "backbone", tuple(BACKBONES))
        check_one_of(self, "output_stride", (8, 16))
        check_context_block(self.context, also=HEADS)
        for name in ("eval_size", "eval_images", "eval_ham_steps"):
            if getattr(self, name) is not None:
                check_positive(self, name)
        low, high = (tuple(self.scale_range) + (None, None))[:2]
        if len(self.scale_range) != 2 or not 0 < low <= high:
            raise ValueError(f"{self.name}: `scale_range` must be two factors 0 < low <= high. "
                             f"Received: scale_range={self.scale_range!r}")


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
