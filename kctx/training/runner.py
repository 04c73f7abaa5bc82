"""One runner for every workflow: run folder, strategy, seed, checkpoints, ``fit``, results.

A workflow (``gan``, ``classification``, ``segmentation``, ``sequence``)
supplies only what is its own in a :class:`Workflow`: a config dataclass and
its named presets, how to build the compiled model, its step-indexed
training stream, its held-out data and its evaluation. :func:`run` does the
rest the same way for all of them:

1. the run folder ``runs/<workflow>-<config>-<variant>-seed<k>/`` (or
   ``model_dir``), refused when it holds another run;
2. the distribution (:func:`kctx.distribute.get_distribution`; on
   TensorFlow a strategy: TPU, several workers from ``TF_CONFIG``, several
   GPUs, or one device; on JAX ``keras.distribution.DataParallel`` over every
   device of every host, or one device; on PyTorch one device, with glibc keeping the
   large host buffers it frees for reuse, :func:`kctx.host_memory.reuse_freed_host_memory`),
   seeding, and the deterministic mode (single-threaded TensorFlow with op determinism,
   single-threaded XLA on JAX, single-threaded deterministic algorithms on PyTorch);
3. the model, built in the distribution's scope, and the newest readable step
   checkpoint restored (exact resume; :func:`kctx.training.checkpoint.step_checkpoint`:
   TensorFlow checkpoints, or ``.npz`` files on JAX and PyTorch);
4. ``run.json``: the resolved config, seed, backend, distribution and devices,
   package versions, git commit and command line;
5. ``fit`` over the workflow's step-indexed stream; with several hosts, one
   input pipeline per host (each builds only its own slices of every global
   batch), with a checkpoint every ``checkpoint_every`` steps, the Keras
   progress bar, ``history.csv`` and TensorBoard (on PyTorch, its global random
   generator seeded at every step from the seed and the step);
6. the inference model saved (``model.keras``, or the workflow's file), the
   final evaluation, ``results.json`` and ``timing.json``.

Files are written by the chief only, atomically (a temporary file, then
``os.replace``).
"""

import contextlib
import dataclasses
import json
import math
import os
import pathlib
import shutil
import sys
import tempfile

import keras

from kctx.convert.keras_files import load_model
from kctx.distribute import get_distribution
from kctx.host_memory import reuse_freed_host_memory
from kctx.training.checkpoint import ArrayCheckpoint, step_checkpoint
from kctx.training.config import config_from_dict, config_to_dict
from kctx.training.determinism import enable_determinism
from kctx.training.records import (
    HistoryLog,
    RunDirectoryError,
    StepCounter,
    git_commit,
    read_history,
    read_run,
    timing,
    versions,
    write_json,
)
from kctx.training.workflow import DataLocation, Run


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
    _check_backend(directory, record, "resume it")
    stored = dict(record.get("config", {}))
    try:  # fields added since the run was recorded take their defaults, as when it resumes
        stored = config_to_dict(config_from_dict(type(config), stored))
    except (TypeError, ValueError):  # another version's fields: listed as changed below
        pass
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


def _check_backend(directory, record, action):
    """Refuse a run folder whose checkpoints another Keras backend wrote (run.json's
    ``backend``; TensorFlow before it was recorded)."""
    backend = record.get("backend", "tensorflow")
    if backend != keras.backend.backend():
        raise RunDirectoryError(
            f"{directory} holds a run trained on the {backend} backend, whose checkpoints "
            f"this {keras.backend.backend()} process cannot read: {action} with "
            f"KERAS_BACKEND={backend}, or use another --model-dir. Received: "
            f"KERAS_BACKEND={keras.backend.backend()}")


def _steps_per_epoch(schedule, start):
    """Keras epoch length: divides the checkpoint and evaluation intervals and the step a
    run resumes at, so checkpoints and evaluations land on epoch ends (a last interval
    shorter than that, up to the end, is a fit of its own)."""
    length = 0
    for value in (schedule.checkpoint_every, schedule.eval_every, start):
        length = math.gcd(length, int(value or 0))
    return max(1, length)


def _tensorboard(log_dir):
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return None
    return keras.callbacks.TensorBoard(str(log_dir), update_freq="epoch")


def check_global_batch(batch_size, strategy):
    """Raise unless ``batch_size`` splits evenly over the replicas of ``strategy`` (a
    ``tf.distribute`` strategy or a :class:`kctx.distribute.Distribution`)."""
    replicas = strategy.num_replicas_in_sync
    if batch_size % replicas:
        raise ValueError(f"`batch_size` must be a multiple of the {replicas} replicas. "
                         f"Received: batch_size={batch_size}")
    return replicas


def run(workflow, config=None, variant=None, *, model_dir=None, seed=0, strategy=None, tpu=None,
        deterministic=False, verbose=1, data_dir=None, manual_dir=None, download=False,
        stop_after_step=None, callbacks=(), log=print, **overrides):
    """Train (or resume) a run of ``workflow`` and evaluate it.

    Args:
        workflow: a :class:`Workflow`.
        config: a config name (default the workflow's) or a config dataclass.
        variant: the workflow's :attr:`~Workflow.variant_field` (e.g. the context
            block, ``"self_attention"``); default the config's.
        model_dir: the run folder (default
            ``runs/<workflow>-<config>-<variant>-seed<seed>``). A folder that
            holds a run resumes it, and must hold the same run (same
            workflow, config and seed, evaluation fields aside).
        seed: the run's seed (initial weights, the data stream's order,
            augmentation and noise).
        strategy: a ``tf.distribute`` strategy (TensorFlow), a
            ``keras.distribution.Distribution`` (JAX) or a
            :class:`kctx.distribute.Distribution`; default
            :func:`kctx.distribute.get_distribution` (TensorFlow: ``tpu``,
            ``TF_CONFIG``, GPUs; JAX: data parallelism over every device;
            PyTorch: one device).
        tpu: TensorFlow's TPU (:func:`kctx.distribute.get_strategy`).
        deterministic: bit-identical repeats on CPU (:func:`enable_determinism`).
        verbose: Keras progress-bar verbosity.
        data_dir: where the data is (:class:`DataLocation`).
        manual_dir: where manually downloaded files are (:class:`DataLocation`).
        download: prepare a missing dataset (:class:`DataLocation`).
        stop_after_step: end this call after that step's checkpoint (a later
            call resumes there); no evaluation, no ``results.json``.
        callbacks: extra Keras callbacks for ``fit``.
        log: called with each message line.
        **overrides: config fields to replace.

    Returns:
        The results (as in ``results.json``) plus ``model`` (the trained
        model), ``model_dir``, ``history`` (the rows of ``history.csv``) and
        the timing (``train_seconds``, ``eval_seconds``, ``seconds_per_step``); after
        ``stop_after_step``, ``stopped_at`` instead of scores.
    """
    if deterministic:
        enable_determinism()
    if keras.backend.backend() == "torch":  # PyTorch's CPU tensors are glibc's blocks
        reuse_freed_host_memory()
    if variant is not None:
        overrides[workflow.variant_field] = variant
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
    distribution = get_distribution(tpu, strategy=strategy, log=log)
    context = Run(workflow, config, seed, directory, distribution,
                  DataLocation(data_dir, manual_dir, download), deterministic, verbose, log)
    check_global_batch(config.batch_size, distribution)
    keras.utils.set_random_seed(seed)
    workflow.check_data(context)  # a missing dataset stops the run before anything is built
    _prepare_directory(directory)
    schedule = workflow.schedule(context)
    with distribution.scope():
        model = build_model(workflow, context)
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None and not optimizer.built:  # its slots are in the checkpoint
            optimizer.build(model.trainable_variables)
    checkpoint = step_checkpoint(directory / "checkpoints", workflow.checkpoint_objects(model),
                                 chief=context.chief)
    start, finished = checkpoint.restore(log)
    if context.chief:
        write_json(directory / "run.json", run_record(context))
    inference = workflow.inference_model(context, model)
    log(f"{workflow.name} {config.name} {workflow.variant(config)}: "
        f"{inference.count_params():,} parameters; {schedule.steps} steps of batch "
        f"{config.batch_size} on {context.replicas} replica(s); run folder {directory}")

    end = min(schedule.steps, stop_after_step or schedule.steps)
    history = HistoryLog(directory / "history.csv", start, write=context.chief)
    if not finished and start < end:
        validation = None
        if schedule.eval_every:
            validation = context.dataset(
                lambda input_context: workflow.eval_data(context, input_context))
        board = _tensorboard(directory / "logs") if context.chief else None
        seeds = [_TorchStepSeeds(seed, start)] if keras.backend.backend() == "torch" else []
        every = [*seeds, history, *([board] if board else []),
                 *workflow.callbacks(context, model), *callbacks, _Checkpointing(checkpoint, start)]
        length = _steps_per_epoch(schedule, start)
        # Epochs of `length` steps up to the last multiple of it, then the rest as one.
        parts = [(start, end - end % length, length, schedule.eval_every // length),
                 (max(start, end - end % length), end, end % length, 1)]
        for first, last, size, frequency in parts:
            if last <= first or getattr(model, "stop_training", False):
                continue
            evaluate = validation is not None and (size == length or
                                                   last % schedule.eval_every == 0)
            train = context.dataset(  # a fit iterates its data from the start: from `first`
                lambda input_context, first=first: workflow.train_data(context, first,
                                                                       input_context))
            with distribution.fitting(model, train):
                model.fit(train, steps_per_epoch=size, epochs=last // size,
                          initial_epoch=first // size,
                          validation_data=validation if evaluate else None,
                          validation_freq=max(1, frequency), verbose=verbose, shuffle=False,
                          callbacks=every)
        start = history.step
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


@contextlib.contextmanager
def dtype_policy(name):
    """Keras's global dtype policy set to ``name`` inside the block, restored after it:
    layers take the policy in force when they are created."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def build_model(workflow, context):
    """``workflow.build(context)`` under the config's ``dtype_policy`` (float32 when the
    config has none): with ``mixed_bfloat16`` the layers compute in bfloat16 and keep
    float32 weights, and the optimizer's state is float32."""
    with dtype_policy(getattr(context.config, "dtype_policy", "float32")):
        return workflow.build(context)


def run_record(context):
    """The ``run.json`` of a run (a :class:`Run`): workflow, config name, variant, seed, the
    resolved config, determinism, the Keras backend, the distribution (``strategy``: the
    tf.distribute strategy's class or ``DataParallel``), replicas, processes and devices,
    data location, package versions, git commit, command line and the TensorFlow / Keras /
    JAX / XLA / PyTorch environment variables."""
    workflow, config = context.workflow, context.config
    return {
        "workflow": workflow.name, "config_name": config.name,
        "variant": workflow.variant(config), "seed": context.seed,
        "config": config_to_dict(config), "deterministic": context.deterministic,
        "backend": keras.backend.backend(), "strategy": context.distribution.name,
        "replicas": context.replicas, "processes": context.worker[1],
        "devices": context.distribution.devices,
        "data": dataclasses.asdict(context.data), "versions": versions(), "git": git_commit(),
        "command": sys.argv,
        "environment": {key: os.environ[key] for key in sorted(os.environ) if key.startswith(
            ("TF_NUM_", "TF_ENABLE_", "TF_CONFIG", "TF_XLA", "KERAS_", "XLA_", "JAX_",
             "TORCH_", "CUBLAS_WORKSPACE_CONFIG", "OMP_NUM_THREADS"))}}


class _TorchStepSeeds(StepCounter):
    """Seeds PyTorch's global random generator before every training step from the run's
    seed and the step, so that step k draws a function of (seed, k), as its batch is, and
    a resumed run draws what the uninterrupted one drew.

    Keras's PyTorch dropout, in a layer made without a seed, draws its masks from that
    generator (``torch.nn.functional.dropout``), not from the layer's seed generator (a
    variable, in the checkpoint); and PyTorch's ``DataLoader``, through which Keras feeds
    datasets on PyTorch, draws from it each time Keras starts iterating one (a resumed
    run starts once more than the uninterrupted one).

    Args:
        seed: the run's seed.
        start_step: the step the run starts (or resumes) at.
    """

    def __init__(self, seed, start_step=0):
        super().__init__(start_step)
        self.seed = int(seed)

    def on_train_batch_begin(self, batch, logs=None):
        import numpy as np
        import torch

        sequence = np.random.SeedSequence([self.seed, self.step])
        torch.manual_seed(int(sequence.generate_state(1, np.uint64)[0]))


class _Checkpointing(StepCounter):
    """Saves at every epoch end, last among the callbacks, so it sees a stop (the run's
    end, e.g. a target accuracy reached) requested by the others."""

    def __init__(self, checkpoint, start_step=0):
        super().__init__(start_step)
        self.checkpoint = checkpoint

    def on_epoch_end(self, epoch, logs=None):
        self.checkpoint.save(self.step, finished=bool(self.model.stop_training))


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


def load_run(workflow, model_dir, checkpoint=None, data_dir=None, manual_dir=None,
             download=False, log=print, **overrides):
    """A finished (or checkpointed) run folder as ``(run, inference model, source)``:
    the :class:`Run` of its recorded config and seed (evaluation fields replaced by
    ``overrides``), its saved model or a checkpoint's, and what was loaded.
    See :func:`evaluate_run` for the arguments. The saved model and NumPy checkpoints (a
    JAX or PyTorch run's) load on any backend; TensorFlow checkpoints on TensorFlow."""
    directory = pathlib.Path(model_dir)
    record = read_run(directory, workflow)
    not_evaluation = sorted(set(overrides) - set(workflow.evaluation_fields))
    if not_evaluation:
        raise ValueError(f"{workflow.name} can only change the evaluation fields "
                         f"{workflow.evaluation_fields} of a run. Received: {not_evaluation}")
    config = config_from_dict(workflow.config_class, record["config"])
    config = workflow.config(config, **overrides)
    data = record.get("data", {})
    location = DataLocation(data_dir or data.get("data_dir"),
                            manual_dir or data.get("manual_dir"), download)
    context = Run(workflow, config, record["seed"], directory, None, location,
                  verbose=0, log=log)
    saved = directory / workflow.model_file
    if checkpoint is None and saved.exists():
        return context, load_model(saved), str(saved)
    # NumPy checkpoints (a JAX or PyTorch run's) load on any backend; TensorFlow's on
    # TensorFlow.
    arrays = any((directory / "checkpoints").glob("ckpt-*.npz"))
    if not arrays:
        _check_backend(directory, record, f"read its checkpoints (or its {workflow.model_file})")
    keras.utils.set_random_seed(record["seed"])
    trained = build_model(workflow, context)
    optimizer = getattr(trained, "optimizer", None)
    if arrays and optimizer is not None and not optimizer.built:  # its slots are in the file
        optimizer.build(trained.trainable_variables)
    objects = workflow.checkpoint_objects(trained)
    steps = ArrayCheckpoint(directory / "checkpoints", objects) if arrays else \
        step_checkpoint(directory / "checkpoints", objects)
    path = steps.latest() if checkpoint in (None, "latest") else checkpoint
    if path is None:
        raise FileNotFoundError(f"{directory} holds neither {workflow.model_file} nor a "
                                "checkpoint")
    step = steps.restore_path(path)
    return context, workflow.inference_model(context, trained), f"{path} (step {step})"


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
        data_dir: where the data is (default the run's).
        manual_dir: where manually downloaded files are (default the run's).
        download: prepare a missing dataset (default the run's).
        **overrides: evaluation fields of the config to replace.

    Returns:
        The scores, plus ``source`` (what was scored) and ``model``.
    """
    context, model, source = load_run(workflow, model_dir, checkpoint, data_dir, manual_dir,
                                      download, log, **overrides)
    directory, config = context.directory, context.config
    log(f"scoring {source}")
    scores = workflow.evaluate(context, model)
    result = dict(scores, workflow=workflow.name, config=config.name,
                  variant=workflow.variant(config), seed=context.seed, source=source)
    if output is not False:
        write_json(pathlib.Path(output or directory / "evaluation.json"), result)
    if workflow.summary(result):
        log(workflow.summary(result))
    result["model"] = model
    return result
