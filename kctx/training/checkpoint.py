"""Step checkpoints with exact resume, for ``fit`` over step-indexed streams.

A workflow trains with ``fit`` over an endless stream in which batch k is a
function of (seed, k) (:func:`kctx.data.indexed_batches`); Keras epochs are
the checkpoint interval. A step checkpoint saves the step count with every
variable a resume needs (the model's, its optimizer's, the random generators'
states) and restores them, so a killed run continues at the saved step with
the batches it would have seen. Two formats, one interface
(:func:`step_checkpoint` picks by backend):

- :class:`StepCheckpoint`: TensorFlow's checkpoints (``tf.train.Checkpoint``,
  ``ckpt-N.index`` / ``ckpt-N.data-*``), on the TensorFlow backend;
- :class:`ArrayCheckpoint`: one NumPy ``ckpt-N.npz`` per step, for any backend
  (JAX's and PyTorch's): the variables' values fetched to the host, written atomically.

Both keep the newest ``max_to_keep`` checkpoints, fall back to the one before
an unreadable newest one, and let only the chief write.
"""

import os
import pathlib
import re
import tempfile
import zipfile

import keras
import numpy as np


class CheckpointError(RuntimeError):
    """No checkpoint of a run directory can be read."""


def _restore_newest(directory, paths, load, errors, log):
    """``load(path)`` → ``(step, finished)`` on the newest of ``paths`` (oldest first) that
    loads without raising one of ``errors``, each failure logged; ``(0, False)`` when there
    are none; :class:`CheckpointError` naming them all when none loads."""
    failures = []
    for path in reversed(list(paths)):
        try:
            step, finished = load(path)
        except errors as error:
            reason = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
            failures.append(f"{path}: {type(error).__name__}: {reason}")
            if log:
                log(f"checkpoint {path} cannot be read ({type(error).__name__}); "
                    "trying the one before")
            continue
        if log:
            log(f"resumed from {path} at step {step}")
        return step, finished
    if failures:
        raise CheckpointError(
            f"No checkpoint in {directory} can be read:\n  " + "\n  ".join(failures)
            + "\nThe run cannot resume. Move the directory away to start it over, or "
              "restore the checkpoint files from a backup.")
    return 0, False


class StepCheckpoint:
    """A step counter, a "finished" flag and named lists of variables.

    Variables are passed as ordered lists (``model.variables``,
    ``optimizer.variables``): ``tf.train.Checkpoint`` on a Keras 3 optimizer
    object saves its iteration count but not its slots (momentum, Adam
    moments), while the lists, whose order Keras fixes by construction, hold
    everything.

    Under a multi-worker strategy every worker saves (saving may synchronise
    the workers), but only the chief writes to ``directory``; the others
    write to a scratch directory of their own. Every worker restores from
    ``directory``.

    Args:
        directory: where the checkpoints go.
        variables: dict name → object with ``variables`` or a list of variables.
        max_to_keep: checkpoints kept (an unreadable newest one falls back to
            the one before).
        chief: whether this process writes the checkpoints.
    """

    def __init__(self, directory, variables, max_to_keep=2, chief=True):
        if keras.backend.backend() != "tensorflow":
            raise ValueError(
                "StepCheckpoint saves TensorFlow variables; on the "
                f"{keras.backend.backend()} backend use ArrayCheckpoint (or "
                "step_checkpoint, which picks by backend).")
        import tensorflow as tf

        self.directory = str(directory)
        self.chief = chief
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.finished = tf.Variable(False, trainable=False, name="finished")
        lists = {name: list(getattr(value, "variables", value))
                 for name, value in variables.items()}
        self.checkpoint = tf.train.Checkpoint(step=self.step, finished=self.finished, **lists)
        self.checkpoint.save_counter  # noqa: B018 - created now, not under a strategy scope
        try:
            self.manager = tf.train.CheckpointManager(self.checkpoint, self.directory,
                                                      max_to_keep=max_to_keep)
        except Exception as error:  # noqa: BLE001 - a corrupt state file: protobuf errors vary
            raise CheckpointError(
                f"{self.directory}/checkpoint (the list of checkpoints) is unreadable "
                f"({type(error).__name__}: {error}). Delete it to fall back to the newest "
                "intact ckpt-N files by hand, or use another model directory.") from None
        self._scratch = None
        self.writer = self.manager
        if not chief:  # the same saves, to a scratch directory deleted with this object
            self._scratch = tempfile.TemporaryDirectory(prefix="kctx-worker-checkpoints-")
            self.writer = tf.train.CheckpointManager(self.checkpoint, self._scratch.name,
                                                     max_to_keep=1)

    def restore(self, log=print):
        """Restore the newest readable checkpoint, if any: returns ``(step, finished)``.

        A checkpoint whose files are missing or truncated is skipped (with a
        log line naming it) for the one before; when none can be read,
        :class:`CheckpointError` names them, rather than restarting at step 0
        over the run.
        """
        def load(path):
            self.checkpoint.restore(path).assert_consumed()
            return int(self.step.numpy()), bool(self.finished.numpy())

        # Unreadable files fail in many ways: any exception means "try the one before".
        return _restore_newest(self.directory, self.manager.checkpoints, load, Exception, log)

    def latest(self):
        """The newest checkpoint's path, or None."""
        return self.manager.latest_checkpoint

    def restore_path(self, path):
        """Restore the checkpoint at ``path`` (e.g. ``DIR/ckpt-2``) as it is, objects
        it lacks aside; returns its step."""
        self.checkpoint.restore(path).expect_partial().assert_existing_objects_matched()
        return int(self.step.numpy())

    def save(self, step, finished=False):
        """Save at ``step`` (all workers must call it); returns the chief's path."""
        self.step.assign(step)
        self.finished.assign(finished)
        path = self.writer.save(checkpoint_number=int(step))
        return path if self.chief else None

    def callback(self, steps_per_epoch):
        """A Keras callback saving at each epoch end (epoch e ends at step (e+1)·epoch length)."""
        return _SaveAtEpochEnd(self, steps_per_epoch)


class _SaveAtEpochEnd(keras.callbacks.Callback):
    def __init__(self, checkpoint, steps_per_epoch):
        super().__init__()
        self.checkpoint, self.steps_per_epoch = checkpoint, steps_per_epoch

    def on_epoch_end(self, epoch, logs=None):
        self.checkpoint.save((epoch + 1) * self.steps_per_epoch)


class ArrayCheckpoint:
    """Step checkpoints as NumPy ``.npz`` files: any backend, the interface of
    :class:`StepCheckpoint`.

    ``DIR/ckpt-N.npz`` holds the step ``N``, the "finished" flag and, for each
    name, its variables' values in order (``model/0``, ``model/1``, ...; their
    paths under ``model.paths``), fetched to the host. A checkpoint is written
    to a temporary file in ``DIR``, flushed to disk, then renamed, so a killed
    run leaves whole checkpoints only; the newest ``max_to_keep`` are kept. A
    restore checks every array against its variable (count, shape) before
    assigning any, and falls back to the checkpoint before an unreadable or
    mismatched one.

    Under several processes (JAX hosts) every process restores from
    ``directory`` and calls :meth:`save` (fetching a variable sharded over
    hosts gathers it), and only the chief writes.

    Args:
        directory: where the checkpoints go.
        variables: dict name → object with ``variables`` or a list of variables.
        max_to_keep: checkpoints kept.
        chief: whether this process writes the checkpoints.

    Examples:
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        >>> model.compile("adam", "mse")
        >>> model.optimizer.build(model.trainable_variables)
        >>> checkpoint = ArrayCheckpoint("run/checkpoints", {"model": model,
        ...                                                  "optimizer": model.optimizer})
        >>> checkpoint.restore()                      # a new folder: step 0, not finished
        (0, False)
        >>> checkpoint.save(100)
        'run/checkpoints/ckpt-100.npz'
    """

    PATTERN = re.compile(r"ckpt-(\d+)\.npz$")

    def __init__(self, directory, variables, max_to_keep=2, chief=True):
        if isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int) or max_to_keep < 1:
            raise ValueError("`max_to_keep` must be a positive integer. "
                             f"Received: max_to_keep={max_to_keep!r}")
        self.directory = str(directory)
        self.chief = chief
        self.max_to_keep = max_to_keep
        self.lists = {name: list(getattr(value, "variables", value))
                      for name, value in variables.items()}

    @property
    def checkpoints(self):
        """Paths of the checkpoints in ``directory``, oldest first."""
        found = []
        for path in pathlib.Path(self.directory).glob("ckpt-*.npz"):
            match = self.PATTERN.match(path.name)
            if match:
                found.append((int(match.group(1)), str(path)))
        return [path for _, path in sorted(found)]

    def latest(self):
        """The newest checkpoint's path, or None."""
        paths = self.checkpoints
        return paths[-1] if paths else None

    def _read(self, path):
        """``(step, finished, {variable: array})`` of the checkpoint at ``path``; raises
        when it is unreadable or does not match the variables."""
        path = str(path)
        if not path.endswith(".npz"):  # a TensorFlow-style prefix: DIR/ckpt-N
            path += ".npz"
        with np.load(path, allow_pickle=False) as stored:
            names = set(stored.files)
            values = {}
            for name, variables in self.lists.items():
                count = sum(1 for key in names if key.startswith(f"{name}/"))
                if count != len(variables):
                    raise ValueError(f"{name!r} holds {count} arrays for {len(variables)} "
                                     "variables")
                for index, variable in enumerate(variables):
                    array = stored[f"{name}/{index}"]
                    if tuple(array.shape) != tuple(variable.shape):
                        raise ValueError(
                            f"{name}/{index} ({variable.path}) has shape {array.shape}, the "
                            f"variable {tuple(variable.shape)}")
                    values[id(variable)] = (variable, array)
            return int(stored["step"]), bool(stored["finished"]), values

    @staticmethod
    def _assign(values):
        for variable, array in values.values():
            if array.dtype.kind == "V":  # bfloat16 and other ml_dtypes come back as void
                array = array.view(keras.backend.standardize_dtype(variable.dtype))
            variable.assign(array)

    def restore(self, log=print):
        """Restore the newest readable checkpoint, if any: returns ``(step, finished)``.

        A checkpoint that is truncated or does not match the variables is skipped
        (with a log line naming it) for the one before; when none can be read,
        :class:`CheckpointError` names them, rather than restarting at step 0
        over the run.
        """
        def load(path):
            step, finished, values = self._read(path)
            self._assign(values)
            return step, finished

        return _restore_newest(self.directory, self.checkpoints, load,
                               (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile), log)

    def restore_path(self, path):
        """Restore the checkpoint at ``path`` (``DIR/ckpt-N.npz``, or ``DIR/ckpt-N``);
        returns its step."""
        step, _, values = self._read(path)
        self._assign(values)
        return step

    def save(self, step, finished=False):
        """Save at ``step`` (every process must call it); returns the chief's path."""
        arrays = {"step": np.asarray(int(step), np.int64),
                  "finished": np.asarray(bool(finished))}
        for name, variables in self.lists.items():
            for index, variable in enumerate(variables):
                arrays[f"{name}/{index}"] = host_array(variable.value)
            arrays[f"{name}.paths"] = np.asarray([variable.path for variable in variables]
                                                 or [""])
        if not self.chief:
            return None
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, f"ckpt-{int(step)}.npz")
        handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=f".ckpt-{int(step)}.")
        try:
            with os.fdopen(handle, "wb") as file:
                np.savez(file, **arrays)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except BaseException:
            pathlib.Path(temporary).unlink(missing_ok=True)
            raise
        for old in self.checkpoints[:-self.max_to_keep]:
            pathlib.Path(old).unlink(missing_ok=True)
        return path


def host_array(value):
    """A variable's value as a NumPy array on this host (a JAX array sharded over several
    processes is gathered: every process must call it then)."""
    if type(value).__module__.startswith("jax") and not getattr(
            value, "is_fully_addressable", True):
        if value.is_fully_replicated:
            return np.asarray(value.addressable_data(0))
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(value, tiled=True))
    return np.asarray(keras.ops.convert_to_numpy(value))


def step_checkpoint(directory, variables, max_to_keep=2, chief=True):
    """The backend's step checkpoint: :class:`StepCheckpoint` on TensorFlow (its
    checkpoints as before), :class:`ArrayCheckpoint` on the others.

    Args, returns: see :class:`StepCheckpoint`.
    """
    if keras.backend.backend() == "tensorflow":
        return StepCheckpoint(directory, variables, max_to_keep=max_to_keep, chief=chief)
    return ArrayCheckpoint(directory, variables, max_to_keep=max_to_keep, chief=chief)
