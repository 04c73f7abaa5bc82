"""Training-step time of every workflow's default run on each Keras backend, into one table.

    python tools/workflow_step_times.py [--backends tensorflow jax] [--json results/workflow_step_times.json]

Runs each workflow's training command (``python -m <workflow>.train``, its default digits
config, default mode: every core, oneDNN on TensorFlow) for a short run in a temporary folder,
once per backend, one run at a time, and reads ``seconds_per_step`` from the run's
``timing.json``: the median over the ``history.csv`` intervals after the first (which holds
tracing and compilation), held-out evaluation excluded. Run from the repository root.
"""

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Short runs of each default config, with at least four intervals in history.csv.
RUNS = {
    "gan": ["--steps", "80", "--checkpoint-every", "20", "--eval-samples", "0"],
    "segmentation": ["--steps", "100", "--checkpoint-every", "25"],
    "classification": ["--epochs", "4"],
    "sequence": ["--steps", "100", "--eval-every", "25"],
}


def step_time(workflow, backend, directory):
    command = [sys.executable, "-m", f"{workflow}.train", *RUNS[workflow],
               "--model-dir", str(directory)]
    environment = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2",
                   "PYTHONPATH": str(ROOT)}
    completed = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True,
                               text=True)
    if completed.returncode:
        raise RuntimeError(f"{' '.join(command)} failed on {backend}:\n{completed.stderr[-3000:]}")
    timing = json.loads((directory / "timing.json").read_text())
    run = json.loads((directory / "run.json").read_text())
    return {"workflow": workflow, "backend": backend, "config": run["config"].get("name"),
            "seconds_per_step": timing["seconds_per_step"],
            "command": " ".join(["python", "-m", f"{workflow}.train", *RUNS[workflow]])}


def cpu_model():
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax"],
                        choices=["tensorflow", "jax"])
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for workflow in args.workflows:
            for backend in args.backends:
                row = step_time(workflow, backend, pathlib.Path(scratch) / f"{workflow}-{backend}")
                rows.append(row)
                print(f"{workflow:<15}{backend:<12}{row['seconds_per_step'] * 1e3:>9.1f} ms",
                      flush=True)
    ratio_header = " JAX / TF |" if len(args.backends) == 2 else ""
    print("\n| Workflow (default config) | "
          + " | ".join(f"{b} ms/step" for b in args.backends) + " |" + ratio_header)
    print("| --- |" + " --- |" * (len(args.backends) + bool(ratio_header)))
    for workflow in args.workflows:
        times = [next(r["seconds_per_step"] for r in rows if r["workflow"] == workflow
                      and r["backend"] == b) for b in args.backends]
        ratio = f" {times[1] / times[0]:.2f} |" if len(times) == 2 else ""
        print(f"| `{workflow}` | " + " | ".join(f"{t * 1e3:.0f}" for t in times) + " |" + ratio)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"machine": cpu_model(), "cores": os.cpu_count(),
             "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
