"""Run a study's missing cells: ``python -m studies.run NAME [--seeds 0-4] [--arm A] [--jobs 2]``.

Each cell (one arm at one seed) is the workflow's own command line in
deterministic mode (single-threaded TensorFlow without oneDNN, op
determinism: bit-identical on a machine with the same package versions),
in its own run folder ``RUNS_DIR/NAME/ARM/seedK``, followed by the study's
evaluations. Finished cells are skipped and an interrupted one resumes from
its newest checkpoint, so an interrupted study continues where it stopped.
So are the cells the study's written report holds (``studies/results/NAME.json``,
committed by ``studies.report`` as cells finish on any machine) as long as the
study still defines them as they ran: a study longer than one machine's time
is run in parts, its report committed after each (``--ignore-report`` runs
them again).
``--jobs 2`` runs two single-threaded cells side by side (one per core).
Cells run seed by seed (every arm at seed 0, then seed 1, ...), so a partial
study already holds complete pairs.

Examples:
    python -m studies.run segmentation-digits --jobs 2
    python -m studies.run segmentation-digits --arm aspp --seeds 3
    python -m studies.run segmentation-digits --list
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import platform
import subprocess
import sys
import threading
import time

from kctx.arguments import positive_int
from kctx.training import deterministic_variables, write_json
from studies.definitions import STUDIES, get_study
from studies.study import CELL_FILE, PRETRAINING_FILE, RESULTS_DIR, parse_seeds, reported_cells

REPOSITORY = pathlib.Path(__file__).resolve().parents[1]

DEFAULT_RUNS_DIR = "runs/studies"


class CellError(RuntimeError):
    """A workflow command of a cell failed."""


def cell_state(study, runs_dir, arm, seed):
    """``"finished"``, ``"partial"`` (a run folder without its study record, or one
    lacking an evaluation the study has added since) or ``"missing"``."""
    directory = study.cell_dir(runs_dir, arm, seed)
    if (directory / CELL_FILE).exists():
        if all((directory / f"evaluation-{e.name}.json").exists()
               for e in study.evaluations_of(arm)):
            return "finished"
        return "partial"
    return "partial" if (directory / "run.json").exists() else "missing"


def cells(study, arms=None, seeds=None):
    """``(arm, seed)`` pairs, seed by seed, in the study's arm order."""
    chosen = [study.arm(name) for name in arms] if arms else list(study.arms)
    return [(arm, seed) for seed in (seeds if seeds is not None else study.seeds)
            for arm in chosen]


def _machine():
    """The CPU facts a cell's numbers depend on: TensorFlow's CPU kernels (Eigen's
    contraction blocking, oneDNN's GEMM) pick their code path by the instruction set
    and block by the cache sizes, so bit-identical repeats need the same CPU model."""
    processor, flags = platform.processor(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    processor = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                if processor and flags:
                    break
    except OSError:
        pass
    caches = {}
    for index in sorted(pathlib.Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            name = f"L{(index / 'level').read_text().strip()}" + (
                {"Data": "d", "Instruction": "i"}.get(kind, ""))
            caches[name] = (index / "size").read_text().strip()
        except OSError:
            continue
    return {"node": platform.node(), "processor": processor,
            "isa": next((isa for isa in ("avx512f", "avx2", "avx") if isa in flags), None),
            "caches": caches, "cpus": os.cpu_count(), "python": platform.python_version()}


def _environment():
    """The cells' environment: deterministic mode's (with TensorFlow's caching CPU
    allocator), quiet, the checkout's packages importable."""
    return {**deterministic_variables(), "TF_CPP_MIN_LOG_LEVEL": "2",
            # the workflow packages are in the checkout, not installed: from any folder
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY),
                                                        os.environ.get("PYTHONPATH")]))}


def _run_logged(python, command, log, what):
    """Run ``python command`` with its output appended to ``log``; returns its wall time.

    Raises:
        CellError: the command failed (the message ends with the log's last lines).
    """
    start = time.perf_counter()
    with open(log, "a") as out:
        out.write(f"$ {python} {' '.join(command)}\n")
        out.flush()
        status = subprocess.run([python, *command], stdout=out, stderr=subprocess.STDOUT,
                                env=_environment()).returncode
    if status:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise CellError(f"{what} exited with status {status} (log: {log}):\n{tail}")
    return round(time.perf_counter() - start, 2)


def run_pretraining(study, pretraining, runs_dir, python=None):
    """Make (or resume) ``pretraining``'s run unless it is finished; returns its record
    (``study-pretraining.json`` in its folder: command, wall time, machine, results).

    Raises:
        CellError: its command failed (it resumes next time).
    """
    python = python or sys.executable
    directory = pretraining.run_dir(runs_dir, study)
    if (directory / PRETRAINING_FILE).exists():
        return json.loads((directory / PRETRAINING_FILE).read_text())
    directory.mkdir(parents=True, exist_ok=True)
    command = pretraining.train_command(directory)
    wall = _run_logged(python, command, directory / "study-train.log",
                       f"{study.name} pretraining {pretraining.name}: `train`")
    record = {"study": study.name, "pretraining": pretraining.name,
              "workflow": pretraining.workflow, "config": pretraining.config,
              "overrides": pretraining.overrides, "seed": pretraining.seed,
              "command": ["python", *command], "wall_seconds": wall,
              "results": {key: value for key, value in json.loads(
                  (directory / "results.json").read_text()).items()
                  if isinstance(value, (int, float, str)) and not isinstance(value, bool)},
              "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": _machine()}
    write_json(directory / PRETRAINING_FILE, record)
    return record


def run_cell(study, arm, seed, runs_dir, python=None):
    """Run (or resume) one cell and write its ``study-cell.json``; returns that record.

    Raises:
        CellError: a command failed (its output is in ``study-<step>.log`` in the
            run folder; the cell stays unfinished and resumes next time).
    """
    python = python or sys.executable
    directory = study.cell_dir(runs_dir, arm, seed)
    directory.mkdir(parents=True, exist_ok=True)
    # A finished cell runs only the evaluations added to the study since (its training,
    # and so its timing.json, is left as it is).
    previous = (json.loads((directory / CELL_FILE).read_text())
                if (directory / CELL_FILE).exists() else None)
    resumed = previous["resumed"] if previous else (directory / "run.json").exists()
    steps = [("train", study.train_command(arm, seed, directory))]
    steps += [(f"evaluation-{e.name}", study.evaluate_command(e, directory))
              for e in study.evaluations_of(arm)]
    walls = dict(previous["wall_seconds"]) if previous else {}
    for name, command in steps:
        if name == "train" and previous:
            continue
        if name != "train" and (directory / f"{name}.json").exists():
            continue  # an evaluation finished before an interruption
        walls[name] = _run_logged(python, command, directory / f"study-{name}.log",
                                  f"{study.name} {arm.name} seed {seed}: `{name}`")
    record = {
        "study": study.name, "arm": arm.name, "seed": seed, "workflow": study.workflow,
        "config": arm.config or study.config, "overrides": {**study.overrides, **arm.overrides},
        "commands": {name: ["python", *command] for name, command in steps},
        "wall_seconds": walls, "total_wall_seconds": round(sum(walls.values()), 2),
        "resumed": resumed, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": _machine(),
    }
    if previous:  # the training's record stays; the evaluations added now get their own
        added = sorted(set(walls) - set(previous["wall_seconds"]))
        record.update(finished=previous["finished"], machine=previous["machine"],
                      added_evaluations=previous.get("added_evaluations", []) + [
                          {"names": added, "finished": record["finished"],
                           "machine": record["machine"]}])
    write_json(directory / CELL_FILE, record)
    return record


def run_study(study, runs_dir=DEFAULT_RUNS_DIR, arms=None, seeds=None, jobs=1, log=print,
              results_dir=RESULTS_DIR):
    """Run the missing cells of ``study`` (``jobs`` at a time): those with no finished
    folder in ``runs_dir`` that the report in ``results_dir`` does not hold either
    (``results_dir=None``: every cell without a finished folder). Returns the failures
    as ``[(arm, seed, error)]``."""
    chosen = cells(study, arms, seeds)
    elsewhere = reported_cells(study, results_dir) if results_dir is not None else set()
    finished = [(arm, seed) for arm, seed in chosen
                if cell_state(study, runs_dir, arm, seed) == "finished"]
    todo = [(arm, seed) for arm, seed in chosen if (arm, seed) not in finished
            and (arm.name, seed) not in elsewhere]
    total = len(chosen)
    log(f"{study.name}: {total - len(todo)} of {total} cells finished"
        + (f" ({total - len(todo) - len(finished)} in {pathlib.Path(results_dir) / study.name}"
           ".json)" if total - len(todo) > len(finished) else "")
        + f", {len(todo)} to run ({jobs} at a time) in {pathlib.Path(runs_dir) / study.name}",
        flush=True)
    failures, lock, done = [], threading.Lock(), [0]
    # The pretraining runs the cells to run start from, first (each uses the cores the
    # cells would; a failed one fails the cells that need it).
    failed = set()
    for pretraining in study.pretraining:
        if not any(arm.pretrained == pretraining.name for arm, _ in todo):
            continue
        directory = pretraining.run_dir(runs_dir, study)
        if not (directory / PRETRAINING_FILE).exists():
            log(f"pretraining {pretraining.name} in {directory}", flush=True)
        try:
            record = run_pretraining(study, pretraining, runs_dir)
            log(f"pretraining {pretraining.name}: {record['results']}", flush=True)
        except CellError as error:
            failed.add(pretraining.name)
            log(f"pretraining {pretraining.name} FAILED: {error}", flush=True)
    for arm, seed in [cell for cell in todo if cell[0].pretrained in failed]:
        failures.append((arm.name, seed, f"pretraining {arm.pretrained} failed"))
    todo = [cell for cell in todo if cell[0].pretrained not in failed]

    def one(arm, seed):
        start = time.perf_counter()
        try:
            run_cell(study, arm, seed, runs_dir)
            message = f"finished in {time.perf_counter() - start:.0f} s"
        except CellError as error:
            failures.append((arm.name, seed, str(error)))
            message = f"FAILED: {error}"
        with lock:
            done[0] += 1
            log(f"[{done[0]}/{len(todo)}] {arm.name} seed {seed}: {message}", flush=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for future in [pool.submit(one, arm, seed) for arm, seed in todo]:
            future.result()
    return failures


def parser():
    result = argparse.ArgumentParser(
        prog="python -m studies.run", description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    result.add_argument("name", choices=sorted(STUDIES), metavar="NAME",
                        help="the study: " + ", ".join(sorted(STUDIES)))
    result.add_argument("--seeds", help="seeds to run, e.g. 0-4, 3 or 0,2 (default: the "
                        "study's)")
    result.add_argument("--arm", action="append", help="run only this arm (repeatable)")
    result.add_argument("--jobs", type=positive_int, default=1,
                        help="cells run side by side, each single-threaded (default 1)")
    result.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR,
                        help=f"where the run folders go (default {DEFAULT_RUNS_DIR})")
    result.add_argument("--ignore-report", action="store_true",
                        help=f"run the cells of the report in {RESULTS_DIR}/NAME.json too")
    result.add_argument("--list", action="store_true",
                        help="print each cell's state and command, run nothing")
    return result


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = parser().parse_args(argv)
    study = get_study(args.name)
    try:
        seeds = parse_seeds(args.seeds) if args.seeds is not None else None
        chosen = cells(study, args.arm, seeds)
    except ValueError as error:
        parser().error(str(error))
    results_dir = None if args.ignore_report else RESULTS_DIR
    if args.list:
        elsewhere = reported_cells(study, results_dir) if results_dir else set()
        for arm, seed in chosen:
            directory = study.cell_dir(args.runs_dir, arm, seed)
            state = cell_state(study, args.runs_dir, arm, seed)
            if state != "finished" and (arm.name, seed) in elsewhere:
                state = "reported"
            print(f"{state:8s} {arm.name} seed {seed}: "
                  f"python {' '.join(study.train_command(arm, seed, directory))}")
        return 0
    failures = run_study(study, args.runs_dir, args.arm, seeds, args.jobs,
                         results_dir=results_dir)
    if failures:
        print(f"{len(failures)} cell(s) failed; rerun the same command to retry them.",
              file=sys.stderr)
        return 1
    print(f"done: python -m studies.report {study.name}"
          + (f" --runs-dir {args.runs_dir}" if args.runs_dir != DEFAULT_RUNS_DIR else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
