"""The segmentation workflow for :func:`kctx.training.run`: HamNet-style segmenters and
SegNeXt, SGD or AdamW with the poly schedule, mIoU single-scale or multi-scale + flip on
whole images or sliding windows, and prediction PNGs.

``python -m segmentation.train`` and ``python -m segmentation.evaluate`` run
it. What is segmentation's own: the dilated ResNet with a Ham (or ASPP) head and
SegNeXt, the optimizer recipes, aligned image / label augmentation, the evaluation
protocols (:class:`Predictor`) and the confusion-matrix scores (summed over the
workers, each scoring its shard).
"""

import keras
import numpy as np

from kctx.layers import set_hamburger_eval_steps
from kctx.ops import resize_bilinear
from kctx.training import ParamwiseAdamW, WarmupPolyDecay, Workflow, sgd
from segmentation.configs import CONFIGS
from segmentation.data import (
    IGNORE_LABEL,
    evaluation_batches,
    load_split,
    training_batches,
)
from segmentation.models import segmenter
from segmentation.palettes import palette, voc_palette  # noqa: F401 - voc_palette: public here


def poly_schedule(config):
    """The config's learning rate per step: ``learning_rate · (1 − step / steps)^power``,
    reaching 0 at ``steps``; with ``warmup_steps``, mmengine's linear warm-up from
    ``warmup_ratio · learning_rate`` then poly decay to 0 at the last step
    (:class:`kctx.training.WarmupPolyDecay`)."""
    if config.warmup_steps:
        return WarmupPolyDecay(config.learning_rate, config.steps, config.warmup_steps,
                               config.warmup_ratio, config.power)
    return keras.optimizers.schedules.PolynomialDecay(
        config.learning_rate, decay_steps=config.steps, end_learning_rate=0.0,
        power=config.power)


def build_optimizer(config):
    """The config's optimizer on :func:`poly_schedule`: SGD with momentum and decay on
    kernels (``optimizer="sgd"``), or PyTorch's AdamW with mmengine's ``paramwise``
    multipliers (``"adamw"``, :class:`kctx.training.ParamwiseAdamW`)."""
    schedule = poly_schedule(config)
    if config.optimizer == "adamw":
        return ParamwiseAdamW(schedule, weight_decay=config.weight_decay,
                              paramwise=config.paramwise)
    return sgd(schedule, config.momentum, config.weight_decay)


@keras.saving.register_keras_serializable(package="segmentation")
class PixelCrossEntropy(keras.losses.Loss):
    """Per-pixel softmax cross-entropy of logits, the ignored label left out, averaged
    over every pixel of the batch: the ignored ones count in the mean as zeros, as mmseg
    1.x's ``CrossEntropyLoss`` computes it (its default ``avg_non_ignore=False``).

    ``keras.losses.SparseCategoricalCrossentropy(ignore_class=...)`` (and PyTorch's
    ``ignore_index``) average over the labelled pixels instead: the two differ by the
    share of labelled pixels in the batch, which changes from batch to batch.

    Args:
        ignore_class: the label that marks pixels without one.
        name: the loss's name.
        **kwargs: ``keras.losses.Loss`` arguments (``reduction``, ``dtype``).

    Call arguments:
        y_true: (B, H, W) integer labels.
        y_pred: (B, H, W, classes) logits.

    Example:

    >>> loss = PixelCrossEntropy()
    >>> labels = np.array([[[0, 1, 255, 255]]])  # half the pixels ignored
    >>> round(float(loss(labels, np.zeros((1, 1, 4, 3), "float32"))), 4)  # ln 3 / 2
    0.5493

    Reference:
        mmsegmentation 1.x, ``mmseg/models/losses/cross_entropy_loss.py``.
    """

    def __init__(self, ignore_class=IGNORE_LABEL, name="pixel_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.ignore_class = int(ignore_class)

    def call(self, y_true, y_pred):
        labels = keras.ops.cast(y_true, "int32")
        valid = keras.ops.not_equal(labels, self.ignore_class)
        labels = keras.ops.where(valid, labels, keras.ops.zeros_like(labels))
        losses = keras.ops.sparse_categorical_crossentropy(labels, y_pred, from_logits=True)
        return losses * keras.ops.cast(valid, losses.dtype)  # the batch mean: over all pixels

    def get_config(self):
        return {**super().get_config(), "ignore_class": self.ignore_class}


def build_loss(config):
    """The config's cross-entropy: averaged over the labelled pixels
    (``loss_average="valid"``) or over all pixels (``"all"``, :class:`PixelCrossEntropy`:
    mmseg's, which the SegNeXt recipes use)."""
    if config.loss_average == "all":
        return PixelCrossEntropy(IGNORE_LABEL)
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                      ignore_class=IGNORE_LABEL)


def confusion_matrix(model, dataset, num_classes):
    """The (num_classes, num_classes) confusion matrix of ``model`` on ``dataset`` (labels
    255 ignored; rows: labels, columns: predictions).

    Where the labels' size differs from the images' (evaluation resized the images),
    ``model`` is called with ``output_size`` = the labels' (H, W), as a
    :class:`Predictor` takes it."""
    metric = keras.metrics.MeanIoU(num_classes, ignore_class=IGNORE_LABEL, sparse_y_pred=False)
    for images, labels in dataset:
        size = tuple(labels.shape[1:3])
        if tuple(images.shape[1:3]) == size:
            outputs = model(images, training=False)
        else:
            outputs = model(images, training=False, output_size=size)
        metric.update_state(labels, outputs)
    return keras.ops.convert_to_numpy(metric.total_cm).astype(np.float64)


def scores_from_confusion(confusion):
    """mIoU (classes absent from both labels and predictions do not count, as keras'
    ``MeanIoU``) and pixel accuracy of a confusion matrix."""
    confusion = np.asarray(confusion, np.float64)
    total = confusion.sum()
    true_positives = np.diag(confusion)
    union = confusion.sum(0) + confusion.sum(1) - true_positives
    present = union > 0
    miou = float(np.mean(true_positives[present] / union[present])) if present.any() else 0.0
    return {"miou": miou,
            "pixel_accuracy": float(true_positives.sum() / total) if total else float("nan"),
            "pixels": int(total)}


def segmentation_scores(model, dataset, num_classes):
    """mIoU and pixel accuracy of ``model`` on ``dataset`` (labels 255 ignored), from one
    confusion matrix accumulated over the dataset."""
    return scores_from_confusion(confusion_matrix(model, dataset, num_classes))


MULTI_SCALES = (0.5, 0.75, 1.0, 1.25, 1.5, 1.75)


def predict_scores(model, images, scales=(1.0,), flip=False, output_size=None):
    """Softmax class scores of ``images`` (B, H, W, 3), averaged over scales and flips.

    Each scale resizes the images bilinearly (side ``round(s · H)``), runs the
    model and resizes its logits to ``output_size`` (default (H, W)) before the
    softmax, as mmseg resizes logits back to the original image; with ``flip`` the
    mirrored images are scored too and mirrored back.
    """
    images = keras.ops.convert_to_tensor(images, "float32")
    height, width = images.shape[1], images.shape[2]
    output_size = tuple(output_size or (height, width))
    total = 0.0
    for scale in scales:
        size = (max(1, int(round(height * scale))), max(1, int(round(width * scale))))
        scaled = images if size == (height, width) else keras.ops.image.resize(images, size)
        for mirrored in ((False, True) if flip else (False,)):
            batch = keras.ops.flip(scaled, axis=2) if mirrored else scaled
            logits = model(batch, training=False)
            if mirrored:
                logits = keras.ops.flip(logits, axis=2)
            if tuple(logits.shape[1:3]) != output_size:
                logits = keras.ops.image.resize(logits, output_size)
            total = total + keras.ops.softmax(logits, axis=-1)
    return total


def window_origins(length, crop, stride):
    """The starts of mmseg's sliding windows along one side of ``length``: windows every
    ``stride``, the last moved back to end at the border (one window when ``length`` ≤
    ``crop``)."""
    count = max(length - crop + stride - 1, 0) // stride + 1
    return [max(min(index * stride + crop, length) - crop, 0) for index in range(count)]


def slide_logits(model, images, crop, stride):
    """Logits of ``images`` (B, H, W, 3) from sliding ``crop``² windows every ``stride``.

    Each window's logits are added at its place and the sum divided by the number of
    windows covering each pixel: mmseg's ``EncoderDecoder.slide_inference`` (its
    windows: :func:`window_origins` along each side, the crop smaller where the image
    is). H and W must be known (evaluation runs eagerly, one image per batch).

    Args:
        model: ``model(windows, training=False)`` → (B, h, w, K) logits at the
            windows' size.
        images: (B, H, W, 3).
        crop: the windows' side.
        stride: the step between windows.

    Returns:
        (B, H, W, K) float32 logits.

    Reference:
        mmsegmentation 1.x ``mmseg/models/segmentors/encoder_decoder.py``
        (``slide_inference``).
    """
    images = keras.ops.convert_to_tensor(images, "float32")
    height, width = int(images.shape[1]), int(images.shape[2])
    total, count = 0.0, np.zeros((1, height, width, 1), np.float32)
    for top in window_origins(height, crop, stride):
        for left in window_origins(width, crop, stride):
            bottom, right = min(top + crop, height), min(left + crop, width)
            logits = keras.ops.cast(model(images[:, top:bottom, left:right], training=False),
                                    "float32")
            total = total + keras.ops.pad(logits, [[0, 0], [top, height - bottom],
                                                   [left, width - right], [0, 0]])
            count[:, top:bottom, left:right] += 1.0
    return total / count


class Predictor:
    """A config's evaluation protocol around a model: ``predictor(images, output_size)``
    gives softmax scores summed over its scales and flips, each from whole-image or
    sliding-window logits (:func:`slide_logits`) resized to ``output_size`` (the
    original images' size when evaluation resized them; default the images' own).

    Args:
        model: the segmenter (or an exported artifact behind the Keras interface).
        scales: input scales (:data:`MULTI_SCALES` or (1.0,)).
        flip: also score the mirrored images.
        mode: ``"whole"`` or ``"slide"``.
        crop, stride: the sliding windows' side and step (``"slide"``).

    Example:

    >>> predictor = Predictor.from_config(model, get_config("segnext_cityscapes"))
    >>> scores = predictor(images, output_size=(1024, 2048))  # doctest: +SKIP
    """

    def __init__(self, model, scales=(1.0,), flip=False, mode="whole", crop=None, stride=None):
        self.model, self.scales, self.flip = model, tuple(scales), flip
        self.mode, self.crop, self.stride = mode, crop, stride

    @classmethod
    def from_config(cls, model, config):
        """The protocol of ``config``'s evaluation fields (``eval_ham_steps`` is set on the
        model's Hamburgers here)."""
        if config.eval_ham_steps is not None:
            set_hamburger_eval_steps(model, config.eval_ham_steps)
        return cls(model, MULTI_SCALES if config.eval_multi_scale else (1.0,),
                   config.eval_flip, config.eval_mode, config.eval_crop, config.eval_stride)

    def logits(self, images, training=False):
        """The model's logits of ``images`` at their size, whole or from sliding windows."""
        if self.mode == "slide":
            return slide_logits(self.model, images, self.crop, self.stride)
        return self.model(images, training=training)

    def __call__(self, images, training=False, output_size=None):
        return predict_scores(self.logits, images, self.scales, self.flip, output_size)


def save_predictions(images, labels, predictions, path, min_side=192, colours=None):
    """One PNG: a row per image of (image, labels, prediction), labels colourised with
    ``colours`` (a 256-row palette; default the VOC colours).

    Images may differ in size (narrower rows are padded with white). Small
    images are enlarged by pixel repetition to at least ``min_side``.
    """
    colours = voc_palette() if colours is None else colours
    rows = []
    for image, label, prediction in zip(images, labels, predictions):
        picture = ((np.asarray(image) + 1.0) * 127.5).clip(0, 255).astype(np.uint8)
        rows.append(np.concatenate([picture, colours[np.asarray(label)],
                                    colours[np.asarray(prediction)]], axis=1))
    width = max(row.shape[1] for row in rows)
    grid = np.concatenate([np.pad(row, [(0, 0), (0, width - row.shape[1]), (0, 0)],
                                  constant_values=255) for row in rows], axis=0)
    factor = max(1, -(-min_side // min(row.shape[0] for row in rows)))
    grid = np.repeat(np.repeat(grid, factor, axis=0), factor, axis=1)
    keras.utils.save_img(str(path), grid, scale=False)
    return path


def build_model(config, replicas=1):
    """The segmenter of ``config`` (batch norm synchronised across several replicas)."""
    return segmenter(config.backbone, config.output_stride, config.context, config.num_classes,
                     context_kwargs=config.context_options, head_channels=config.head_channels,
                     synchronized_batch_norm=replicas > 1, backbone_weights=config.backbone_weights,
                     backbone_options=config.backbone_options)


def _location(run):
    return {"data_dir": run.data.data_dir, "manual_dir": run.data.manual_dir,
            "download": run.data.download}


class SegmentationWorkflow(Workflow):
    """HamNet (a dilated ResNet with a Ham or ASPP head) and SegNeXt, the poly schedule, mIoU."""

    name = "segmentation"
    configs = CONFIGS
    variant_field = "context"
    default_config = "digits_seg"
    evaluation_fields = ("eval_size", "eval_multi_scale", "eval_flip", "eval_images",
                         "eval_ham_steps", "eval_resize", "eval_mode", "eval_crop",
                         "eval_stride", "prediction_images")
    export_evaluation = {"prediction_images": 0}  # mIoU of the artifact, no PNGs

    def variant(self, config):
        return config.context

    def check_data(self, run):
        for split in (run.config.train_split, run.config.eval_split):
            load_split(run.config, split, **_location(run))

    def build(self, run):
        model = build_model(run.config, run.replicas)
        model.compile(optimizer=build_optimizer(run.config), loss=build_loss(run.config))
        return model

    def train_data(self, run, start_step, input_context):
        return training_batches(run.config, run.seed, start_step, input_context=input_context,
                                **_location(run))

    def evaluate(self, run, model):
        config = run.config
        predictor = Predictor.from_config(model, config)
        dataset = evaluation_batches(config, num_images=config.eval_images, shard=run.worker,
                                     **_location(run))
        confusion = confusion_matrix(predictor, dataset, config.num_classes)
        results = dict(scores_from_confusion(run.sum_over_workers(confusion)),
                       eval_split=config.eval_split, scales=list(predictor.scales),
                       flip=config.eval_flip)
        if config.eval_resize:
            results["resize"] = list(config.eval_resize)
        if config.eval_mode == "slide":
            results.update(mode="slide", crop=config.eval_crop, stride=config.eval_stride)
        if config.eval_ham_steps is not None:
            results["ham_eval_steps"] = config.eval_ham_steps
        if config.prediction_images and run.chief:
            suffix = ("_ms" if config.eval_multi_scale else "") + (
                "_flip" if config.eval_flip else "")
            results["predictions"] = self._draw(run, predictor,
                                                f"predictions{suffix}.png").name
        return results

    def _draw(self, run, predictor, name):
        config = run.config
        shown = evaluation_batches(config, num_images=config.prediction_images,
                                   **_location(run)).unbatch()
        images, labels, predictions = [], [], []
        for image, label in shown:
            size = tuple(label.shape)
            scores = predictor(image[None], output_size=size)
            predictions.append(keras.ops.convert_to_numpy(keras.ops.argmax(scores, -1)[0]))
            if tuple(image.shape[:2]) != size:  # drawn at the labels' size
                image = resize_bilinear(image[None], size)[0]
            images.append(keras.ops.convert_to_numpy(image))
            labels.append(label.numpy())
        return save_predictions(images, labels, predictions, run.directory / name,
                                colours=palette(config.dataset))

    def summary(self, results):
        protocol = ""
        if results.get("resize"):
            protocol += f", resize {tuple(results['resize'])}"
        if results.get("mode") == "slide":
            protocol += f", slide {results['crop']}/{results['stride']}"
        return (f"mIoU {results['miou']:.4f}, pixel accuracy {results['pixel_accuracy']:.4f} "
                f"({results['config']} {results['eval_split']}, {results['variant']}, scales "
                f"{results['scales']}, flip {results['flip']}{protocol})")


WORKFLOW = SegmentationWorkflow()
