"""What a study is: a named grid of arms × seeds run through a workflow's own CLI.

A :class:`Study` names a workflow and one of its configs; each :class:`Arm`
is that config with some fields overridden (the same ``--field value`` flags
a user would type). A *cell* is one arm at one seed: one
``python -m <workflow>.train ... --seed k --deterministic`` run in its own run
folder ``<runs_dir>/<study>/<arm>/seed<k>``, then the study's extra
:class:`Evaluation` s (``python -m <workflow>.evaluate``) of that run. A cell
is finished when ``study-cell.json`` is in its folder (written last); an
unfinished one is resumed by the runner from its newest checkpoint when the
same command runs again.

Seed k of every arm sees the same data order (the workflows' step-indexed
streams are seeded by the run's seed alone), so arms are compared seed by
seed (:func:`studies.stats.paired`).
"""

import csv
import dataclasses
import hashlib
import json
import math
import pathlib

CELL_FILE = "study-cell.json"
PRETRAINING_FILE = "study-pretraining.json"
PRETRAINING_DIR = "pretraining"  # RUNS_DIR/<study>/pretraining/<name>: no arm is named so
RESULTS_DIR = "studies/results"  # where ``studies.report`` writes NAME.{json,md,png}


@dataclasses.dataclass(frozen=True)
class Pretraining:
    """A run that arms start from, as an ImageNet checkpoint is for a segmenter: one
    deterministic run of a workflow's CLI, made once per study before the first cell that
    needs it, in ``<runs_dir>/<study>/pretraining/<name>``; an arm that names it
    (:attr:`Arm.pretrained`) trains with ``--<flag> <that folder>/<file>``. Every seed of
    the arm starts from the same run, as every published SegNeXt starts from one ImageNet
    MSCAN.

    Args:
        name: its name (a folder name).
        workflow: the workflow that trains it (e.g. ``classification``).
        config: that workflow's config.
        overrides: config fields changed, as :class:`Arm`'s.
        seed: its seed.
        file: what the arms read from its run folder (the saved model).
        flag: the arms' config field that takes the file's path.
    """

    name: str
    workflow: str
    config: str
    overrides: dict = dataclasses.field(default_factory=dict)
    seed: int = 0
    file: str = "model.keras"
    flag: str = "backbone_weights"

    def run_dir(self, runs_dir, study):
        return pathlib.Path(runs_dir) / study.name / PRETRAINING_DIR / self.name

    def train_command(self, model_dir):
        """The workflow CLI call of the pretraining run (without the interpreter)."""
        return ["-m", f"{self.workflow}.train", "--config", self.config,
                *config_flags(self.overrides), "--seed", str(self.seed), "--deterministic",
                "--verbose", "0", "--model-dir", str(model_dir)]


@dataclasses.dataclass(frozen=True)
class Arm:
    """One setting of a study.

    Args:
        name: the arm's name (a folder name: letters, digits, ``-``, ``_``, ``.``).
        overrides: config fields and their values (``{"context": "aspp"}``), passed
            as the workflow's ``--field value`` flags.
        config: the workflow config this arm starts from (default: the study's).
        baseline: the arm this one is compared with seed by seed (default: the
            study's baseline; an arm is never compared with itself).
        label: the name shown in tables and plots (default ``name``).
        pretrained: the study's :class:`Pretraining` this arm starts from (default: none).
    """

    name: str
    overrides: dict = dataclasses.field(default_factory=dict)
    config: str | None = None
    baseline: str | None = None
    label: str | None = None
    pretrained: str | None = None


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """A re-scoring of each finished run: ``python -m <workflow>.evaluate --model-dir
    RUN --output RUN/evaluation-<name>.json`` with ``overrides`` as flags.

    Args:
        name: its name (the file ``evaluation-<name>.json``).
        overrides: the evaluation fields changed, e.g. ``{"eval_flip": True}``.
        arms: the names of the arms it re-scores (default: every arm); a metric read
            from it is ``None`` (shown as –) for the others.
    """

    name: str
    overrides: dict = dataclasses.field(default_factory=dict)
    arms: tuple | None = None

    def applies_to(self, arm):
        return self.arms is None or arm.name in self.arms


@dataclasses.dataclass(frozen=True)
class Metric:
    """A number read from a finished cell's folder.

    Args:
        name: its key in the report.
        label: its column title.
        file: the JSON file it is read from (``results.json``, ``timing.json``,
            ``evaluation-<name>.json``).
        key: the key in that file.
        better: ``"higher"`` or ``"lower"`` for a quality metric (compared
            between arms, seed by seed), ``None`` for a descriptive one
            (parameters, step time).
        digits: decimals in the Markdown tables.
        reached: for ``key="first_step_reaching"``: the first training step
            whose ``history.csv`` column ``file`` reaches this value (``None``
            where it never did).
        summary: whether the report's Summary table (the one the README copies)
            has it; every metric is in the per-arm, paired and runs tables.
    """

    name: str
    label: str
    file: str
    key: str
    better: str | None = None
    digits: int = 4
    reached: float | None = None
    summary: bool = True

    def read(self, directory):
        directory = pathlib.Path(directory)
        if self.key == "first_step_reaching":
            return first_step_reaching(directory / "history.csv", self.file, self.reached)
        path = directory / self.file
        if self.file.startswith("evaluation-") and not path.exists():
            return None  # an evaluation this arm does not have
        with open(path) as f:
            value = json.load(f).get(self.key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value if math.isfinite(value) else None
        return None


@dataclasses.dataclass(frozen=True)
class Curve:
    """A number along each run: a column of its ``history.csv`` at every checkpoint step
    (a training metric there is the mean over the interval's steps, a ``val_*`` one the
    held-out score at the step). The report gives each arm's mean over seeds at each step
    and its paired difference from the arm's baseline, as a table and a plot: whether a
    gap between arms opens or closes as training goes on.

    Args:
        column: the ``history.csv`` column (``loss``, ``bits_per_character``,
            ``val_miou``, ...).
        label: its title in tables and plots.
        digits: decimals in the Markdown table.
    """

    column: str
    label: str
    digits: int = 4

    def read(self, directory):
        """``[[step, value], ...]`` of the run in ``directory``, in step order (rows where
        the column is empty or not finite are left out; ``[]`` without a history)."""
        path = pathlib.Path(directory) / "history.csv"
        if not path.exists():
            return []
        points = []
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row.get(self.column) not in (None, ""):
                    value = float(row[self.column])
                    if math.isfinite(value):
                        points.append([int(row["step"]), value])
        return sorted(points)


@dataclasses.dataclass(frozen=True)
class Study:
    """A named grid of arms × seeds over one workflow.

    Args:
        name: the study's name (``python -m studies.run NAME``).
        workflow: ``gan``, ``segmentation``, ``classification``, ``sequence`` or ``language``.
        config: the workflow config every arm starts from.
        arms: the :class:`Arm` s.
        baseline: the arm the others are compared with.
        seeds: the seeds run by default.
        metrics: the :class:`Metric` s reported.
        overrides: config fields set for every arm (e.g. fewer steps than the
            config's, or no prediction PNGs).
        evaluations: extra :class:`Evaluation` s of the runs (of every arm, or the
            arms each names).
        description: what the study asks, and the paper claim it tests.
        pretraining: the :class:`Pretraining` runs arms start from.
        curves: the :class:`Curve` s reported along the runs.
    """

    name: str
    workflow: str
    config: str
    arms: tuple
    baseline: str
    seeds: tuple = (0, 1, 2, 3, 4)
    metrics: tuple = ()
    overrides: dict = dataclasses.field(default_factory=dict)
    evaluations: tuple = ()
    description: str = ""
    pretraining: tuple = ()
    curves: tuple = ()

    def __post_init__(self):
        names = [arm.name for arm in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"study {self.name!r}: arm names repeat. Received: {names}")
        if PRETRAINING_DIR in names:
            raise ValueError(f"study {self.name!r}: an arm may not be named "
                             f"{PRETRAINING_DIR!r} (the pretraining runs' folder)")
        runs = [run.name for run in self.pretraining]
        for arm in self.arms:
            if arm.pretrained is not None and arm.pretrained not in runs:
                raise ValueError(f"study {self.name!r}: arm {arm.name!r} starts from "
                                 f"{arm.pretrained!r}, which is not a pretraining run of the "
                                 f"study. Valid: {', '.join(runs) or 'none'}")
        for arm in self.arms:
            if (arm.baseline or self.baseline) not in names:
                raise ValueError(f"study {self.name!r}: arm {arm.name!r} is compared with "
                                 f"{arm.baseline or self.baseline!r}, which is not an arm. "
                                 f"Valid: {', '.join(names)}")
        columns = [curve.column for curve in self.curves]
        if len(set(columns)) != len(columns):
            raise ValueError(f"study {self.name!r}: a history column is given two curves. "
                             f"Received: {columns}")
        for evaluation in self.evaluations:
            unknown = sorted(set(evaluation.arms or ()) - set(names))
            if unknown:
                raise ValueError(f"study {self.name!r}: evaluation {evaluation.name!r} names "
                                 f"arms the study does not have. Received: {unknown}. "
                                 f"Valid: {', '.join(names)}")

    def arm(self, name):
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise ValueError(f"study {self.name!r} has no arm {name!r}. "
                         f"Valid: {', '.join(a.name for a in self.arms)}")

    def baseline_of(self, arm):
        """The arm ``arm`` is compared with, or ``None`` for a baseline itself."""
        baseline = arm.baseline or self.baseline
        return None if baseline == arm.name else self.arm(baseline)

    def cell_dir(self, runs_dir, arm, seed):
        return pathlib.Path(runs_dir) / self.name / arm.name / f"seed{seed}"

    def pretraining_of(self, arm):
        """The :class:`Pretraining` ``arm`` starts from, or None."""
        return next((run for run in self.pretraining if run.name == arm.pretrained), None)

    def train_command(self, arm, seed, model_dir):
        """The workflow CLI call of one cell (without the interpreter); a pretrained arm's
        names its pretraining run's file (beside the cell's folder, under the runs folder)."""
        overrides = {**self.overrides, **arm.overrides}
        pretraining = self.pretraining_of(arm)
        if pretraining is not None:
            runs_dir = pathlib.Path(model_dir).parent.parent.parent  # <runs>/<study>/<arm>/seed<k>
            overrides[pretraining.flag] = str(pretraining.run_dir(runs_dir, self) /
                                              pretraining.file)
        return ["-m", f"{self.workflow}.train", "--config", arm.config or self.config,
                *config_flags(overrides), "--seed", str(seed), "--deterministic",
                "--verbose", "0", "--model-dir", str(model_dir)]

    def still_defines(self, run):
        """Whether ``run`` (an entry of a written report's ``runs``) is still one of this
        study's cells: its arm is here and the study gives that cell the command the run
        was trained with (a changed arm, config or step count makes it a different cell)."""
        arm = next((a for a in self.arms if a.name == run["arm"]), None)
        return arm is not None and run["command"] == [
            "python", *self.train_command(arm, run["seed"], run["run_dir"])]

    def evaluations_of(self, arm):
        """The :class:`Evaluation` s of ``arm``'s runs."""
        return [evaluation for evaluation in self.evaluations if evaluation.applies_to(arm)]

    def evaluate_command(self, evaluation, model_dir):
        return ["-m", f"{self.workflow}.evaluate", "--model-dir", str(model_dir),
                "--output", str(pathlib.Path(model_dir) / f"evaluation-{evaluation.name}.json"),
                *config_flags(evaluation.overrides)]


def config_flags(overrides):
    """``{"eval_flip": True, "scale_range": (0.5, 2)}`` → the workflow CLI's flags."""
    flags = []
    for field, value in overrides.items():
        flag = "--" + field.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + field.replace("_", "-"))
        elif value is None:
            flags += [flag, "none"]
        elif isinstance(value, dict):
            flags += [flag, json.dumps(value)]
        elif isinstance(value, (tuple, list)):
            flags += [flag, ",".join(str(item) for item in value)]
        else:
            flags += [flag, str(value)]
    return flags


def reported(study, results_dir=RESULTS_DIR):
    """The report of ``study`` already written in ``results_dir`` (``studies.report``'s
    ``NAME.json``, committed with the study's finished cells), or ``None``."""
    path = pathlib.Path(results_dir) / f"{study.name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def reported_cells(study, results_dir=RESULTS_DIR):
    """``{(arm, seed)}`` of the runs in ``study``'s written report that the study still
    defines as they ran: cells finished elsewhere (another machine or session), which
    ``studies.run`` does not run again and ``studies.report`` keeps."""
    return {(run["arm"], run["seed"]) for run in (reported(study, results_dir) or {}).get(
        "runs", []) if study.still_defines(run)}


def first_step_reaching(history_file, column, target):
    """The first ``step`` of ``history.csv`` whose ``column`` is >= ``target`` (or None)."""
    with open(history_file, newline="") as f:
        for row in csv.DictReader(f):
            if row.get(column) not in (None, "") and float(row[column]) >= target:
                return int(row["step"])
    return None


def config_hash(config):
    """A short hash of a resolved config (``run.json``'s ``config``), to tell settings apart."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def parse_seeds(text):
    """``"0-4"``, ``"3"``, ``"0,2,5-7"`` → a sorted tuple of seeds."""
    seeds = set()
    for part in str(text).split(","):
        part = part.strip()
        try:
            if "-" in part:
                low, high = (int(v) for v in part.split("-", 1))
                if low > high:
                    raise ValueError
                seeds.update(range(low, high + 1))
            else:
                seeds.add(int(part))
        except ValueError:
            raise ValueError("seeds are integers >= 0, ranges and commas, e.g. 0-4 or 0,2,5-7. "
                             f"Received: {text!r}") from None
    if any(seed < 0 for seed in seeds):
        raise ValueError(f"seeds are integers >= 0. Received: {text!r}")
    return tuple(sorted(seeds))
