#!/usr/bin/env python
"""kctx's ``.pth`` reader beside ``torch.load(weights_only=True)`` on the hostile files of
tests/test_hostile_checkpoints.py, each read in a forked child (10 s deadline, 1.5 GiB of
address space above the probe).

Run from the repository root with kctx's environment, naming a Python that has torch:

    .venv/bin/python tools/hostile_checkpoint_comparison.py --torch-python /path/to/venv/bin/python \\
        --json results/hostile_checkpoints.json

It builds every case of the battery, runs tests/hostile_checkpoint_probe.py once with
kctx's reader and once with ``KCTX_PROBE_READER=torch`` in the torch environment, and
prints one row per case: what each reader did (returned, which error, crashed, timed out
or ran out of memory), in how many seconds and with how much memory above a tiny file.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_hostile_checkpoints import CASES, PROBE  # noqa: E402


def probe(python, jobs, reader):
    env = dict(os.environ, PYTHONPATH=str(ROOT), KCTX_PROBE_READER=reader,
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    done = subprocess.run([python, PROBE], input=json.dumps(jobs), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60 + 15 * len(jobs))
    if done.returncode != 0:
        raise RuntimeError(f"the {reader} probe failed: {done.stderr[-3000:]}")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return lines[0], lines[1:]


def outcome(report):
    if report["status"] != "exited":
        return "crash" if report["status"].startswith("signal") else report["status"]
    if report["outcome"] == "ok":
        leaks = f", leaks {report['leaks'][0]}" if report.get("leaks") else ""
        return f"returned{leaks}"
    if report.get("memory_error") or report["exc_type"] == "MemoryError":
        return f"{report['exc_type']} (out of memory)"
    return report["exc_type"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-python", required=True)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        jobs = []
        for case in CASES:
            where = Path(folder) / case.id
            where.mkdir()
            jobs.append({"path": str(case.build(where)), "func": case.func, "check": case.check,
                         "marker": str(where / "pwned"), "deadline": 10, **case.job})
        kctx_header, kctx = probe(sys.executable, jobs, "kctx")
        torch_jobs = [{**job, "func": "read_torch", "check": None} for job in jobs]
        torch_header, torch = probe(args.torch_python, torch_jobs, "torch")
    rows = []
    print("| case | kctx | s | MB | torch.load(weights_only=True) | s | MB |")
    print("|---|---|---:|---:|---|---:|---:|")
    for case, mine, theirs in zip(CASES, kctx, torch):
        row = {"case": case.id, "kctx": outcome(mine), "kctx_seconds": mine.get("seconds"),
               "kctx_growth_mb": mine.get("growth_mb"), "torch": outcome(theirs),
               "torch_seconds": theirs.get("seconds"), "torch_growth_mb": theirs.get("growth_mb"),
               "torch_marker_exists": theirs.get("marker_exists")}
        rows.append(row)
        seconds = lambda value: "–" if value is None else f"{value:.2f}"  # noqa: E731
        print(f"| {case.id} | {row['kctx']} | {seconds(row['kctx_seconds'])} | "
              f"{row['kctx_growth_mb']} | {row['torch']} | {seconds(row['torch_seconds'])} | "
              f"{row['torch_growth_mb']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"command": "python tools/hostile_checkpoint_comparison.py "
                        + " ".join(sys.argv[1:]),
             "kctx": kctx_header, "torch": torch_header, "rows": rows}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
