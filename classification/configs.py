"""Named classification configurations: model, data, preprocessing and the optimisation recipe."""

import dataclasses

from kctx.layers import check_context_block
from kctx.models import KANET_FAMILY, MSCAN_VARIANTS, resnet50_positions
from kctx.training import (
    DTYPE_POLICIES,
    check_nonnegative,
    check_one_of,
    check_positive,
    replace_config,
)

MODELS = tuple(KANET_FAMILY)
# SegNeXt's MSCAN backbones as classifiers (kctx.models.mscan_classifier): pretraining for
# segmentation.train --backbone-weights RUN/model.keras.
MSCAN_BACKBONES = {f"mscan_{variant}": variant for variant in MSCAN_VARIANTS}
BACKBONES = ("resnet50", *MSCAN_BACKBONES)
OPTIMIZERS = ("sgd", "adamw")


@dataclasses.dataclass(frozen=True)
class ClassificationConfig:
    """One experiment's settings (every field is a ``python -m classification.train`` flag).

    Preprocessing: images are scaled to [-1, 1]; training images are resized
    to ``resize``×``resize`` (when set), padded by ``pad`` pixels of value −1,
    randomly cropped to ``image_size`` and flipped left-right when ``flip``;
    evaluation images are resized the same way and centre-cropped.

    Optimisation: SGD with ``momentum`` (or AdamW), learning rate ``learning_rate``
    multiplied by ``decay_factor`` at each epoch in ``decay_epochs``,
    decoupled weight decay ``weight_decay`` on kernels (not on biases or
    batch-norm scales; AdamW: on every weight), ``epochs`` passes over ``train_split``.

    Attributes:
        name: the config's name.
        dataset: ``digits`` (embedded) or a TFDS name (cifar10, imagenette/320px-v2,
            imagenet2012).
        image_size: side of the (cropped) input images.
        num_classes: classes of the dataset.
        model: kanet_kv, kanet_qkv, mobilenet_v2, attnnet, attnnet_pool, mobilenet_v2_kao or
            kanet_none (a row of the KANet paper's Tables 2–4); ignored with a backbone.
        backbone: none, resnet50 (keras.applications, random initialisation) to train
            with context blocks inserted, or mscan_t, mscan_s, mscan_b, mscan_l (SegNeXt's
            backbone with VAN's classifier, kctx.models.mscan_classifier: the model's
            backbone is what segmentation.train --backbone-weights RUN/model.keras takes).
        context: with the resnet50 backbone, the context block inserted (a
            kctx.layers.context_block name; none: the plain backbone).
        at: with a backbone, the stages the block goes into: res2..res5 or e.g. res3+4+5.
        batch_size: global batch size.
        epochs: passes over the training split.
        learning_rate: initial learning rate.
        decay_epochs: epochs at which the learning rate is multiplied by decay_factor (a
            shorter --epochs keeps them at the same fractions).
        decay_factor: the learning-rate multiplier at each decay epoch.
        optimizer: sgd (with momentum, decay on kernels) or adamw (PyTorch's AdamW, betas
            (0.9, 0.999), eps 1e-8, decay on every weight; kctx.training.ParamwiseAdamW).
        momentum: SGD momentum.
        weight_decay: decoupled weight decay (sgd: on kernels).
        dropout_rate: dropout before the classifier.
        width_multiplier: MobileNetV2's α.
        output_stride: the network's total downsampling: 32, 16 or 8.
        norm_momentum: momentum of every batch normalisation.
        resize: side the images are resized to before cropping (none: no resize).
        pad: pixels of value -1 padded around training images before the random crop.
        flip: random left-right flips in training.
        train_split: the split trained on.
        eval_split: the held-out split.
        validation_freq: epochs between held-out evaluations during training.
        eval_batch_size: batch of the held-out evaluation (none: batch_size).
    """

    name: str
    dataset: str
    image_size: int
    num_classes: int
    batch_size: int
    epochs: int
    learning_rate: float
    decay_epochs: tuple
    model: str = "kanet_kv"
    backbone: str | None = None
    context: str | None = None
    at: str = "res4"
    decay_factor: float = 0.1
    optimizer: str = "sgd"
    momentum: float = 0.9
    weight_decay: float = 4e-5
    dropout_rate: float = 0.2
    width_multiplier: float = 1.0
    output_stride: int = 32
    norm_momentum: float = 0.999
    resize: int | None = None
    pad: int = 0
    flip: bool = True
    train_split: str = "train"
    eval_split: str = "test"
    validation_freq: int = 1
    eval_batch_size: int | None = None
    dtype_policy: str = "float32"

    def __post_init__(self):
        check_one_of(self, "dtype_policy", DTYPE_POLICIES)
        check_positive(self, "image_size", "num_classes", "batch_size", "epochs",
                       "validation_freq")
        check_positive(self, "learning_rate", "width_multiplier", integer=False)
        check_nonnegative(self, "pad")
        check_nonnegative(self, "weight_decay", "dropout_rate", "momentum", integer=False)
        if self.eval_batch_size is not None:
            check_positive(self, "eval_batch_size")
        check_one_of(self, "model", MODELS)
        check_one_of(self, "output_stride", (8, 16, 32))
        check_one_of(self, "optimizer", OPTIMIZERS)
        if self.backbone is None and self.context is not None:
            raise ValueError(f"{self.name}: `context` / --context is inserted into a "
                             f"`backbone` / --backbone (one of {BACKBONES}). Received: "
                             f"context={self.context!r}, backbone=None")
        if self.backbone is not None:
            check_one_of(self, "backbone", BACKBONES)
            if self.backbone in MSCAN_BACKBONES and self.context not in (None, "none"):
                raise ValueError(f"{self.name}: `context` / --context is inserted into the "
                                 "resnet50 backbone; MSCAN has its own attention. Received: "
                                 f"backbone={self.backbone!r}, context={self.context!r}")
            if self.context is not None:
                check_context_block(self.context, also=("none",))
            resnet50_positions(self.at)  # a named error for a bad stage
        if any(not 0 < e < self.epochs for e in self.decay_epochs) or \
                list(self.decay_epochs) != sorted(self.decay_epochs):
            raise ValueError(
                f"{self.name}: `decay_epochs` must increase within (0, epochs={self.epochs}). "
                f"Received: decay_epochs={self.decay_epochs}")
        crop_from = self.resize or self.image_size
        if crop_from + 2 * self.pad < self.image_size:
            raise ValueError(f"{self.name}: resize {self.resize} with pad {self.pad} is smaller "
                             f"than image_size={self.image_size}")


def _paper_recipe(name, dataset, num_classes, batch_size, eval_split):
    # Gao, Wang & Ji (KDD 2020), Sec. 4.3: scale to 256×256, random 224×224 crop
    # (and flip, He et al. 2016), centre crop at test time; SGD momentum 0.9,
    # lr 0.1 ×0.1 at epochs 80, 105, 120 of 150, dropout keep 0.8 (batch 512 on
    # 8 GPUs). Weight decay 4e-5 is MobileNetV2's ("the same settings as
    # MobileNetV2"), BN momentum 0.999 Keras' MobileNetV2's.
    return ClassificationConfig(
        name=name, dataset=dataset, image_size=224, num_classes=num_classes,
        batch_size=batch_size, epochs=150, learning_rate=0.1, decay_epochs=(80, 105, 120),
        weight_decay=4e-5, dropout_rate=0.2, resize=256, flip=True, eval_split=eval_split,
    )


CONFIGS = {
    # The embedded default: scikit-learn's digits (1,438 train / 359 held out),
    # bilinearly upsampled 8→32, grey copied to RGB. Output stride 8 (the CIFAR
    # adaptation) keeps the attention modules at 16², 8², 4²; width 0.5 and
    # BN momentum 0.9 fit a few minutes on 2 CPU cores. No flips: digits are
    # not mirror-symmetric; ±2-pixel shifts instead. The paper's schedule shape
    # (×0.1 at 53%, 70%, 80% of training) over 20 epochs, from lr 0.02 (the
    # paper's 0.1 at batch 512 scaled linearly to batch 64 is 0.0125; at 10
    # epochs lr 0.02 gave KANet_KV 98.3% / MobileNetV2 99.2%, lr 0.05 98.3% / 98.6%).
    "digits": ClassificationConfig(
        name="digits", dataset="digits", image_size=32, num_classes=10, batch_size=64,
        epochs=20, learning_rate=0.02, decay_epochs=(11, 14, 16), weight_decay=4e-5,
        dropout_rate=0.2, width_multiplier=0.5, output_stride=8, norm_momentum=0.9,
        pad=2, flip=False, train_split="train", eval_split="test",
    ),
    # MSCAN-T pretrained on the digits as SegNeXt's backbone is on ImageNet (the stand-in
    # for segmentation.train --backbone-weights on the embedded canvases): the digits at
    # 64×64, the size of digits_seg_large's (48-96 px), ±4-pixel shifts, no flips; AdamW
    # as MSCAN's and VAN's ImageNet recipe (lr 1e-3 at batch 1,024, weight decay 0.05),
    # lr 1e-3 at batch 64, ×0.1 at 60% and 80% of 10 epochs (220 steps; one epoch reached
    # 93.6% top-1 on the test split, measured beside other work).
    "digits_mscan": ClassificationConfig(
        name="digits_mscan", dataset="digits", image_size=64, num_classes=10, batch_size=64,
        epochs=10, learning_rate=1e-3, decay_epochs=(6, 8), optimizer="adamw",
        weight_decay=0.05, dropout_rate=0.0, backbone="mscan_t", pad=4, flip=False,
        train_split="train", eval_split="test",
    ),
    # CIFAR-10 with the paper's schedule at 32×32: pad 4, random crop, flip.
    "cifar10": ClassificationConfig(
        name="cifar10", dataset="cifar10", image_size=32, num_classes=10, batch_size=128,
        epochs=150, learning_rate=0.1, decay_epochs=(80, 105, 120), weight_decay=4e-5,
        output_stride=8, norm_momentum=0.99, pad=4, flip=True, eval_split="test",
    ),
    # Imagenette (10 ImageNet classes, 320 px shorter side) with the ImageNet recipe.
    "imagenette": dataclasses.replace(
        _paper_recipe("imagenette", "imagenette/320px-v2", 10, 64, "validation"),
        norm_momentum=0.99),
    # The paper's ImageNet recipe (TFDS imagenet2012 from its manual download).
    "imagenet": _paper_recipe("imagenet", "imagenet2012", 1000, 512, "validation"),
}


def model_label(config):
    """The run's model name: ``model``, ``<backbone>-<context>-<at>`` with resnet50, or the
    MSCAN backbone's name."""
    if config.backbone is None:
        return config.model
    if config.backbone in MSCAN_BACKBONES:
        return config.backbone
    context = config.context or "none"
    return f"{config.backbone}-{context}" + (
        "" if context == "none" else f"-{config.at.replace('+', '')}")


def get_config(name, **overrides):
    """A named config with fields replaced (:func:`kctx.training.replace_config`); a new
    ``epochs`` moves the decay epochs to the same fractions of training."""
    config = replace_config(CONFIGS, name, "classification")
    if overrides.get("epochs") is not None and "decay_epochs" not in overrides:
        # Keep the schedule's shape: decays at the same fractions of training.
        scale = overrides["epochs"] / config.epochs
        overrides["decay_epochs"] = tuple(
            sorted({min(max(1, round(e * scale)), overrides["epochs"] - 1)
                    for e in config.decay_epochs})) if overrides["epochs"] > 1 else ()
    return replace_config({name: config}, name, "classification", **overrides)
