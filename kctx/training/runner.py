"""One runner for every workflow: run folder, strategy, seed, checkpoints, ``fit``, results.

A workflow (``gan``, ``classification``, ``segmentation``, ``sequence``)
supplies only what is its own in a :class:`Workflow`: a config dataclass and
its named presets, how to build the compiled model, its step-indexed
training stream, its held-out data and its evaluation. :func:`run` does the
rest the same way for all of them:

1. the run folder ``runs/<workflow>-<config>-<variant>-seed<k>/`` (or
   ``model_dir``), refused when it holds another run;
2. the strategy (:func:`kctx.distribute.get_strategy`: TPU, several
   workers from ``TF_CONFIG``, several GPUs, or one device), seeding, and
   the deterministic mode (single-threaded TensorFlow, op determinism);
3. the model, built in the strategy scope, and the newest readable step
   checkpoint restored (exact resume);
4. ``run.json``: the resolved config, seed, strategy, package versions, git
   commit and command line;
5. ``fit`` over the workflow's step-indexed stream; with several hosts, one
   input pipeline per host (``strategy.distribute_datasets_from_function``:
   each builds only its own replicas' slices of every global batch), with a
   checkpoint every ``checkpoint_every`` steps, the Keras progress bar,
   ``history.csv`` and TensorBoard;
6. the inference model saved (``model.keras``, or the workflow's file), the
   final evaluation, ``results.json`` and ``timing.json``.

Files are written by the chief only, atomically (a temporary file, then
``os.replace``).
"""

import contextlib
import csv
import dataclasses
import io
import json
import math
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import keras

from kctx.training.checkpoint import StepCheckpoint
from kctx.training.config import config_from_dict, config_to_dict, replace_config


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How long a run trains and how often it checkpoints and evaluates, in steps.

    ``eval_every`` 0 evaluates only at the end.
    """

    steps: int
    checkpoint_every: int
    eval_every: int = 0


@dataclasses.dataclass(frozen=True)
class DataLocation:
    """Where datasets are: a TFDS / local data directory, TFDS's manual directory,
    and whether a missing TFDS dataset may be downloaded (see :func:`kctx.data.tfds_dataset`)."""

    data_dir: str | None = None
    manual_dir: str | None = None
    download: bool = False


@dataclasses.dataclass
class Run:
    """One run, as the workflow's functions see it.

    Attributes:
        workflow: the :class:`Workflow`.
        config: the resolved config (a frozen dataclass).
        seed: the run's seed; batch k of the training stream is a function of (seed, k).
        directory: the run folder.
        strategy: the ``tf.distribute`` strategy.
        data: the :class:`DataLocation`.
        deterministic: whether TensorFlow runs single-threaded with op determinism.
        verbose: Keras progress-bar verbosity.
        log: called with one line per message.
    """

    workflow: Any
    config: Any
    seed: int
    directory: pathlib.Path
    strategy: Any
    data: DataLocation = DataLocation()
    deterministic: bool = False
    verbose: int = 1
    log: Callable = print

    @property
    def replicas(self):
        return self.strategy.num_replicas_in_sync

    @property
    def chief(self):
        from kctx.distribute import is_chief

        return is_chief(self.strategy)

    @property
    def worker(self):
        """``(index, count)`` of this worker (``(0, 1)`` in a single process)."""
        from kctx.distribute import worker_index

        return worker_index(self.strategy)

    def sum_over_workers(self, value):
        """A NumPy array summed over the workers (the value itself in one process)."""
        from kctx.distribute import sum_over_workers

        return sum_over_workers(self.strategy, value)

    def dataset(self, dataset_fn):
        """``dataset_fn(input_context)`` for ``fit`` / ``evaluate``: under several
        replicas, per-replica batches from each input pipeline (one per host) through
        ``strategy.distribute_datasets_from_function``; on one device
        ``dataset_fn(None)``, global batches (a distributed dataset there makes
        single-threaded runs differ in the last bit from run to run)."""
        if self.replicas > 1:
            return self.strategy.distribute_datasets_from_function(dataset_fn)
        return dataset_fn(None)

    def keras_evaluate(self, model, dataset_fn):
        """``model.evaluate`` (a dict of scores) on :meth:`dataset` of ``dataset_fn``:
        with several hosts each input pipeline scores its shard."""
        dataset = self.dataset(dataset_fn)
        with multi_worker_keras(model, self.strategy, dataset):
            return model.evaluate(dataset, verbose=0, return_dict=True)


class Workflow:
    """What a workflow supplies to :func:`run`: subclass it and override what is its own.

    A subclass sets the class attributes and implements :meth:`variant`,
    :meth:`build`, :meth:`train_data` and :meth:`evaluate`; the other methods
    have defaults. The runner and the CLIs (:mod:`kctx.training.cli`) do the
    rest the same way for every workflow.

    Attributes:
        name: the workflow's name (``"gan"``): its package, and the run folder's prefix.
        configs: named configs (presets), instances of one frozen dataclass
            whose fields are the command-line flags (its docstring's
            ``Attributes:`` section is their help).
        default_config: the name used when none is given.
        model_file: the file the inference model is saved to.
        evaluation_fields: config fields that only change the evaluation, so
            ``evaluate`` may override them and a resumed run may differ in them.
        variant_field: the config field :meth:`train` takes as its second
            positional argument (``"context"``, ``"model"``).
        description: the CLI's help text.

    Example:

    >>> class Tiny(Workflow):
    ...     name, configs, default_config = "tiny", {"one": ...}, "one"
    ...     def variant(self, config): ...
    ...     def build(self, run): ...           # compiled model, built in the strategy scope
    ...     def train_data(self, run, start_step, input_context): ...
    ...     def evaluate(self, run, model): ...  # dict of scores
    """

    name = None
    configs = {}
    default_config = None
    model_file = "model.keras"
    evaluation_fields = ()
    variant_field = None
    description = ""

    @property
    def config_class(self):
        """The dataclass of the configs."""
        return type(self.configs[self.default_config])

    def get_config(self, name, **overrides):
        """The config ``name`` with ``overrides`` (:func:`kctx.training.replace_config`)."""
        return replace_config(self.configs, name, self.name, **overrides)

    def variant(self, config):
        """What distinguishes runs of one config in the run folder's name (a block, a model)."""
        raise NotImplementedError

    def build(self, run):
        """The compiled model (its optimizer's state is built by the runner), called in
        the strategy scope."""
        raise NotImplementedError

    def train_data(self, run, start_step, input_context):
        """The training stream from ``start_step``: global batches, or with an
        ``input_context`` this input pipeline's per-replica batches
        (:func:`kctx.data.replica_slices`)."""
        raise NotImplementedError

    def evaluate(self, run, model):
        """Final scores of the inference ``model``, a dict of JSON values."""
        raise NotImplementedError

    def eval_data(self, run, input_context):
        """Held-out batches for ``fit``'s validation every ``schedule().eval_every`` steps."""
        raise NotImplementedError(f"{self.name} has no held-out data during training")

    def schedule(self, run):
        """Steps, checkpoint interval and evaluation interval: by default the config's
        ``steps``, ``checkpoint_every`` and ``eval_every`` (0 when it has none)."""
        config = run.config
        return Schedule(config.steps, config.checkpoint_every,
                        getattr(config, "eval_every", 0) or 0)

    def check_data(self, run):
        """Raise when the data is missing, before anything is built."""

    def callbacks(self, run, model):
        """Extra Keras callbacks for ``fit``."""
        return []

    def checkpoint_objects(self, model):
        """Name → object with ``variables``: all a resume needs."""
        return {"model": model, "optimizer": model.optimizer}

    def inference_model(self, run, model):
        """The model saved and evaluated (e.g. a GAN's generator)."""
        return model

    def summary(self, results):
        """The line printed at the end, or None."""
        return None

    def scores(self, results):
        """The numbers that measure the run (logged to TensorBoard at the last step; what
        studies compare): by default every float of the results."""
        return {key: value for key, value in results.items() if isinstance(value, float)}

    def config(self, config=None, **overrides):
        """The config named ``config`` (default :attr:`default_config`), or the
        dataclass ``config`` itself, with ``overrides`` replaced."""
        if dataclasses.is_dataclass(config):
            return replace_config({config.name: config}, config.name, self.name, **overrides)
        return self.get_config(config or self.default_config, **overrides)

    def run_name(self, config, seed):
        return f"{self.name}-{config.name}-{self.variant(config)}-seed{seed}"

    def train(self, config=None, variant=None, **options):
        """Train (or resume) and evaluate a run of this workflow (:func:`run`).

        ``config``: a config name (default :attr:`default_config`);
        ``variant``: the :attr:`variant_field` (e.g. the context block);
        ``options``: run options (``model_dir``, ``seed``, ``strategy``,
        ``deterministic``, ``verbose``, ``stop_after_step``, ...) or config
        fields (``steps``, ``batch_size``, ...). Returns the results (as in
        ``results.json``) with the trained model under ``"model"``, the rows
        of ``history.csv`` under ``"history"`` and the timing.
        """
        if variant is not None:
            options[self.variant_field] = variant
        return run(self, config, **options)

    def rescore(self, model_dir, **options):
        """:func:`evaluate_run` a run folder of this workflow."""
        return evaluate_run(self, model_dir, **options)

    def train_main(self, argv=None, description=None):
        """The ``python -m <name>.train`` command line (:func:`kctx.training.train_main`)."""
        from kctx.training.cli import train_main

        return train_main(self, argv, description)

    def evaluate_main(self, argv=None):
        """The ``python -m <name>.evaluate`` command line."""
        from kctx.training.cli import evaluate_main

        return evaluate_main(self, argv)


@contextlib.contextmanager
def multi_worker_keras(model, strategy, dataset):
    """Let ``fit`` / ``evaluate`` run under a multi-worker strategy (a no-op otherwise).

    Keras 3 (3.15) fails under ``MultiWorkerMirroredStrategy`` with several
    workers (keras-team/keras#20585, tensorflow/tensorflow#72388) in two places:

    1. it builds the model from the first batch reduced by ``strategy.reduce``,
       which cannot reduce a nested batch ("Attempt to convert a value
       (PerReplica...)"): here the model, its loss and metrics are built from
       the dataset's element spec, and Keras runs in the strategy's scope with
       its own strategy reference cleared, so it skips that step;
    2. it reduces each step's logs with ``strategy.reduce("MEAN", v, axis=0)``,
       which fails on scalars ("Invalid reduction dimension 0"): the logs are
       metric results, which Keras keeps in variables summed over all replicas
       at every update, so every replica holds the global value and its local
       one is taken instead, as in a single process.
    """
    from keras.src.backend.tensorflow import trainer as tf_trainer

    from kctx.distribute import worker_index

    if worker_index(strategy)[1] == 1:
        yield
        return
    import tensorflow as tf

    spec = tf.nest.map_structure(  # a replica's batch (PerReplicaSpec holds one per replica)
        lambda item: getattr(item, "_value_specs", (item,))[0], dataset.element_spec)
    with strategy.scope():
        model._symbolic_build(data_batch=spec)  # noqa: SLF001 - see 1. above
    saved = model._distribute_strategy, tf_trainer._collective_all_reduce_multi_worker  # noqa: SLF001
    model._distribute_strategy = None  # noqa: SLF001
    tf_trainer._collective_all_reduce_multi_worker = lambda strategy: False  # see 2. above
    try:
        with strategy.scope():
            yield
    finally:
        model._distribute_strategy, tf_trainer._collective_all_reduce_multi_worker = saved


class RunDirectoryError(ValueError):
    """A model directory that cannot hold this run (a file, read-only, another run's)."""


# What deterministic mode needs of TensorFlow, set before it is imported: one thread for
# ops and one between them, and no oneDNN kernels (measured here: with oneDNN, the
# gradients of the PSF network change in the last bit from call to call on identical
# inputs, even single-threaded; without it they do not).
DETERMINISTIC_ENVIRONMENT = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1",
                             "TF_ENABLE_ONEDNN_OPTS": "0"}


def deterministic_environment():
    """Whether this process was started with :data:`DETERMINISTIC_ENVIRONMENT`."""
    return all(os.environ.get(key) == value for key, value in DETERMINISTIC_ENVIRONMENT.items())


def enable_determinism():
    """Single-threaded TensorFlow without oneDNN, with op determinism: bit-identical CPU runs.

    The environment of :data:`DETERMINISTIC_ENVIRONMENT` must be in place
    before TensorFlow is imported: this sets it when TensorFlow is not
    imported yet, and otherwise raises unless the process was started with it
    (the CLIs' ``--deterministic`` restarts the command with it).
    """
    if not deterministic_environment():
        if "tensorflow" in sys.modules:
            settings = " ".join(f"{k}={v}" for k, v in DETERMINISTIC_ENVIRONMENT.items())
            raise RuntimeError(
                "deterministic=True needs TensorFlow single-threaded and without oneDNN, which "
                f"must be set before it is imported: start Python with {settings}, or use "
                "the command line's --deterministic (which does that).")
        os.environ.update(DETERMINISTIC_ENVIRONMENT)
    import tensorflow as tf

    threads = tf.config.threading
    if threads.get_intra_op_parallelism_threads() != 1:
        try:
            threads.set_intra_op_parallelism_threads(1)
            threads.set_inter_op_parallelism_threads(1)
        except RuntimeError:  # already initialised, from the environment: 1 thread each
            pass
    tf.config.experimental.enable_op_determinism()


def write_json(path, value):
    """Write ``value`` as indented JSON to ``path`` atomically."""
    write_text(path, json.dumps(value, indent=2, default=_json_default) + "\n")


def write_text(path, text):
    path = pathlib.Path(path)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        pathlib.Path(temporary).unlink(missing_ok=True)
        raise


def _json_default(value):
    if isinstance(value, pathlib.Path):
        return str(value)
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def read_run(model_dir, workflow=None):
    """The ``run.json`` of a run folder, as a dict.

    Raises:
        FileNotFoundError: the directory holds no run.
        RunDirectoryError: the run is of another workflow than ``workflow``
            (a name or a :class:`Workflow`).
    """
    name = getattr(workflow, "name", workflow)
    run_file = pathlib.Path(model_dir) / "run.json"
    if not run_file.exists():
        raise FileNotFoundError(
            f"{run_file} not found: `model_dir` must be a run folder written by "
            f"{f'{name}.train' if name else 'a kctx workflow'}. "
            f"Received: model_dir={str(model_dir)!r}")
    record = json.loads(run_file.read_text())
    if name and record.get("workflow") != name:
        raise RunDirectoryError(
            f"{model_dir} holds a {record.get('workflow', 'pre-runner')} run, not a {name} run: "
            f"use `python -m {record.get('workflow', name)}.evaluate` or another --model-dir.")
    return record


def versions():
    """Versions of Python and the packages a run depends on."""
    import importlib.metadata

    found = {"python": platform.python_version()}
    for package in ("kctx", "tensorflow", "keras", "numpy", "keras-hub", "tensorflow-datasets",
                    "jax"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def git_commit():
    """``{"commit", "dirty"}`` of the source tree kctx runs from, or None outside git."""
    root = pathlib.Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], text=True,
                                capture_output=True, timeout=10)
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                 "--untracked-files=no"], text=True, capture_output=True,
                                timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if commit.returncode:
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def _prepare_directory(directory):
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test-")
        probe.close()
    except OSError as error:
        raise RunDirectoryError(f"--model-dir {directory} cannot be written ({error.strerror}): "
                                "pass a writable directory.") from None


def _check_same_run(workflow, directory, config, seed):
    """Refuse a run folder that holds another workflow's run, or this workflow's with
    other settings (a resume must continue the same run)."""
    if not (directory / "run.json").exists():
        if any(directory.glob("checkpoints/ckpt-*")):
            raise RunDirectoryError(f"{directory} holds checkpoints but no run.json: it was "
                                    "not written by this version of kctx; use another --model-dir.")
        return
    record = read_run(directory, workflow)
    stored = dict(record.get("config", {}))
    current = config_to_dict(config)
    ignored = set(workflow.evaluation_fields)
    changed = [f"{key} ({stored.get(key)!r} → {current.get(key)!r})" for key in sorted(
        set(stored) | set(current)) if key not in ignored and
        json.dumps(stored.get(key)) != json.dumps(current.get(key))]
    if record.get("seed") != seed:
        changed.insert(0, f"seed ({record.get('seed')!r} → {seed!r})")
    if changed:
        raise RunDirectoryError(
            f"{directory} holds a {workflow.name} run with other settings: {', '.join(changed)}. "
            "A rerun resumes the same run: use the same settings, or another --model-dir.")


def _steps_per_epoch(schedule, start, stop):
    """Keras epoch length: divides every boundary (total, checkpoints, evaluations, the
    resume and stop steps), so checkpoints and evaluations land on epoch ends."""
    length = 0
    for value in (schedule.steps, schedule.checkpoint_every, schedule.eval_every, start, stop):
        length = math.gcd(length, int(value or 0))
    return max(1, length)


class HistoryLog(keras.callbacks.Callback):
    """``history.csv``: one row per Keras epoch (the checkpoint interval).

    Columns: ``step``, the optimizer steps done at the row's end; ``seconds``,
    the wall-clock time of the row's interval (its training steps, plus the
    held-out evaluation when the row has one); then the training metrics
    (``loss``, ...: means over the interval's steps) and the held-out ones
    (``val_*``, at ``step``; empty when not evaluated then). Rows past
    ``start_step`` (written by a killed run after its last checkpoint) are
    dropped on resume, and the file is rewritten atomically at every row.
    """

    def __init__(self, path, steps_per_epoch, start_step=0, write=True):
        super().__init__()
        self.path, self.steps_per_epoch, self.write = pathlib.Path(path), steps_per_epoch, write
        self.rows = [row for row in read_history(self.path) if row["step"] <= start_step]

    def on_epoch_begin(self, epoch, logs=None):
        self._began = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        row = {"step": (epoch + 1) * self.steps_per_epoch,
               "seconds": round(time.perf_counter() - self._began, 4)}
        row.update({key: float(value) for key, value in (logs or {}).items()})
        self.rows.append(row)
        if self.write:
            write_history(self.path, self.rows)


def read_history(path):
    """The rows of a ``history.csv`` (floats; ``step`` an int); the last row of a step wins."""
    path = pathlib.Path(path)
    if not path.exists():
        return []
    rows = {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            values = {key: float(value) for key, value in row.items() if value not in ("", None)}
            values["step"] = int(values["step"])
            rows[values["step"]] = values
    return [rows[step] for step in sorted(rows)]


def write_history(path, rows):
    columns = ["step", "seconds"]
    for row in rows:
        columns += [key for key in row if key not in columns and not key.startswith("val_")]
    for row in rows:
        columns += [key for key in row if key not in columns]
    text = io.StringIO()
    writer = csv.DictWriter(text, columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, text.getvalue())


def timing(rows, first_step=0):
    """``timing.json``'s content from history rows: total training seconds and the
    median seconds per step (rows after the first of each call: no tracing)."""
    intervals, previous, call_start = [], first_step, True
    for row in rows:
        steps = row["step"] - previous
        if steps > 0 and not call_start and not any(k.startswith("val_") for k in row):
            intervals.append(row["seconds"] / steps)
        call_start = steps <= 0
        previous = row["step"]
    return {"train_seconds": round(sum(row["seconds"] for row in rows), 2),
            "seconds_per_step": round(statistics.median(intervals), 5) if intervals else None}


def _tensorboard(log_dir):
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return None
    return keras.callbacks.TensorBoard(str(log_dir), update_freq="epoch")


def check_global_batch(batch_size, strategy):
    """Raise unless ``batch_size`` splits evenly over the strategy's replicas."""
    replicas = strategy.num_replicas_in_sync
    if batch_size % replicas:
        raise ValueError(f"`batch_size` must be a multiple of the {replicas} replicas. "
                         f"Received: batch_size={batch_size}")
    return replicas


RUN_OPTIONS = ("model_dir", "seed", "strategy", "tpu", "deterministic", "verbose", "data_dir",
               "manual_dir", "download", "stop_after_step", "callbacks", "log")


def run(workflow, config=None, *, model_dir=None, seed=0, strategy=None, tpu=None,
        deterministic=False, verbose=1, data_dir=None, manual_dir=None, download=False,
        stop_after_step=None, callbacks=(), log=print, **overrides):
    """Train (or resume) a run of ``workflow`` and evaluate it.

    Args:
        workflow: a :class:`Workflow`.
        config: a config name (default the workflow's) or a config dataclass.
        model_dir: the run folder (default
            ``runs/<workflow>-<config>-<variant>-seed<seed>``). A folder that
            holds a run resumes it, and must hold the same run (same
            workflow, config and seed, evaluation fields aside).
        seed: the run's seed (initial weights, the data stream's order,
            augmentation and noise).
        strategy: a ``tf.distribute`` strategy; default
            :func:`kctx.distribute.get_strategy` (``tpu``, ``TF_CONFIG``, GPUs).
        deterministic: bit-identical repeats on CPU (:func:`enable_determinism`).
        verbose: Keras progress-bar verbosity.
        data_dir, manual_dir, download: where the data is (:class:`DataLocation`).
        stop_after_step: end this call after that step's checkpoint (a later
            call resumes there); no evaluation, no ``results.json``.
        callbacks: extra Keras callbacks for ``fit``.
        log: called with each message line.
        **overrides: config fields to replace.

    Returns:
        The results (as in ``results.json``) plus ``model`` (the trained
        model), ``model_dir``, ``history`` (the rows of ``history.csv``) and
        the timing (``train_seconds``, ``seconds_per_step``); after
        ``stop_after_step``, ``stopped_at`` instead of scores.
    """
    if deterministic:
        enable_determinism()
    config = workflow.config(config, **overrides)
    if stop_after_step is not None and (isinstance(stop_after_step, bool) or
                                        not isinstance(stop_after_step, int) or
                                        stop_after_step < 1):
        raise ValueError("`stop_after_step` must be a positive integer or None. "
                         f"Received: stop_after_step={stop_after_step!r}")
    directory = pathlib.Path(model_dir or pathlib.Path("runs") / workflow.run_name(config, seed))
    if directory.exists() and not directory.is_dir():
        raise RunDirectoryError(f"--model-dir {directory} is a file, not a directory: pass a "
                                "directory (it is created when missing).")
    _check_same_run(workflow, directory, config, seed)
    from kctx.distribute import get_strategy

    strategy = strategy or get_strategy(tpu, log=log)
    context = Run(workflow, config, seed, directory, strategy,
                  DataLocation(data_dir, manual_dir, download), deterministic, verbose, log)
    check_global_batch(config.batch_size, strategy)
    keras.utils.set_random_seed(seed)
    workflow.check_data(context)  # a missing dataset stops the run before anything is built
    _prepare_directory(directory)
    schedule = workflow.schedule(context)
    with strategy.scope():
        model = workflow.build(context)
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None and not optimizer.built:  # its slots are in the checkpoint
            optimizer.build(model.trainable_variables)
    checkpoint = StepCheckpoint(directory / "checkpoints", workflow.checkpoint_objects(model),
                                chief=context.chief)
    start, finished = checkpoint.restore(log)
    if context.chief:
        write_json(directory / "run.json", {
            "workflow": workflow.name, "config_name": config.name,
            "variant": workflow.variant(config), "seed": seed, "config": config_to_dict(config),
            "deterministic": deterministic, "strategy": type(strategy).__name__,
            "replicas": context.replicas, "data": dataclasses.asdict(context.data),
            "versions": versions(), "git": git_commit(), "command": sys.argv,
            "environment": {key: os.environ[key] for key in sorted(os.environ) if key.startswith(
                ("TF_NUM_", "TF_ENABLE_", "TF_CONFIG", "TF_XLA", "KERAS_", "XLA_"))}})
    inference = workflow.inference_model(context, model)
    log(f"{workflow.name} {config.name} {workflow.variant(config)}: "
        f"{inference.count_params():,} parameters; {schedule.steps} steps of batch "
        f"{config.batch_size} on {context.replicas} replica(s); run folder {directory}")

    end = min(schedule.steps, stop_after_step or schedule.steps)
    length = _steps_per_epoch(schedule, start, end)
    history = HistoryLog(directory / "history.csv", length, start, write=context.chief)
    if not finished and start < end:
        train = context.dataset(
            lambda input_context: workflow.train_data(context, start, input_context))
        validation, frequency = None, 1
        if schedule.eval_every:
            validation = context.dataset(
                lambda input_context: workflow.eval_data(context, input_context))
            frequency = schedule.eval_every // length
        extra = list(workflow.callbacks(context, model))
        board = _tensorboard(directory / "logs") if context.chief else None
        with multi_worker_keras(model, strategy, train):
            model.fit(train, steps_per_epoch=length, epochs=end // length,
                      initial_epoch=start // length, validation_data=validation,
                      validation_freq=frequency, verbose=verbose, shuffle=False,
                      callbacks=[history, *([board] if board else []), *extra, *callbacks,
                                 _Checkpointing(checkpoint, length)])
        start = history.rows[-1]["step"] if history.rows else start
        finished = bool(getattr(model, "stop_training", False)) and start < schedule.steps
    if not finished and start < schedule.steps:
        log(f"stopped at step {start} of {schedule.steps}; run the same command again to resume")
        return {"stopped_at": start, "model": model, "model_dir": str(directory),
                "history": history.rows}
    results = _finish(context, model, start)
    context.sum_over_workers(0.0)  # a barrier: no worker exits while the chief still writes
    results.update(model=model, model_dir=str(directory), history=history.rows,
                   **timing(history.rows))
    return results


class _Checkpointing(keras.callbacks.Callback):
    """Saves at every epoch end, last among the callbacks, so it sees a stop (the run's
    end, e.g. a target accuracy reached) requested by the others."""

    def __init__(self, checkpoint, steps_per_epoch):
        super().__init__()
        self.checkpoint, self.steps_per_epoch = checkpoint, steps_per_epoch

    def on_epoch_end(self, epoch, logs=None):
        self.checkpoint.save((epoch + 1) * self.steps_per_epoch,
                             finished=bool(self.model.stop_training))


def _finish(context, model, step):
    """Save the inference model, evaluate it, write results.json and timing.json."""
    workflow, directory = context.workflow, context.directory
    inference = workflow.inference_model(context, model)
    save_model(inference, directory / workflow.model_file, context.chief)
    scores = workflow.evaluate(context, inference)
    results = {"workflow": workflow.name, "config": context.config.name,
               "variant": workflow.variant(context.config), "seed": context.seed,
               "steps": int(step), "params": int(inference.count_params()), **scores}
    if context.chief:
        write_json(directory / "results.json", results)
        write_json(directory / "timing.json", timing(read_history(directory / "history.csv")))
        _log_scores(directory / "logs" / "eval", workflow.scores(results), step)
    if workflow.summary(results):
        context.log(workflow.summary(results))
    return results


def _log_scores(log_dir, scores, step):
    """The final scores as TensorBoard scalars at ``step`` (when tensorboard is installed)."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return
    import tensorflow as tf

    with tf.summary.create_file_writer(str(log_dir)).as_default():
        for name, value in scores.items():
            tf.summary.scalar(name, value, step=int(step))


def save_model(model, path, chief=True):
    """``model.save(path)`` atomically (a temporary file, then ``os.replace``); other
    workers save to a scratch directory (saving may need every worker)."""
    path = pathlib.Path(path)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix=".saving-", dir=path.parent if chief else None))
    try:
        model.save(scratch / path.name)
        if chief:
            os.replace(scratch / path.name, path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return path


def evaluate_run(workflow, model_dir, checkpoint=None, output=None, data_dir=None,
                 manual_dir=None, download=False, log=print, **overrides):
    """Re-score a run folder: its saved model (or a checkpoint) with its config.

    Args:
        workflow: the :class:`Workflow` that wrote the run.
        model_dir: the run folder.
        checkpoint: ``None`` for the saved model (the newest checkpoint when
            the run has not finished), ``"latest"`` for the newest checkpoint,
            or a checkpoint path.
        output: the JSON file written (default ``MODEL_DIR/evaluation.json``;
            ``False`` writes none).
        data_dir, manual_dir, download: where the data is (default the run's).
        **overrides: evaluation fields of the config to replace.

    Returns:
        The scores, plus ``source`` (what was scored) and ``model``.
    """
    import tensorflow as tf

    directory = pathlib.Path(model_dir)
    record = read_run(directory, workflow)
    not_evaluation = sorted(set(overrides) - set(workflow.evaluation_fields))
    if not_evaluation:
        raise ValueError(f"{workflow.name}.evaluate can only change the evaluation fields "
                         f"{workflow.evaluation_fields}. Received: {not_evaluation}")
    config = config_from_dict(workflow.config_class, record["config"])
    config = workflow.config(config, **overrides)
    data = record.get("data", {})
    location = DataLocation(data_dir or data.get("data_dir"),
                            manual_dir or data.get("manual_dir"), download)
    strategy = tf.distribute.get_strategy()
    context = Run(workflow, config, record["seed"], directory, strategy, location,
                  verbose=0, log=log)
    saved = directory / workflow.model_file
    if checkpoint is None and saved.exists():
        model, source = keras.saving.load_model(saved), str(saved)
    else:
        keras.utils.set_random_seed(record["seed"])
        trained = workflow.build(context)
        steps = StepCheckpoint(directory / "checkpoints", workflow.checkpoint_objects(trained))
        path = steps.manager.latest_checkpoint if checkpoint in (None, "latest") else checkpoint
        if path is None:
            raise FileNotFoundError(f"{directory} holds neither {workflow.model_file} nor a "
                                    "checkpoint")
        steps.checkpoint.restore(path).expect_partial().assert_existing_objects_matched()
        model = workflow.inference_model(context, trained)
        source = f"{path} (step {int(steps.step.numpy())})"
    log(f"scoring {source}")
    scores = workflow.evaluate(context, model)
    result = dict(scores, workflow=workflow.name, config=config.name,
                  variant=workflow.variant(config), seed=record["seed"], source=source)
    if output is not False:
        write_json(pathlib.Path(output or directory / "evaluation.json"), result)
    if workflow.summary(result):
        log(workflow.summary(result))
    result["model"] = model
    return result
