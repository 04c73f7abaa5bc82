"""``python -m segmentation.predict --model-dir DIR IMAGE... [--output-dir D]``: masks of
image files.

For each image (JPEG or PNG): the run's evaluation preprocessing (e.g. ADE20K's
keep-ratio resize to (2048, 512), :func:`segmentation.data.evaluation_image`),
inference as the run is evaluated (whole image or sliding windows, its scales and flip:
:class:`segmentation.workflow.Predictor`), the logits resized back to the image's size,
and per pixel the most likely class. Writes ``<stem>_mask.png`` (a palette PNG whose
pixel values are the class ids, coloured with the dataset's palette:
:mod:`segmentation.palettes`) and ``<stem>_overlay.png`` (the image blended half and
half with those colours) to ``--output-dir`` (default ``DIR/predictions``), and prints
per image the classes present, largest first, with their share of the pixels and their
names. The run folder is any ``segmentation.train`` or ``segmentation.convert`` output.
"""

import os
import pathlib

import numpy as np

from kctx.data import decode_rgb
from kctx.training.cli import command_parser, user_errors_exit
from kctx.training.runner import load_run
from segmentation.data import evaluation_image
from segmentation.palettes import class_names, palette
from segmentation.workflow import WORKFLOW, Predictor

OVERLAY_ALPHA = 0.5  # the mask's weight in the overlay


def predict(model_dir, images, output_dir=None, log=print):
    """Segment image files with a run's model and evaluation protocol; write the masks.

    Args:
        model_dir: a run folder (``run.json`` and ``model.keras``).
        images: paths of JPEG / PNG files.
        output_dir: where the PNGs go (default ``MODEL_DIR/predictions``).
        log: called with each line of the report.

    Returns:
        One dict per image: ``image``, ``size`` (H, W), ``mask`` and ``overlay`` (the
        paths written) and ``classes``, a list of {``id``, ``name``, ``share``} of the
        classes present, largest share first.

    Example:

    >>> predict("runs/segnext_t_ade20k", ["street.jpg"])  # doctest: +SKIP
    street.jpg (480×640): wrote runs/segnext_t_ade20k/predictions/street_mask.png, ...
       38.52%  road (6)
    """
    import keras
    import tensorflow as tf
    from PIL import Image

    run, model, source = load_run(WORKFLOW, model_dir, log=lambda *_: None)
    config = run.config
    predictor = Predictor.from_config(model, config)
    names, colours = class_names(config.dataset, config.num_classes), palette(config.dataset)
    output = pathlib.Path(output_dir or pathlib.Path(model_dir) / "predictions")
    output.mkdir(parents=True, exist_ok=True)
    log(f"{source}: {config.name}, {config.num_classes} classes, evaluation "
        f"{config.eval_mode}" + (f" at {tuple(config.eval_resize)}" if config.eval_resize else ""))
    results = []
    for path in map(pathlib.Path, images):
        if not path.is_file():
            raise FileNotFoundError(f"No image file at {path}")
        try:
            pixels = decode_rgb(tf.io.read_file(str(path)))
        except tf.errors.InvalidArgumentError:
            raise ValueError(f"{path} is not a JPEG, PNG, GIF or BMP image") from None
        height, width = int(pixels.shape[0]), int(pixels.shape[1])
        prepared = evaluation_image(tf.cast(pixels, tf.float32) / 127.5 - 1.0, config)
        scores = predictor(prepared[None], output_size=(height, width))
        mask = keras.ops.convert_to_numpy(keras.ops.argmax(scores[0], axis=-1)).astype(np.uint8)
        mask_path = output / f"{path.stem}_mask.png"
        overlay_path = output / f"{path.stem}_overlay.png"
        indexed = Image.fromarray(mask, mode="P")
        indexed.putpalette(colours.reshape(-1).tolist())
        indexed.save(mask_path)
        blended = (1 - OVERLAY_ALPHA) * pixels.numpy() + OVERLAY_ALPHA * colours[mask]
        Image.fromarray(np.round(blended).astype(np.uint8)).save(overlay_path)
        counts = np.bincount(mask.reshape(-1), minlength=config.num_classes)
        present = [{"id": int(k), "name": names[k], "share": float(counts[k] / mask.size)}
                   for k in np.argsort(-counts, kind="stable") if counts[k]]
        log(f"{path} ({height}×{width}): wrote {mask_path}, {overlay_path}")
        for entry in present:
            log(f"  {entry['share']:7.2%}  {entry['name']} ({entry['id']})")
        results.append({"image": str(path), "size": (height, width), "mask": str(mask_path),
                        "overlay": str(overlay_path), "classes": present})
    return results


def predict_parser():
    parser = command_parser("python -m segmentation.predict", __doc__.split("\n\n", 1)[1])
    parser.add_argument("--model-dir", required=True,
                        help="a segmentation.train or segmentation.convert run folder")
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="JPEG or PNG files")
    parser.add_argument("--output-dir", help="where the PNGs go (default MODEL_DIR/predictions)")
    return parser


def main(argv=None):
    """Parse ``argv`` and predict; returns the exit status."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = predict_parser()
    args = parser.parse_args(argv)
    with user_errors_exit(parser, (ValueError,)):
        predict(args.model_dir, args.images, args.output_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
