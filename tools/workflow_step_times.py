"""Training-step time of every workflow's default run on each Keras backend, into one table.

    python tools/workflow_step_times.py [--workflows ...] [--backends tensorflow jax torch] [--json results/workflow_step_times.json]

Runs each workflow's training command (``python -m <workflow>.train``, its default digits
config, default mode: every core, oneDNN on TensorFlow) for a short run in a temporary folder,
once per backend, one run at a time, and reads ``seconds_per_step`` from the run's
``timing.json``: the median over the ``history.csv`` intervals after the first (which holds
tracing and compilation), held-out evaluation excluded; and the run's peak memory (its
``peak_memory_mb``). Run from the repository root.
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
    "language": ["--steps", "20", "--checkpoint-every", "5", "--eval-characters", "4096"],
}
BACKEND_NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}


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
            "peak_memory_mb": timing.get("peak_memory_mb"),
            "command": " ".join(["python", "-m", f"{workflow}.train", *RUNS[workflow]])}


def cpu_model():
    """The CPU's model name, with its family and model numbers where /proc/cpuinfo has them
    (CPUs of one name differ: "AMD EPYC" is several generations)."""
    try:
        fields = {}
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
        name = fields["model name"]
    except (OSError, KeyError):
        return platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']} model {fields['model']})"
    return name


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax", "torch"],
                        choices=list(BACKEND_NAMES))
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for workflow in args.workflows:
            for backend in args.backends:
                row = step_time(workflow, backend, pathlib.Path(scratch) / f"{workflow}-{backend}")
                rows.append(row)
                if args.json:  # after every run: a run that fails keeps the rows before it
                    pathlib.Path(args.json).write_text(json.dumps(
                        {"machine": cpu_model(), "cores": os.cpu_count(), "rows": rows},
                        indent=1) + "\n")
                print(f"{workflow:<15}{backend:<12}{row['seconds_per_step'] * 1e3:>9.1f} ms"
                      f"{row['peak_memory_mb'] or 0:>9.0f} MB peak", flush=True)
    # Each backend after the first, as a multiple of the first's time.
    first, others = BACKEND_NAMES[args.backends[0]], [BACKEND_NAMES[b] for b in args.backends[1:]]
    print("\n| Workflow (default config) | "
          + " | ".join(f"{BACKEND_NAMES[b]} ms / step" for b in args.backends) + " |"
          + "".join(f" {other} / {first} |" for other in others))
    print("| --- |" + " --- |" * (2 * len(args.backends) - 1))
    for workflow in args.workflows:
        times = [next(r["seconds_per_step"] for r in rows if r["workflow"] == workflow
                      and r["backend"] == b) for b in args.backends]
        print(f"| `{workflow}` | " + " | ".join(f"{t * 1e3:,.0f}" for t in times) + " |"
              + "".join(f" {t / times[0]:.2f} |" for t in times[1:]))


if __name__ == "__main__":
    main()
