"""Named segmentation configurations: data, model, the optimisation recipe and evaluation."""

import dataclasses

from kctx.layers import check_context_block
from kctx.training import (
    DTYPE_POLICIES,
    check_nonnegative,
    check_one_of,
    check_positive,
    replace_config,
)
from kctx.training.optimizers import check_paramwise
from segmentation.models import BACKBONE_NAMES, HEADS, MSCAN_BACKBONES, SEGNEXT_CONTEXT

OPTIMIZERS = ("sgd", "adamw")
EVAL_MODES = ("whole", "slide")
LOSS_AVERAGES = ("valid", "all")  # the cross-entropy over the labelled pixels or over all
# mmseg's SegNeXt paramwise_cfg.custom_keys: the decode head (kctx's "decode_head-*"
# layers) at 10× the learning rate, MSCAN's norms (norm1, norm2, patch_embed*.norm,
# norm1..4) without weight decay ("pos_block" matches nothing in SegNeXt).
SEGNEXT_PARAMWISE = {"head": {"lr_mult": 10.0}, "norm": {"decay_mult": 0.0},
                     "pos_block": {"decay_mult": 0.0}}
# mmseg's SegNeXt recipe (the segnext_mscan-* configs): SegNeXt-T with the official
# LightHamHead, AdamW 6e-5 with the parameter-wise options above, weight decay 0.01,
# 1,500 linear warm-up steps then poly 1.0, 160k steps, RandomResize 0.5–2.0 of the
# dataset's scale, RandomCrop with cat_max_ratio 0.75, flip and PhotoMetricDistortion.
SEGNEXT_RECIPE = dict(
    backbone="mscan_t", output_stride=8, steps=160_000, context=SEGNEXT_CONTEXT,
    head_channels=None, optimizer="adamw", learning_rate=6e-5, weight_decay=0.01, power=1.0,
    warmup_steps=1500, paramwise=SEGNEXT_PARAMWISE, loss_average="all", scale_range=(0.5, 2.0),
    cat_max_ratio=0.75, photometric=True, train_split="train", eval_split="val",
    checkpoint_every=2000)


@dataclasses.dataclass(frozen=True)
class SegmentationConfig:
    """One experiment's settings (every field is a ``python -m segmentation.train`` flag).

    ``dataset`` is a name in :data:`segmentation.data.DATASETS`; ``image_size``
    is the side of the embedded ``digits_seg`` canvases. Training crops are
    ``crop_size``² after a random rescale by a factor in ``scale_range`` (of the
    image's size, or of ``train_scale``) and a random left-right flip; padding uses
    image value 0 and the ignore label. The segmenter is a dilated ResNet with a
    HamNet head (``resnet*`` backbones) or SegNeXt (``mscan_*``). ``optimizer`` sgd:
    SGD with ``momentum`` and weight decay on kernels; adamw: PyTorch's AdamW with
    mmengine's ``paramwise`` multipliers. Learning rate ``learning_rate · (1 − step /
    steps)^power`` (the "poly" policy), or with ``warmup_steps`` mmengine's linear
    warm-up then poly to 0 at the last step (:class:`kctx.training.WarmupPolyDecay`).
    Evaluation is at each image's own size unless ``eval_size`` or ``eval_resize`` is
    set (:func:`segmentation.data.evaluation_batches`), on whole images or sliding
    windows (``eval_mode``).

    Attributes:
        name: the config's name.
        dataset: digits_seg or digits_seg_large (embedded), voc, ade20k, cityscapes (local
            directories),
            oxford_iiit_pet or scene_parse150 (TFDS).
        num_classes: classes of the dataset (label 255 is ignored).
        backbone: the dilated ResNet (kctx.models.dilated_resnet): resnet50, resnet101 or
            resnet_tiny (one bottleneck per stage, 1/4 width, for from-scratch CPU runs);
            or mscan_t, mscan_s, mscan_b, mscan_l: SegNeXt (kctx.models.segnext), MSCAN
            with the LightHamHead.
        output_stride: the backbone's downsampling, 8 or 16 (mscan: 8, its head's).
        crop_size: side of the training crops.
        batch_size: global batch size.
        steps: training steps.
        context: the head: aspp (DeepLabV3) or a context block between the head's two 3×3
            convs (a kctx.layers.context_block name; hams with HamNet's r = 64, K = 6).
            With mscan: ham_nmf_light is SegNeXt's own Hamburger (official checkpoints
            load); another block takes its place in the LightHamHead (none: the paper's
            decoder without it).
        context_options: arguments of the context block, e.g. {"rank": 16, "steps": 3,
            "one_step_gradient": false} for a ham (none: the block's segmentation recipe;
            with mscan and ham_nmf_light, kctx.layers.Hamburger arguments over the
            official ones).
        learning_rate: initial learning rate of the poly schedule.
        momentum: SGD momentum.
        weight_decay: decoupled weight decay (sgd: on kernels; adamw: see paramwise).
        power: exponent of the poly schedule, lr · (1 − step/steps)^power.
        scale_range: random rescale factors of the training images (low, high).
        head_channels: width of the head's first conv (the context block's d); with mscan
            the LightHamHead's channels and ham_channels (none: 512 for the ResNets, the
            SegNeXt variant's 256 / 256 / 512 / 1024 for T / S / B / L).
        train_split: the split trained on.
        eval_split: the held-out split.
        checkpoint_every: steps between checkpoints.
        image_size: side of the digits_seg canvases.
        eval_size: evaluate images fitted into this square, batched (none: each image at
            its own size, one per batch).
        shuffle_buffer: examples in the training shuffle buffer.
        backbone_weights: the backbone's initial weights: a torchvision ResNet-50 / -101
            checkpoint (.pth, e.g. torchvision's ImageNet resnet101-63fe2227.pth, HamNet's
            and DeepLab's initialisation; read without PyTorch), for mscan an MSCAN
            ImageNet checkpoint (mmseg's mscan_t_20230227-119e8c9f.pth ...; a SegNeXt
            checkpoint gives its backbone), or a Keras .weights.h5 of the backbone (none:
            random initialisation). The model normalises its [-1, 1] images as the
            ImageNet weights expect.
        backbone_options: other arguments of the backbone (none: the named one's): for
            mscan, kctx.models.mscan's embed_dims, depths, mlp_ratios, drop_path_rate;
            for the ResNets, kctx.models.dilated_resnet's depth, width.
        optimizer: sgd (SGD with momentum, decay on kernels) or adamw (PyTorch's AdamW,
            betas (0.9, 0.999), eps 1e-8, decay on every weight that paramwise leaves it
            on; kctx.training.ParamwiseAdamW).
        paramwise: adamw only: mmengine's paramwise custom_keys, {substring of a weight's
            name: {"lr_mult": m, "decay_mult": d}}; the longest matching key alone
            applies (none: every weight alike).
        warmup_steps: linear warm-up from warmup_ratio · learning_rate over these steps,
            then poly decay to 0 at the last step, as mmengine's LinearLR + PolyLR (0: the
            plain poly schedule).
        warmup_ratio: the warm-up's first factor of the learning rate.
        loss_average: what the per-pixel cross-entropy is averaged over: valid (the
            labelled pixels, PyTorch's and Keras' ignore_index / ignore_class) or all (every
            pixel, the ignored ones adding 0: mmseg 1.x's CrossEntropyLoss with its default
            avg_non_ignore=False, which the SegNeXt recipes train with).
        train_scale: (long, short) the random rescale factors apply to, keeping the
            aspect ratio (mmseg's RandomResize scale, e.g. 2048,512; none: the image's
            own size).
        cat_max_ratio: crops are redrawn (up to 10 times) while one class covers this
            share of the labelled pixels or more (mmseg's RandomCrop; 1: any crop).
        photometric: mmseg's PhotoMetricDistortion of the training crops (brightness,
            contrast, saturation, hue).
        eval_multi_scale: score with softmax averaged over input scales 0.5–1.75 (the
            paper's protocol with eval_flip).
        eval_flip: also score the mirrored images.
        eval_images: score only the first N held-out images (none: all).
        eval_ham_steps: K of every Hamburger at evaluation (none: the K it was trained
            with; HamNet, Appendix F, tests other K at evaluation).
        eval_resize: (long, short): resize each held-out image to fit, keeping its aspect
            ratio, as mmseg's test pipelines (e.g. 2048,512 for ADE20K); the logits are
            resized back to the labels' size (none: no resize).
        eval_mode: whole (the image in one pass) or slide (mmseg's sliding windows of
            eval_crop² at eval_stride, logits averaged where they overlap).
        eval_crop: side of the sliding windows (slide mode).
        eval_stride: step between sliding windows (slide mode).
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
    head_channels: int | None = 512
    train_split: str = "train"
    eval_split: str = "test"
    checkpoint_every: int = 500
    image_size: int = 64
    eval_size: int | None = None
    shuffle_buffer: int = 4096
    backbone_weights: str | None = None
    backbone_options: dict | None = None
    optimizer: str = "sgd"
    paramwise: dict | None = None
    warmup_steps: int = 0
    warmup_ratio: float = 1e-6
    loss_average: str = "valid"
    train_scale: tuple | None = None
    cat_max_ratio: float = 1.0
    photometric: bool = False
    eval_multi_scale: bool = False
    eval_flip: bool = False
    eval_images: int | None = None
    eval_ham_steps: int | None = None
    eval_resize: tuple | None = None
    eval_mode: str = "whole"
    eval_crop: int | None = None
    eval_stride: int | None = None
    prediction_images: int = 6
    dtype_policy: str = "float32"

    def __post_init__(self):
        check_one_of(self, "dtype_policy", DTYPE_POLICIES)
        check_positive(self, "num_classes", "crop_size", "batch_size", "steps",
                       "checkpoint_every", "image_size", "shuffle_buffer")
        check_positive(self, "learning_rate", "power", "warmup_ratio", "cat_max_ratio",
                       integer=False)
        check_nonnegative(self, "momentum", "weight_decay", integer=False)
        check_nonnegative(self, "prediction_images", "warmup_steps")
        check_one_of(self, "backbone", BACKBONE_NAMES)
        check_one_of(self, "output_stride", (8, 16))
        check_one_of(self, "optimizer", OPTIMIZERS)
        check_one_of(self, "eval_mode", EVAL_MODES)
        check_one_of(self, "loss_average", LOSS_AVERAGES)
        check_context_block(self.context, also=HEADS)
        for name in ("head_channels", "eval_size", "eval_images", "eval_ham_steps",
                     "eval_crop", "eval_stride"):
            if getattr(self, name) is not None:
                check_positive(self, name)
        low, high = (tuple(self.scale_range) + (None, None))[:2]
        if len(self.scale_range) != 2 or not 0 < low <= high:
            raise ValueError(f"{self.name}: `scale_range` must be two factors 0 < low <= high. "
                             f"Received: scale_range={self.scale_range!r}")
        for name in ("train_scale", "eval_resize"):
            value = getattr(self, name)
            if value is not None and (len(value) != 2 or not all(
                    isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
                raise ValueError(f"{self.name}: `{name}` must be two positive integer sides "
                                 f"(long, short), e.g. 2048,512. Received: {name}={value!r}")
        if self.backbone in MSCAN_BACKBONES:
            if self.output_stride != 8 or self.context in HEADS:
                raise ValueError(
                    f"{self.name}: SegNeXt (backbone {self.backbone}) decodes at output "
                    "stride 8 with the LightHamHead and a context block (e.g. "
                    f"{SEGNEXT_CONTEXT}). Received: output_stride={self.output_stride}, "
                    f"context={self.context!r}")
        check_paramwise(self.paramwise)
        if self.paramwise is not None and self.optimizer != "adamw":
            raise ValueError(f"{self.name}: `paramwise` applies to optimizer='adamw'. "
                             f"Received: optimizer={self.optimizer!r}, "
                             f"paramwise={self.paramwise!r}")
        if self.eval_size is not None and self.eval_resize is not None:
            raise ValueError(f"{self.name}: `eval_size` and `eval_resize` exclude each other. "
                             f"Received: eval_size={self.eval_size}, "
                             f"eval_resize={self.eval_resize!r}")
        if self.eval_mode == "slide" and (self.eval_crop is None or self.eval_stride is None):
            raise ValueError(f"{self.name}: eval_mode='slide' needs `eval_crop` and "
                             f"`eval_stride`. Received: eval_crop={self.eval_crop!r}, "
                             f"eval_stride={self.eval_stride!r}")


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
    # Larger objects: 1–3 digits of 48–96 px on 128×128 canvases (digits_seg_large), wider
    # than the ResNet-tiny's effective receptive field at the head, whose map is 16×16
    # (N = 256): the regime where a global-context block can matter. Batch 8 keeps a step
    # at about twice digits_seg's cost.
    "digits_seg_large": SegmentationConfig(
        name="digits_seg_large", dataset="digits_seg_large", num_classes=11, image_size=128,
        backbone="resnet_tiny", output_stride=8, crop_size=128, batch_size=8, steps=1500,
        learning_rate=0.02, head_channels=128, scale_range=(0.75, 1.5), checkpoint_every=250,
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
    # SegNeXt (Guo et al., NeurIPS 2022) on ADE20K as mmseg's
    # segnext_mscan-t_1xb16-adamw-160k_ade20k-512x512 (--backbone mscan_s / _b / _l for the
    # others; pass --backbone-weights the MSCAN ImageNet .pth, e.g. mscan_t_20230227-119e8c9f):
    # AdamW lr 6e-5, weight decay 0.01, head ×10, norms undecayed, 1,500 warm-up steps
    # then poly 1.0; batch 16 of 512² crops after RandomResize((2048, 512), 0.5–2.0),
    # RandomCrop with cat_max_ratio 0.75, flip and PhotoMetricDistortion; 160k steps;
    # evaluation at Resize((2048, 512), keep_ratio), whole image, label 0 ignored.
    "segnext_ade20k": SegmentationConfig(
        name="segnext_ade20k", dataset="ade20k", num_classes=150, crop_size=512, batch_size=16,
        train_scale=(2048, 512), eval_resize=(2048, 512), **SEGNEXT_RECIPE,
    ),
    # SegNeXt on Cityscapes as the original repository's segnext.*.1024x1024.city.160k
    # (the same AdamW recipe; 19 classes): 1024² crops after Resize((2048, 1024),
    # 0.5–2.0), batch 32 (8 GPUs × 4 in its T and S configs; B and L: 8 × 2, pass
    # --batch-size 16), 160k steps; evaluation at (2048, 1024) with sliding 1024² windows
    # at stride 768.
    "segnext_cityscapes": SegmentationConfig(
        name="segnext_cityscapes", dataset="cityscapes", num_classes=19, crop_size=1024,
        batch_size=32, train_scale=(2048, 1024), eval_resize=(2048, 1024), eval_mode="slide",
        eval_crop=1024, eval_stride=768, **SEGNEXT_RECIPE,
    ),
    # SegNeXt-T from scratch on the embedded digits_seg (the digits_seg data and
    # augmentation) with the SegNeXt optimiser recipe at a from-scratch learning rate
    # (1,000-step trials: lr 3e-4 / 1e-3 / 3e-3 / 6e-3 / 1.2e-2 gave mIoU 0.25 / 0.44 /
    # 0.53 / 0.49 / 0.41): 1,500 steps, 0.16 s/step, 272 s, mIoU 0.666 on 2 CPU cores.
    "segnext_digits": SegmentationConfig(
        name="segnext_digits", dataset="digits_seg", num_classes=11, image_size=64,
        backbone="mscan_t", output_stride=8, crop_size=64, batch_size=16, steps=1500,
        context=SEGNEXT_CONTEXT, head_channels=None, optimizer="adamw", learning_rate=3e-3,
        weight_decay=0.01, power=1.0, warmup_steps=100, paramwise=SEGNEXT_PARAMWISE,
        scale_range=(0.75, 1.5), checkpoint_every=250,
    ),
    # SegNeXt-T from scratch on digits_seg_large (stage 2, the head's map: 16×16), as
    # segnext_digits with digits_seg_large's canvases and batch.
    "segnext_digits_large": SegmentationConfig(
        name="segnext_digits_large", dataset="digits_seg_large", num_classes=11,
        image_size=128, backbone="mscan_t", output_stride=8, crop_size=128, batch_size=8,
        steps=1500, context=SEGNEXT_CONTEXT, head_channels=None, optimizer="adamw",
        learning_rate=3e-3, weight_decay=0.01, power=1.0, warmup_steps=100,
        paramwise=SEGNEXT_PARAMWISE, scale_range=(0.75, 1.5), checkpoint_every=250,
    ),
}


def get_config(name, **overrides):
    """A named config, optionally with fields replaced (``None`` values are ignored)."""
    return replace_config(CONFIGS, name, "segmentation", **overrides)
