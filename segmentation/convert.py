"""``python -m segmentation.convert CHECKPOINT --variant t|s|b|l --output DIR [--dataset
ade20k|cityscapes] [--num-classes N] [--data-dir D] [--<config field> VALUE ...]``.

Turns an official SegNeXt checkpoint (mmsegmentation's ``segnext_mscan-*`` ``.pth``
files, or the original repository's layout) into a run folder of this workflow:
the workflow's SegNeXt for the dataset's config (``segnext_ade20k`` or
``segnext_cityscapes`` with backbone ``mscan_<variant>``) filled by
:func:`kctx.convert.load_segnext_weights` (every tensor must find its weight, with its
shape, or it fails naming them; nothing pickled is executed), saved as ``model.keras``,
and ``run.json`` as :func:`kctx.training.run` writes it plus ``source_checkpoint``
(the file's path, SHA-256, key layout and tensor count). ``segmentation.evaluate``,
``segmentation.export`` and ``segmentation.predict`` take the folder as they take a
trained run's.

Config fields may be given as for ``segmentation.train`` (e.g. ``--eval-mode slide``,
or a reduced model's ``--head-channels`` / ``--backbone-options`` /
``--context-options``); original-layout B and L checkpoints get the NMF rank 64 of
their configs unless ``--context-options`` sets one.
"""

import hashlib
import os
import pathlib

from kctx.checkpoints import torch_state_dict
from kctx.convert.segnext import CheckpointMismatchError, checkpoint_layout, load_segnext_weights
from kctx.models.segnext import ORIGINAL_RANK, RANK
from kctx.training import RunDirectoryError, save_model, write_json
from kctx.training.cli import command_parser, user_errors_exit
from kctx.training.config import add_config_arguments, config_overrides
from kctx.training.runner import run_record
from kctx.training.workflow import DataLocation, Run
from segmentation.configs import SegmentationConfig
from segmentation.models import SEGNEXT_CONTEXT
from segmentation.workflow import WORKFLOW, build_model

# --dataset → the config the converted model is evaluated with.
DATASET_CONFIGS = {"ade20k": "segnext_ade20k", "cityscapes": "segnext_cityscapes"}
VARIANTS = ("t", "s", "b", "l")
# Config fields that are not flags here: --variant sets the backbone, --dataset the config.
FIXED_FIELDS = ("name", "backbone", "dataset")


def sha256(path):
    """The hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def convert(checkpoint, variant, output, dataset="ade20k", data_dir=None, log=print,
            **fields):
    """Write a run folder holding an official SegNeXt checkpoint as the workflow's model.

    Args:
        checkpoint: the ``.pth`` file (mmseg or original SegNeXt layout).
        variant: ``"t"``, ``"s"``, ``"b"`` or ``"l"`` (the backbone ``mscan_<variant>``).
        output: the run folder to write (created; must not hold a run).
        dataset: ``"ade20k"`` or ``"cityscapes"``: the config (:data:`DATASET_CONFIGS`).
        data_dir: where the dataset is, recorded in ``run.json`` for evaluation.
        log: called with each line of the report.
        **fields: config fields to replace (``num_classes``, ``head_channels``, ...).

    Returns:
        A dict: ``model_dir``, ``config`` (the resolved config), ``source_checkpoint``
        (as in ``run.json``) and ``model``.

    Raises:
        kctx.models.CheckpointMismatchError: the checkpoint does not fit the model (the
            message names the tensors), or holds only a backbone.
        kctx.training.RunDirectoryError: ``output`` already holds a run.
        FileNotFoundError: no such checkpoint.

    Example:

    >>> convert("segnext_mscan-t_20230227-4bfa3e6a.pth", "t", "runs/segnext_t_ade20k")
    ... # doctest: +SKIP
    """
    if variant not in VARIANTS:
        raise ValueError(f"`variant` must be one of {VARIANTS}. Received: variant={variant!r}")
    if dataset not in DATASET_CONFIGS:
        raise ValueError(f"`dataset` must be one of {tuple(DATASET_CONFIGS)}. "
                         f"Received: dataset={dataset!r}")
    checkpoint = pathlib.Path(checkpoint)
    if not checkpoint.is_file():
        raise FileNotFoundError(f"No checkpoint file at {checkpoint}")
    state = torch_state_dict(checkpoint)
    layout = checkpoint_layout(state)
    options = fields.pop("context_options", None)
    if layout == "original" and ORIGINAL_RANK[variant] != RANK and "rank" not in (options or {}):
        options = {"rank": ORIGINAL_RANK[variant], **(options or {})}
    config = WORKFLOW.get_config(DATASET_CONFIGS[dataset], backbone=f"mscan_{variant}",
                                 context_options=options, **fields)
    if config.context != SEGNEXT_CONTEXT:
        raise ValueError(f"Official checkpoints hold SegNeXt's own Hamburger: the context must "
                         f"be {SEGNEXT_CONTEXT!r}. Received: context={config.context!r}")
    directory = pathlib.Path(output)
    if (directory / "run.json").exists():
        raise RunDirectoryError(f"{directory} already holds a run (run.json): pass another "
                                "--output.")
    if directory.exists() and not directory.is_dir():
        raise RunDirectoryError(f"--output {directory} is a file, not a directory.")
    model = build_model(config)
    report = load_segnext_weights(model, state)
    if report["part"] != "segmentor":
        raise CheckpointMismatchError(
            f"{checkpoint} holds only a backbone ({report['loaded']} tensors, e.g. MSCAN "
            "ImageNet weights), no decode head: train from it with segmentation.train "
            "--backbone-weights instead.")
    source = {"path": str(checkpoint.resolve()), "sha256": sha256(checkpoint),
              "layout": layout, "tensors": report["loaded"], "skipped": report["skipped"]}
    log(f"read {checkpoint} (sha256 {source['sha256'][:16]}…): {report['loaded']} tensors, "
        f"{layout} layout")
    directory.mkdir(parents=True, exist_ok=True)
    context = Run(WORKFLOW, config, 0, directory, None,  # the backend's default distribution
                  DataLocation(data_dir))
    save_model(model, directory / WORKFLOW.model_file)
    log(f"wrote {directory / WORKFLOW.model_file}: {model.name}, "
        f"{model.count_params():,} parameters, {config.num_classes} classes")
    write_json(directory / "run.json", dict(run_record(context), source_checkpoint=source))
    log(f"wrote {directory / 'run.json'}: config {config.name}, backbone {config.backbone}, "
        f"evaluation {config.eval_mode}" + (f" at {config.eval_resize}" if config.eval_resize
                                            else ""))
    log(f"score it with: python -m segmentation.evaluate --model-dir {directory}"
        + ("" if data_dir else " --data-dir DATA_DIR"))
    return {"model_dir": str(directory), "config": config, "source_checkpoint": source,
            "model": model}


def convert_parser():
    parser = command_parser("python -m segmentation.convert", __doc__.split("\n\n", 1)[1])
    parser.add_argument("checkpoint", help="the official SegNeXt .pth (mmseg or original layout)")
    parser.add_argument("--variant", required=True, choices=VARIANTS,
                        help="the MSCAN size of the checkpoint")
    parser.add_argument("--output", required=True, help="the run folder to write")
    parser.add_argument("--dataset", default="ade20k", choices=tuple(DATASET_CONFIGS),
                        help="the dataset the checkpoint was trained on: its config "
                             "(default ade20k: segnext_ade20k)")
    parser.add_argument("--data-dir", help="where the dataset is (recorded for "
                                           "segmentation.evaluate)")
    fields = [name for name in SegmentationConfig.__dataclass_fields__
              if name not in FIXED_FIELDS]
    add_config_arguments(parser, SegmentationConfig, fields)
    return parser


def main(argv=None):
    """Parse ``argv`` and convert; returns the exit status."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = convert_parser()
    args = parser.parse_args(argv)
    fields = {key: value for key, value in config_overrides(args, SegmentationConfig).items()
              if key not in FIXED_FIELDS}
    with user_errors_exit(parser, (ValueError,)):  # mismatches, unsafe pickles, settings
        convert(args.checkpoint, args.variant, args.output, args.dataset, args.data_dir,
                **fields)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
