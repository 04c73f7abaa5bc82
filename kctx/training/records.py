"""The files of a run folder: ``run.json``, ``results.json``, ``history.csv``, ``timing.json``.

Every file is written atomically (a temporary file in the same directory,
then ``os.replace``), so a killed run leaves the previous version or the new
one, never half of one.
"""

import csv
import io
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import keras


class RunDirectoryError(ValueError):
    """A model directory that cannot hold this run (a file, read-only, another run's)."""


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
                    "jax", "torch"):
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


class StepCounter(keras.callbacks.Callback):
    """Counts training steps from ``start_step`` (over several ``fit`` calls)."""

    def __init__(self, start_step=0):
        super().__init__()
        self.step = int(start_step)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1


class HistoryLog(StepCounter):
    """``history.csv``: one row per Keras epoch (the checkpoint interval).

    Columns: ``step``, the optimizer steps done at the row's end; ``seconds``,
    the wall-clock time of the row's training steps; ``eval_seconds``, that of
    the held-out evaluation run at the row's end (empty when none);
    ``peak_memory_mb``, the process's peak resident memory so far (:func:`peak_memory_mb`;
    empty where the platform has no ``resource`` module); then the
    training metrics (``loss``, ...: means over the interval's steps) and the
    held-out ones (``val_*``, at ``step``; empty when not evaluated then).
    Rows past ``start_step`` (written by a killed run after its last checkpoint)
    are dropped on resume, and the file is rewritten atomically at every row.
    """

    def __init__(self, path, start_step=0, write=True):
        super().__init__(start_step)
        self.path, self.write = pathlib.Path(path), write
        self.rows = [row for row in read_history(self.path) if row["step"] <= start_step]

    def on_epoch_begin(self, epoch, logs=None):
        self._began, self._evaluating = time.perf_counter(), 0.0

    def on_test_begin(self, logs=None):
        self._test_began = time.perf_counter()

    def on_test_end(self, logs=None):
        self._evaluating += time.perf_counter() - self._test_began

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._began - self._evaluating
        row = {"step": self.step, "seconds": round(seconds, 4)}
        if self._evaluating:
            row["eval_seconds"] = round(self._evaluating, 4)
        memory = peak_memory_mb()
        if memory is not None:
            row["peak_memory_mb"] = memory
        row.update({key: float(value) for key, value in (logs or {}).items()})
        self.rows.append(row)
        if self.write:
            write_history(self.path, self.rows)


def peak_memory_mb():
    """The peak resident memory of this process since it started, in MB (10⁶ bytes; the
    runtime, the data and the largest step's tensors together), or ``None`` without
    ``resource`` (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return round(peak / 1e6 if sys.platform == "darwin" else peak * 1024 / 1e6, 1)


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
    columns = ["step", "seconds"] + (["eval_seconds"] if any("eval_seconds" in row
                                                              for row in rows) else [])
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
    """``timing.json``'s content from history rows: ``train_seconds`` and
    ``eval_seconds`` (sums of those columns), ``seconds_per_step``, the median
    over the rows after the first (which includes tracing), and ``peak_memory_mb``, the
    largest of the rows' (of every process of a resumed run; absent without the column)."""
    intervals, previous = [], first_step
    for index, row in enumerate(rows):
        steps = row["step"] - previous
        if steps > 0 and index > 0:
            intervals.append(row["seconds"] / steps)
        previous = row["step"]
    result = {"train_seconds": round(sum(row["seconds"] for row in rows), 2),
              "eval_seconds": round(sum(row.get("eval_seconds", 0.0) for row in rows), 2),
              "seconds_per_step": round(statistics.median(intervals), 5) if intervals else None}
    memory = [row["peak_memory_mb"] for row in rows if "peak_memory_mb" in row]
    if memory:
        result["peak_memory_mb"] = max(memory)
    return result
