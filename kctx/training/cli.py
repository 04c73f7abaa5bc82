"""The one command-line shape of every workflow.

``python -m <workflow>.train [--config NAME] [--<field> VALUE ...] [run flags]``
trains through :func:`kctx.training.run`; every config field is a flag
(:func:`kctx.training.config.add_config_arguments`), and the run flags
(``--model-dir``, ``--seed``, ``--deterministic``, ``--tpu``, ``--verbose``,
``--stop-after-step``, ``--data-dir``, ``--manual-dir``, ``--download``)
are the same everywhere. ``python -m <workflow>.evaluate --model-dir DIR
[--checkpoint latest|PATH] [--<evaluation field> VALUE ...]`` re-scores a run
with :func:`kctx.training.evaluate_run`.
"""

import argparse
import contextlib
import os
import sys

from kctx.arguments import positive_int
from kctx.data import DatasetNotFoundError
from kctx.training.checkpoint import CheckpointError
from kctx.training.config import add_config_arguments, config_overrides
from kctx.training.determinism import (
    deterministic_environment,
    deterministic_variables,
    enable_determinism,
)
from kctx.training.records import RunDirectoryError
from kctx.training.runner import evaluate_run, run

# What a command reports as ``PROG: error: MESSAGE`` with exit status 2, not as a traceback.
USER_ERRORS = (RunDirectoryError, CheckpointError, DatasetNotFoundError, FileNotFoundError)


def command_parser(prog, description):
    """The ``argparse`` parser of a ``python -m ...`` command (its description as written)."""
    return argparse.ArgumentParser(prog=prog, description=description,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


@contextlib.contextmanager
def user_errors_exit(parser, errors=()):
    """Inside, a :data:`USER_ERRORS` (or ``errors``) exception ends the command:
    ``parser.exit(2, "PROG: error: MESSAGE")``."""
    try:
        yield
    except (*USER_ERRORS, *errors) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")


DATA_DIR_HELP = ("where the dataset is: a TFDS data directory (default ~/tensorflow_datasets), "
                 "or the directory holding a local dataset such as VOCdevkit, "
                 "ADEChallengeData2016, cityscapes or lra_release (default $KCTX_DATA_DIR or "
                 "~/datasets)")


def add_data_arguments(parser, data_dir_help=DATA_DIR_HELP):
    """``--data-dir``, ``--manual-dir``, ``--download``: where the datasets are."""
    group = parser.add_argument_group("data location")
    group.add_argument("--data-dir", help=data_dir_help)
    group.add_argument("--manual-dir", help="TFDS manual download directory (ImageNet archives)")
    group.add_argument("--download", action="store_true",
                       help="download and prepare a TFDS dataset that is not prepared")
    return group


def train_parser(workflow, description=None):
    """The ``python -m <workflow>.train`` parser."""
    parser = command_parser(f"python -m {workflow.name}.train", description or workflow.description)
    parser.add_argument("--config", default=workflow.default_config,
                        choices=sorted(workflow.configs),
                        help=f"named config (default {workflow.default_config})")
    group = parser.add_argument_group("run")
    group.add_argument("--model-dir", help="the run folder: checkpoints, logs, model, results "
                       f"(default runs/{workflow.name}-CONFIG-VARIANT-seedSEED); an existing "
                       "run resumes")
    group.add_argument("--seed", type=int, default=0,
                       help="initial weights, data order, augmentation and noise (default 0)")
    group.add_argument("--deterministic", action="store_true",
                       help="bit-identical repeats on CPU: single-threaded TensorFlow with op "
                            "determinism (slower)")
    group.add_argument("--tpu", help="TPU name, or 'local' on a TPU VM (several hosts: "
                       "TF_CONFIG selects MultiWorkerMirroredStrategy)")
    group.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2),
                       help="Keras progress bar: 0 silent, 1 bar, 2 a line per checkpoint interval")
    group.add_argument("--stop-after-step", type=positive_int,
                       help="end this call at that step's checkpoint; the same command resumes")
    add_data_arguments(parser)
    add_config_arguments(parser, workflow.config_class)
    return parser


def train_main(workflow, argv=None, description=None, callbacks=()):
    """Parse ``argv``, train and evaluate; returns the exit status. ``description``:
    the ``--help`` text (default ``workflow.description``); ``callbacks``: extra
    Keras callbacks for ``fit``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = train_parser(workflow, description)
    args = parser.parse_args(argv)
    if args.deterministic and not deterministic_environment() and argv is None:
        # TensorFlow is imported already: start the same command again in the
        # deterministic environment (single-threaded, no oneDNN; single-threaded XLA on JAX;
        # cuBLAS's fixed workspace on PyTorch).
        os.execve(sys.executable, [sys.executable, "-m", f"{workflow.name}.train",
                                   *sys.argv[1:]],
                  deterministic_variables())
    if args.deterministic:
        try:
            enable_determinism()
        except RuntimeError as error:
            parser.error(str(error))
    overrides = config_overrides(args, workflow.config_class)
    try:
        config = workflow.config(args.config, **overrides)
    except ValueError as error:
        parser.error(str(error))
    with user_errors_exit(parser):
        run(workflow, config, model_dir=args.model_dir, seed=args.seed,
            deterministic=args.deterministic, tpu=args.tpu, verbose=args.verbose,
            stop_after_step=args.stop_after_step, data_dir=args.data_dir,
            manual_dir=args.manual_dir, download=args.download, callbacks=callbacks)
    return 0


def evaluate_parser(workflow):
    parser = command_parser(f"python -m {workflow.name}.evaluate",
                     f"Re-score a `{workflow.name}.train` run folder with its config "
                     "(the evaluation fields below may be changed).")
    parser.add_argument("--model-dir", required=True, help=f"a {workflow.name}.train run folder")
    parser.add_argument("--checkpoint",
                        help="'latest' or a checkpoint path (default: the saved model, or the "
                             "newest checkpoint of an unfinished run)")
    parser.add_argument("--output", help="JSON file written (default MODEL_DIR/evaluation.json)")
    add_data_arguments(parser, DATA_DIR_HELP + "; default: the run's")
    if workflow.evaluation_fields:
        add_config_arguments(parser, workflow.config_class, workflow.evaluation_fields,
                             title="evaluation fields")
    return parser


def evaluate_main(workflow, argv=None):
    """Parse ``argv`` and re-score a run; returns the exit status."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = evaluate_parser(workflow)
    args = parser.parse_args(argv)
    overrides = config_overrides(args, workflow.config_class)
    with user_errors_exit(parser):
        result = evaluate_run(workflow, args.model_dir, checkpoint=args.checkpoint,
                              output=args.output, data_dir=args.data_dir,
                              manual_dir=args.manual_dir, download=args.download, **overrides)
    print(f"wrote {args.output or os.path.join(args.model_dir, 'evaluation.json')}"
          f" ({result['source']})")
    return 0
