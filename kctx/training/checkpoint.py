"""Step checkpoints with exact resume, for ``fit`` over step-indexed streams.

A workflow trains with ``fit`` over an endless stream in which batch k is a
function of (seed, k) (:func:`kctx.data.indexed_batches`); Keras epochs are
the checkpoint interval. :class:`StepCheckpoint` saves the step count with
every variable a resume needs and restores them, so a killed run continues
at the saved step with the batches it would have seen.
"""

import tempfile

import keras


class CheckpointError(RuntimeError):
    """No checkpoint of a run directory can be read."""


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
        candidates = list(reversed(self.manager.checkpoints))
        failures = []
        for path in candidates:
            try:
                self.checkpoint.restore(path).assert_consumed()
            except Exception as error:  # noqa: BLE001 - unreadable files fail in many ways
                reason = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
                failures.append(f"{path}: {type(error).__name__}: {reason}")
                if log:
                    log(f"checkpoint {path} cannot be read ({type(error).__name__}); "
                        "trying the one before")
                continue
            if log:
                log(f"resumed from {path} at step {int(self.step.numpy())}")
            return int(self.step.numpy()), bool(self.finished.numpy())
        if failures:
            raise CheckpointError(
                f"No checkpoint in {self.directory} can be read:\n  " + "\n  ".join(failures)
                + "\nThe run cannot resume. Move the directory away to start it over, or "
                  "restore the checkpoint files from a backup.")
        return 0, False

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
