"""``python -m segmentation.evaluate --model-dir DIR [--multi-scale] [--flip]``: mIoU and PNGs.

Reads the run's ``run.json`` and ``model.keras`` (written by
``segmentation.train``), scores the held-out split (mIoU and pixel accuracy,
label 255 ignored), single-scale or with the paper's test protocol
(multi-scale and flipping: softmax scores averaged over input scales 0.5–1.75
and their mirror images, Appendix E.3), and writes colourised predictions of
a few images as PNGs.
"""

import json
import os
import pathlib

import keras
import numpy as np

from kctx.data import add_tfds_arguments
from kctx.training import read_run, workflow_parser
from segmentation.configs import get_config
from segmentation.data import IGNORE_LABEL, evaluation_batches
from segmentation.models import ResizeToMatch  # noqa: F401 - registers the layers for loading
from segmentation.train import DATA_DIR_HELP, segmentation_scores

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


def evaluate(model_dir, multi_scale=False, flip=False, num_images=6, batch_size=None,
             max_images=None, eval_size=None, data_dir=None, manual_dir=None, download=False):
    """Score a ``segmentation.train`` run; returns a dict (mIoU, pixel accuracy, PNG path).

    ``num_images`` go into the PNG; ``max_images`` limits the scored images
    (default: the whole held-out split). ``eval_size`` and the data location
    default to the run's (``run.json``).
    """
    model_dir = pathlib.Path(model_dir)
    run = read_run(model_dir, "segmentation.train")
    config = get_config(run["config"], eval_size=eval_size or run.get("eval_size"))
    model = keras.saving.load_model(model_dir / "model.keras")
    scales = MULTI_SCALES if multi_scale else (1.0,)
    dataset = evaluation_batches(config, batch_size=batch_size, num_images=max_images,
                                 data_dir=data_dir or run.get("data_dir"),
                                 manual_dir=manual_dir or run.get("manual_dir"),
                                 download=download)
    scores = segmentation_scores(_Scored(model, scales, flip), dataset, config.num_classes)
    shown = [(image[None], label) for image, label in dataset.unbatch().take(num_images)]
    predictions = [keras.ops.argmax(predict_scores(model, image, scales, flip), axis=-1)[0]
                   for image, _ in shown]
    suffix = ("_ms" if multi_scale else "") + ("_flip" if flip else "")
    png = save_predictions([image[0].numpy() for image, _ in shown],
                           [label.numpy() for _, label in shown],
                           [keras.ops.convert_to_numpy(p) for p in predictions],
                           model_dir / f"predictions{suffix}.png")
    return dict(scores, config=config.name, context=run["context"], scales=list(scales),
                flip=flip, predictions=str(png))


def main(argv=None):
    parser = workflow_parser("python -m segmentation.evaluate", __doc__)
    parser.add_argument("--model-dir", required=True, help="a segmentation.train run directory")
    parser.add_argument("--multi-scale", action="store_true",
                        help=f"average over input scales {MULTI_SCALES}")
    parser.add_argument("--flip", action="store_true", help="also score the mirrored images")
    parser.add_argument("--num-images", type=int, default=6, help="images in the PNG")
    parser.add_argument("--max-images", type=int, help="score only the first N held-out images")
    parser.add_argument("--eval-size", type=int,
                        help="fit images into this square and batch them (default: the run's)")
    parser.add_argument("--output", help="write the scores as JSON here")
    add_tfds_arguments(parser, data_dir_help=DATA_DIR_HELP + " (default: the run's)")
    args = parser.parse_args(argv)
    result = evaluate(args.model_dir, args.multi_scale, args.flip, args.num_images,
                      max_images=args.max_images, eval_size=args.eval_size,
                      data_dir=args.data_dir, manual_dir=args.manual_dir,
                      download=args.download)
    print(f"mIoU {result['miou']:.4f}, pixel accuracy {result['pixel_accuracy']:.4f} "
          f"(scales {result['scales']}, flip {result['flip']}); predictions: "
          f"{result['predictions']}")
    if args.output:
        pathlib.Path(args.output).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    raise SystemExit(main())
