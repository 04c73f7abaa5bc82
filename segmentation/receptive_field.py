"""``python -m segmentation.receptive_field --config NAME [--model-dir RUN] [--images N]
[--layer LAYER] [--json PATH] [--png PATH]``: the backbone's receptive field at the
context block, against the dataset's object sizes.

For the config's segmenter — randomly initialised (``--seed``, default 0) or a trained
run folder's model (``--model-dir``; its recorded config) — at the input of the context
block (the head's feature map: ``head_squeeze_relu`` for the dilated ResNets,
``decode_head.squeeze.activate`` for SegNeXt; with ``context=aspp`` the backbone's
output; ``--layer`` picks another layer) and at the backbone's output (SegNeXt: its last
stage, ``backbone/norm4``), it prints and writes (``--json``):

- the theoretical receptive field (RF) and jump (:func:`kctx.profile.theoretical_receptive_field`)
  and the head map's size (N positions) for the config's ``crop_size``² input;
- the effective receptive field (:func:`kctx.profile.effective_receptive_field`, Luo et
  al., NeurIPS 2016): the input gradient of the channel-summed feature at the map's
  centre position, in inference mode (``training=False``), |·| summed over channels and
  averaged over the first ``--images`` held-out images (centre-cropped or padded to the
  crop), and the sides of the centred squares (and disc radii) holding 50 / 90 / 95 % of
  its mass (``--png``: the maps, with the theoretical RF and those squares drawn);
- the held-out objects' sizes: min / median / max side and the share of objects larger
  than the theoretical RF and than the ERF's 90 % square. For the embedded digit
  datasets an object is a pasted digit and its size the side of its box
  (``segmentation.data.digits_seg(return_boxes=True)``); the label maps give the same
  sides (connected components of the non-background pixels, 8-connected, the stroke
  edges' ignore label included: 851 of 851 digits on digits_seg's test split), reported
  beside. Other datasets: the bounding-box side (the longer one) of each class's
  8-connected label components (touching instances of a class count as one object);
  ``--object-images`` limits the images read.

Objects are measured at the held-out images' scale; training crops rescale them by the
config's ``scale_range``.
"""

import inspect
import json
import os
import pathlib

import numpy as np

from kctx.arguments import positive_int
from kctx.profile import effective_receptive_field
from kctx.training.cli import command_parser, user_errors_exit
from kctx.training.runner import load_run
from segmentation import data
from segmentation.configs import CONFIGS, get_config
from segmentation.data import IGNORE_LABEL, load_split
from segmentation.workflow import WORKFLOW, build_model

# The context block's layer name in each head (ResNet head, SegNeXt's LightHamHead; with
# dots in SegNeXt models saved before its names became PyTorch-safe).
CONTEXT_BLOCK_NAMES = ("context", "decode_head-hamburger", "decode_head-context",
                       "decode_head.hamburger", "decode_head.context")
# Datasets whose class 0 is the background (not an object).
BACKGROUND_CLASS = {"digits_seg": 0, "digits_seg_large": 0, "voc": 0, "oxford_iiit_pet": 0}
ERF_REPORTED = 0.9  # the ERF square the objects are compared with


def _producer_name(tensor):
    return tensor._keras_history[0].name


def backbone_output_layer(model):
    """The layer name of the backbone's output: ``"backbone"`` (the nested model as called
    in the segmenter), or ``"backbone/<layer>"`` of its last output when it has several
    (SegNeXt's MSCAN stages: ``"backbone/norm4"``)."""
    backbone = model.get_layer("backbone")
    if len(backbone.outputs) > 1:
        return f"backbone/{_producer_name(backbone.outputs[-1])}"
    return "backbone"


def context_input_layer(model):
    """The layer feeding the segmenter's context block (the head's feature map), or the
    backbone's output when the head has no context block (ASPP)."""
    for name in CONTEXT_BLOCK_NAMES:
        try:
            block = model.get_layer(name)
        except ValueError:
            continue
        return _producer_name(block._inbound_nodes[0].input_tensors[0])
    return backbone_output_layer(model)


def label_objects(label, background=0, ignore=255, connect_ignore=True):
    """Objects of one label map: ``[(side, class), ...]``, side = the longer side of the
    bounding box.

    ``connect_ignore``: components of all non-background pixels (``ignore`` pixels at
    the objects' edges included), each the class most of its labelled pixels have
    (components of ``ignore`` alone are dropped): one per object when objects of any
    class lie apart (digits_seg). Otherwise: each class's own components."""
    from scipy import ndimage

    label = np.asarray(label)
    eight = np.ones((3, 3), bool)
    objects = []
    if connect_ignore:
        mask = label != background if background is not None else np.ones(label.shape, bool)
        components, _ = ndimage.label(mask, structure=eight)
        for index, box in enumerate(ndimage.find_objects(components), start=1):
            values = label[box][components[box] == index]
            values = values[values != ignore]
            if values.size:
                side = max(box[0].stop - box[0].start, box[1].stop - box[1].start)
                objects.append((side, int(np.bincount(values).argmax())))
        return objects
    for value in np.unique(label):
        if value == ignore or value == background:
            continue
        components, _ = ndimage.label(label == value, structure=eight)
        for box in ndimage.find_objects(components):
            objects.append((max(box[0].stop - box[0].start, box[1].stop - box[1].start),
                            int(value)))
    return objects


def _statistics(sides):
    sides = np.asarray(sides, np.float64)
    if not sides.size:
        return {"count": 0}
    return {"count": int(sides.size), "min": float(sides.min()),
            "median": float(np.median(sides)), "max": float(sides.max()),
            "mean": float(sides.mean())}


def _digit_boxes(config, num_images):
    """(labels, box sides) of an embedded digit dataset, or None where segmentation.data
    cannot return the boxes."""
    layouts = getattr(data, "DIGIT_LAYOUTS", {"digits_seg": {}})
    if config.dataset not in layouts or \
            "return_boxes" not in inspect.signature(data.digits_seg).parameters:
        return None
    _, labels, boxes = data.digits_seg(config.eval_split, num_images=num_images,
                                       image_size=config.image_size, return_boxes=True,
                                       **layouts[config.dataset])
    sides = [max(box[2] - box[0], box[3] - box[1]) for canvas in boxes for box in canvas]
    return labels, sides


def object_sizes(config, num_images=None, data_dir=None):
    """The held-out objects' sides (see the module): a dict with ``source``, ``images``,
    ``sides`` (a list) and, for the digit datasets, ``label_sides`` (from the label maps)."""
    digits = config.dataset.startswith("digits")
    background = BACKGROUND_CLASS.get(config.dataset)
    boxes = _digit_boxes(config, num_images) if digits else None
    if boxes is not None:
        labels, box_sides = boxes
    else:
        source = load_split(config, config.eval_split, data_dir=data_dir, num_images=num_images)
        labels = [np.asarray(source.decode(example)[1]) for example in source.examples]
    label_sides = [side for label in labels for side, _ in
                   label_objects(label, background, IGNORE_LABEL, connect_ignore=digits)]
    result = {"split": config.eval_split, "images": len(labels)}
    if boxes is not None:
        result.update(source="pasted digit boxes (segmentation.data.digits_seg)",
                      sides=box_sides, label_sides=label_sides)
    else:
        result.update(source=("label maps: connected non-background components"
                              if digits else "label maps: each class's connected components"),
                      sides=label_sides)
    return result


def _fit(image, size):
    """Centre-crop or zero-pad an (H, W, C) image to size × size."""
    height, width = image.shape[:2]
    top, left = max((height - size) // 2, 0), max((width - size) // 2, 0)
    image = image[top:top + size, left:left + size]
    pad_h, pad_w = size - image.shape[0], size - image.shape[1]
    return np.pad(image, [(pad_h // 2, pad_h - pad_h // 2), (pad_w // 2, pad_w - pad_w // 2),
                          (0, 0)])


def held_out_images(config, count, data_dir=None):
    """The first ``count`` held-out images, centre-cropped or padded to the crop size."""
    source = load_split(config, config.eval_split, data_dir=data_dir, num_images=count)
    images = [np.asarray(source.decode(example)[0], np.float32)
              for example in source.examples.take(count)]
    return np.stack([_fit(image, config.crop_size) for image in images])


def _share_larger(sides, threshold):
    sides = np.asarray(sides, np.float64)
    if threshold is None or not sides.size:
        return None
    return float((sides > threshold).mean())


def _square(panel, centre, half, factor, colour):
    """Draw the outline of the square of pixels within ``half`` of ``centre``, clipped."""
    height, width = panel.shape[:2]
    top = round((centre[0] - half) * factor)
    bottom = round((centre[0] + half + 1) * factor) - 1
    left = round((centre[1] - half) * factor)
    right = round((centre[1] + half + 1) * factor) - 1
    rows = slice(max(top, 0), min(bottom, height - 1) + 1)
    cols = slice(max(left, 0), min(right, width - 1) + 1)
    for row in (top, bottom):
        if 0 <= row < height:
            panel[row, cols] = colour
    for col in (left, right):
        if 0 <= col < width:
            panel[rows, col] = colour


SQUARE_COLOURS = {"rf": (255, 0, 0), 0.5: (0, 200, 0), 0.9: (255, 200, 0), 0.95: (0, 160, 255)}


def save_erf_png(entries, path, min_side=256):
    """One PNG: per layer, the ERF map (white = the largest gradient mass, square-root
    scaled) with the theoretical RF (red; not drawn where it exceeds the image), the ERF's
    50 % (green), 90 % (yellow) and 95 % (blue) squares around the centre position's
    location; panels side by side."""
    from PIL import Image

    panels = []
    for erf, theory in entries:
        gradient = erf.map / erf.map.max() if erf.map.max() > 0 else erf.map
        factor = max(1, -(-min_side // min(gradient.shape)))
        grey = np.repeat(np.repeat(np.sqrt(gradient), factor, 0), factor, 1)
        panel = np.repeat((grey * 255).round().astype(np.uint8)[..., None], 3, axis=-1)
        _square(panel, erf.centre, (theory.side - 1) / 2, factor, SQUARE_COLOURS["rf"])
        for fraction, side in erf.sides.items():
            if side is not None:
                _square(panel, erf.centre, (side - 1) / 2, factor,
                        SQUARE_COLOURS.get(fraction, (255, 0, 255)))
        panels.append(panel)
    height = max(p.shape[0] for p in panels)
    gap = np.full((height, 8, 3), 255, np.uint8)
    row = []
    for panel in panels:
        row += [np.pad(panel, [(0, height - panel.shape[0]), (0, 0), (0, 0)],
                       constant_values=255), gap]
    Image.fromarray(np.concatenate(row[:-1], axis=1)).save(path)
    return path


def _format(value):
    if value is None:
        return "?"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _size_text(values):
    return "×".join(_format(v) for v in values) if len(set(values)) > 1 else _format(values[0])


def receptive_field_report(config_name=None, model_dir=None, images=16, layer=None, seed=0,
                           object_images=None, json_path=None, png_path=None, data_dir=None,
                           log=print):
    """Measure and print the receptive fields and the object sizes (see the module).

    Args:
        config_name: a ``segmentation.configs`` name (default the run's, or digits_seg).
        model_dir: a run folder (``segmentation.train`` / ``convert``): its model and
            config; None: the config's segmenter at random initialisation.
        images: held-out images the ERF averages over.
        layer: the layer measured instead of the context block's input.
        seed: the random initialisation's seed.
        object_images: held-out images whose objects are measured (None: all).
        json_path, png_path: where to write the report and the ERF maps (None: not).
        data_dir: where a non-embedded dataset is.
        log: called with each printed line.

    Returns:
        The report (the JSON's content).
    """
    import keras

    if model_dir is not None:
        run, model, source = load_run(WORKFLOW, model_dir, log=lambda *_: None)
        config = run.config
        if config_name is not None and config_name != config.name:
            log(f"note: {model_dir} was trained with config {config.name!r}; measuring that "
                f"(not {config_name!r})")
        origin = f"trained: {source}"
    else:
        config = get_config(config_name or "digits_seg")
        keras.utils.set_random_seed(seed)
        model = build_model(config)
        origin = f"random initialisation (seed {seed})"
    size = config.crop_size
    pictures = held_out_images(config, images, data_dir)
    layers = {"layer" if layer else "context_input": layer or context_input_layer(model),
              "backbone": backbone_output_layer(model)}
    log(f"{config.name}: {model.name}, {origin}; input {size}×{size} (crop_size); ERF over "
        f"the first {len(pictures)} {config.eval_split} images, inference mode "
        "(training=False)")
    report = {"config": config.name, "dataset": config.dataset, "model": model.name,
              "weights": origin, "input_size": [size, size], "images": len(pictures),
              "eval_split": config.eval_split, "mode": "inference (training=False)",
              "layers": {}}
    measured = {}
    for key, name in layers.items():
        erf = effective_receptive_field(model, pictures, name)
        theory = erf.theoretical
        measured[key] = (erf, theory)
        report["layers"][key] = {"layer": theory.layer, "theoretical": theory.to_dict(),
                                 "erf": erf.to_dict()}
        scope = "global (" + ", ".join(theory.global_layers) + ") + local " \
            if theory.is_global else ""
        log(f"{key:>13}: {theory.layer}: map {'×'.join(map(str, theory.size))} = "
            f"{theory.positions} "
            f"positions, jump {_size_text(theory.jump)} px; theoretical RF {scope}"
            f"{_size_text(theory.rf)} px")
        log(f"{'':>13}  ERF at position {tuple(erf.position)} (input row, column "
            f"{', '.join(_format(round(v, 2)) for v in erf.centre)}): squares "
            + ", ".join(f"{f:.0%} {_format(s)} px" for f, s in erf.sides.items())
            + "; radii " + ", ".join(f"{f:.0%} {r:.1f} px" for f, r in erf.radii.items()
                                     if r is not None)
            + ("; the 95 % square reaches the image border" if erf.reaches_border.get(0.95)
               else ""))
        if theory.statistics_layers:
            log(f"{'':>13}  note: normalisation statistics over all positions in "
                f"{', '.join(theory.statistics_layers)} (counted as position-wise; their "
                "gradients reach every pixel)")
        if theory.assumed_pointwise:
            log(f"{'':>13}  note: assumed position-wise: {', '.join(theory.assumed_pointwise)}")
    objects = object_sizes(config, object_images, data_dir)
    sides = objects.pop("sides")
    label_sides = objects.pop("label_sides", None)
    objects["side"] = _statistics(sides)
    if label_sides is not None:
        objects["label_side"] = _statistics(label_sides)
    larger = {}
    for key, (erf, theory) in measured.items():
        larger[f"{key}_rf"] = _share_larger(sides, theory.side)
        larger[f"{key}_erf_{ERF_REPORTED:g}"] = _share_larger(sides, erf.sides.get(ERF_REPORTED))
    objects["larger_than"] = larger
    objects["training_scale_range"] = list(config.scale_range)
    report["objects"] = objects
    stats = objects["side"]
    if stats["count"]:
        line = (f"objects: {stats['count']} in {objects['images']} {config.eval_split} images "
                f"({objects['source']}): side min {_format(stats['min'])} / median "
                f"{_format(stats['median'])} / max {_format(stats['max'])} px")
        if label_sides is not None:
            label = objects["label_side"]
            line += (f" (label maps: {label['count']} objects, "
                     f"{_format(label['min'])} / {_format(label['median'])} / "
                     f"{_format(label['max'])})")
        log(line)
        for key, (erf, theory) in measured.items():
            log(f"{'':>9}larger than the {key}'s theoretical RF ({theory.side} px): "
                f"{larger[f'{key}_rf']:.1%}; than its ERF {ERF_REPORTED:.0%} square "
                f"({_format(erf.sides.get(ERF_REPORTED))} px): "
                f"{larger[f'{key}_erf_{ERF_REPORTED:g}']:.1%}")
        low, high = config.scale_range
        log(f"{'':>9}(training crops rescale them ×{low:g}–{high:g}: sides "
            f"{_format(stats['min'] * low)}–{_format(stats['max'] * high)} px)")
    else:
        log("objects: none found")
    if png_path:
        save_erf_png(list(measured.values()), png_path)
        report["png"] = str(png_path)
        log(f"wrote {png_path}")
    if json_path:
        pathlib.Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
        log(f"wrote {json_path}")
    return report


def receptive_field_parser():
    parser = command_parser("python -m segmentation.receptive_field", __doc__.split("\n\n", 1)[1])
    parser.add_argument("--config", choices=sorted(CONFIGS),
                        help="named config (default digits_seg, or the run's)")
    parser.add_argument("--model-dir", help="a run folder: measure its trained model")
    parser.add_argument("--images", type=positive_int, default=16,
                        help="held-out images the ERF averages over (default 16)")
    parser.add_argument("--layer", help="measure this layer (a name, or a path such as "
                        "backbone/res4_block0_out) instead of the context block's input")
    parser.add_argument("--seed", type=int, default=0, help="random initialisation (default 0)")
    parser.add_argument("--object-images", type=positive_int,
                        help="held-out images whose objects are measured (default all)")
    parser.add_argument("--json", help="write the report here")
    parser.add_argument("--png", help="write the ERF maps here")
    parser.add_argument("--data-dir", help="where a non-embedded dataset is")
    return parser


def main(argv=None):
    """Parse ``argv`` and report; returns the exit status."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = receptive_field_parser()
    args = parser.parse_args(argv)
    with user_errors_exit(parser, (ValueError,)):
        receptive_field_report(args.config, args.model_dir, args.images, args.layer, args.seed,
                               args.object_images, args.json, args.png, args.data_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
