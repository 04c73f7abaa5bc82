"""The segmentation workflow for :func:`kctx.training.run`: HamNet-style segmenters, the
poly schedule, mIoU single-scale or multi-scale + flip, and prediction PNGs.

``python -m segmentation.train`` and ``python -m segmentation.evaluate`` run
it. What is segmentation's own: the dilated ResNet with a Ham (or ASPP) head,
SGD with the poly learning rate, aligned image / label augmentation, and the
confusion-matrix scores (summed over the workers, each scoring its shard).
"""

import keras
import numpy as np

from kctx.layers import set_hamburger_eval_steps
from kctx.training import Workflow, sgd
from segmentation.configs import CONFIGS
from segmentation.data import IGNORE_LABEL, evaluation_batches, load_split, training_batches
from segmentation.models import segmenter


def poly_schedule(config):
    """``learning_rate · (1 − step / steps)^power``, reaching 0 at ``steps``."""
    return keras.optimizers.schedules.PolynomialDecay(
        config.learning_rate, decay_steps=config.steps, end_learning_rate=0.0,
        power=config.power)


def confusion_matrix(model, dataset, num_classes):
    """The (num_classes, num_classes) confusion matrix of ``model`` on ``dataset`` (labels
    255 ignored; rows: labels, columns: predictions)."""
    metric = keras.metrics.MeanIoU(num_classes, ignore_class=IGNORE_LABEL, sparse_y_pred=False)
    for images, labels in dataset:
        metric.update_state(labels, model(images, training=False))
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


def predict_scores(model, images, scales=(1.0,), flip=False):
    """Softmax class scores of ``images`` (B, H, W, 3), averaged over scales and flips.

    Each scale resizes the images bilinearly (side ``round(s · H)``), runs the
    model and resizes its logits back to (H, W) before the softmax; with
    ``flip`` the mirrored images are scored too and mirrored back.
    """
    images = keras.ops.convert_to_tensor(images, "float32")
    height, width = images.shape[1], images.shape[2]
    total = 0.0
    for scale in scales:
        size = (max(1, int(round(height * scale))), max(1, int(round(width * scale))))
        scaled = images if size == (height, width) else keras.ops.image.resize(images, size)
        for mirrored in ((False, True) if flip else (False,)):
            batch = keras.ops.flip(scaled, axis=2) if mirrored else scaled
            logits = model(batch, training=False)
            if mirrored:
                logits = keras.ops.flip(logits, axis=2)
            if size != (height, width):
                logits = keras.ops.image.resize(logits, (height, width))
            total = total + keras.ops.softmax(logits, axis=-1)
    return total


def voc_palette(num_classes=256):
    """PASCAL VOC's colour map (class c's bits spread over R, G, B); 255 is white here."""
    palette = np.zeros((num_classes, 3), np.uint8)
    for index in range(num_classes):
        c, r, g, b = index, 0, 0, 0
        for bit in range(8):
            r |= ((c >> 0) & 1) << (7 - bit)
            g |= ((c >> 1) & 1) << (7 - bit)
            b |= ((c >> 2) & 1) << (7 - bit)
            c >>= 3
        palette[index] = (r, g, b)
    palette[IGNORE_LABEL] = (255, 255, 255)
    return palette


def save_predictions(images, labels, predictions, path, min_side=192):
    """One PNG: a row per image of (image, labels, prediction), labels colourised.

    Images may differ in size (narrower rows are padded with white). Small
    images are enlarged by pixel repetition to at least ``min_side``.
    """
    palette = voc_palette()
    rows = []
    for image, label, prediction in zip(images, labels, predictions):
        picture = ((np.asarray(image) + 1.0) * 127.5).clip(0, 255).astype(np.uint8)
        rows.append(np.concatenate([picture, palette[np.asarray(label)],
                                    palette[np.asarray(prediction)]], axis=1))
    width = max(row.shape[1] for row in rows)
    grid = np.concatenate([np.pad(row, [(0, 0), (0, width - row.shape[1]), (0, 0)],
                                  constant_values=255) for row in rows], axis=0)
    factor = max(1, -(-min_side // min(row.shape[0] for row in rows)))
    grid = np.repeat(np.repeat(grid, factor, axis=0), factor, axis=1)
    keras.utils.save_img(str(path), grid, scale=False)
    return path


class _Scored:
    """A callable model whose outputs are the averaged scores (for segmentation_scores)."""

    def __init__(self, model, scales, flip):
        self.model, self.scales, self.flip = model, scales, flip

    def __call__(self, images, training=False):
        return predict_scores(self.model, images, self.scales, self.flip)


def build_model(config, replicas=1):
    """The segmenter of ``config`` (batch norm synchronised across several replicas)."""
    return segmenter(config.backbone, config.output_stride, config.context, config.num_classes,
                     context_kwargs=config.context_options, head_channels=config.head_channels,
                     synchronized_batch_norm=replicas > 1, backbone_weights=config.backbone_weights)


def _location(run):
    return {"data_dir": run.data.data_dir, "manual_dir": run.data.manual_dir,
            "download": run.data.download}


class SegmentationWorkflow(Workflow):
    """HamNet: a dilated ResNet with a Ham (or ASPP) head, the poly schedule, mIoU."""

    name = "segmentation"
    configs = CONFIGS
    variant_field = "context"
    default_config = "digits_seg"
    evaluation_fields = ("eval_size", "eval_multi_scale", "eval_flip", "eval_images",
                         "eval_ham_steps", "prediction_images")
    export_evaluation = {"prediction_images": 0}  # mIoU of the artifact, no PNGs

    def variant(self, config):
        return config.context

    def check_data(self, run):
        for split in (run.config.train_split, run.config.eval_split):
            load_split(run.config, split, **_location(run))

    def build(self, run):
        model = build_model(run.config, run.replicas)
        model.compile(optimizer=sgd(poly_schedule(run.config), run.config.momentum,
                                    run.config.weight_decay),
                      loss=keras.losses.SparseCategoricalCrossentropy(
                          from_logits=True, ignore_class=IGNORE_LABEL))
        return model

    def train_data(self, run, start_step, input_context):
        return training_batches(run.config, run.seed, start_step, input_context=input_context,
                                **_location(run))

    def evaluate(self, run, model):
        config = run.config
        scales = MULTI_SCALES if config.eval_multi_scale else (1.0,)
        if config.eval_ham_steps is not None:
            set_hamburger_eval_steps(model, config.eval_ham_steps)
        dataset = evaluation_batches(config, num_images=config.eval_images, shard=run.worker,
                                     **_location(run))
        confusion = confusion_matrix(_Scored(model, scales, config.eval_flip), dataset,
                                     config.num_classes)
        results = dict(scores_from_confusion(run.sum_over_workers(confusion)),
                       eval_split=config.eval_split, scales=list(scales), flip=config.eval_flip)
        if config.eval_ham_steps is not None:
            results["ham_eval_steps"] = config.eval_ham_steps
        if config.prediction_images and run.chief:
            suffix = ("_ms" if config.eval_multi_scale else "") + (
                "_flip" if config.eval_flip else "")
            results["predictions"] = self._draw(run, model, scales,
                                                f"predictions{suffix}.png").name
        return results

    def _draw(self, run, model, scales, name):
        config = run.config
        shown = evaluation_batches(config, num_images=config.prediction_images,
                                   **_location(run)).unbatch()
        shown = [(image[None], label) for image, label in shown]
        predictions = [keras.ops.argmax(predict_scores(model, image, scales, config.eval_flip),
                                        axis=-1)[0] for image, _ in shown]
        return save_predictions([image[0].numpy() for image, _ in shown],
                                [label.numpy() for _, label in shown],
                                [keras.ops.convert_to_numpy(p) for p in predictions],
                                run.directory / name)

    def summary(self, results):
        return (f"mIoU {results['miou']:.4f}, pixel accuracy {results['pixel_accuracy']:.4f} "
                f"({results['config']} {results['eval_split']}, {results['variant']}, scales "
                f"{results['scales']}, flip {results['flip']})")


WORKFLOW = SegmentationWorkflow()
