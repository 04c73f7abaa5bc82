"""The workflow runner and what the workflows share: configs, checkpoints, the CLI shape.

- :func:`run` trains (or resumes) and evaluates any :class:`Workflow`;
  :func:`evaluate_run` re-scores a run folder (:mod:`kctx.training.runner`).
- :func:`train_main` / :func:`evaluate_main` / :func:`export_main`: the ``python -m
  <workflow>.train``, ``.evaluate`` and ``.export`` command lines, flags generated from
  the config dataclass (:mod:`kctx.training.cli`, :mod:`kctx.training.config`,
  :mod:`kctx.training.export`).
- :func:`step_checkpoint`: step checkpoints with exact resume (:class:`StepCheckpoint`
  on TensorFlow, :class:`ArrayCheckpoint` ``.npz`` files on JAX and PyTorch).
- :func:`sgd`, :class:`ParamwiseAdamW`, :class:`WarmupPolyDecay`: the recipes'
  optimizers and schedules (:mod:`kctx.training.optimizers`).
"""

from kctx.training.checkpoint import (
    ArrayCheckpoint,
    CheckpointError,
    StepCheckpoint,
    step_checkpoint,
)
from kctx.training.cli import evaluate_main, train_main
from kctx.training.config import (
    DTYPE_POLICIES,
    SHARED_HELP,
    check_nonnegative,
    check_one_of,
    check_positive,
    config_from_dict,
    config_to_dict,
    replace_config,
)
from kctx.training.determinism import (
    DETERMINISTIC_ENVIRONMENT,
    deterministic_environment,
    deterministic_variables,
    enable_determinism,
)
from kctx.training.export import export_main, export_run
from kctx.training.optimizers import (
    ParamwiseAdamW,
    WarmupPolyDecay,
    paramwise_multipliers,
    sgd,
)
from kctx.training.records import (
    HistoryLog,
    RunDirectoryError,
    read_history,
    read_run,
    write_json,
)
from kctx.training.runner import check_global_batch, evaluate_run, run, save_model
from kctx.training.workflow import DataLocation, Run, Schedule, Workflow

__all__ = [
    "ArrayCheckpoint", "CheckpointError", "DETERMINISTIC_ENVIRONMENT", "DTYPE_POLICIES",
    "DataLocation", "HistoryLog",
    "ParamwiseAdamW", "Run", "RunDirectoryError", "SHARED_HELP", "Schedule", "StepCheckpoint",
    "WarmupPolyDecay", "Workflow", "paramwise_multipliers",
    "check_global_batch", "check_nonnegative", "check_one_of", "check_positive",
    "config_from_dict", "config_to_dict", "deterministic_environment", "deterministic_variables",
    "enable_determinism",
    "evaluate_main", "evaluate_run", "export_main", "export_run", "read_history", "read_run", "replace_config", "run",
    "save_model", "sgd", "step_checkpoint", "train_main", "write_json",
]
