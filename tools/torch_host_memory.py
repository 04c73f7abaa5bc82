"""The language workflow's training step on PyTorch's CPU: time, page faults and memory,
with Keras as released or with :mod:`kctx._keras_fixes`, and with glibc's default
allocation or :func:`kctx.host_memory.reuse_freed_host_memory`.

    python tools/torch_host_memory.py [--steps 6] [--batch-size 16] [--json results/torch_host_memory.json]

Each variant in a process of its own (both are process-wide): the default config's decoder
(``language.workflow.build_model``: 4 blocks of 128 channels, the causal Hamburger's NMF with
d = 256, r = 16 over T = 512), ``train_on_batch`` on the same random tokens ``--steps``
times; for each step its seconds, the minor page faults it took and the resident memory
after it, and the process's peak resident memory. Before the steps, the sum of two
(16, 512, 256, 16) float32 tensors (134 MB each), into a fresh tensor and into one held
(``out=``), median of 7: what a step's large intermediates cost to allocate. Run from the
repository root.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

VARIANTS = {
    "keras": {"KCTX_NO_KERAS_FIXES": "1"},
    "keras_fixes": {},
    "keras_fixes+reuse": {"KCTX_REUSE_HOST_MEMORY": "1"},
}

CHILD = r"""
import json, os, resource, sys, time
import numpy as np
import torch
import kctx
from kctx.host_memory import reuse_freed_host_memory
from kctx._keras_fixes import tree_keeps_structures_alive
from language.configs import get_config
from language.workflow import build_model

steps, batch_size = int(sys.argv[1]), int(sys.argv[2])
reuse = bool(os.environ.get("KCTX_REUSE_HOST_MEMORY")) and reuse_freed_host_memory()


def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def median_ms(function, repeats=7):
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return 1e3 * sorted(times)[repeats // 2]


a, b = torch.rand(16, 512, 256, 16), torch.rand(16, 512, 256, 16)
held = torch.empty_like(a)
sums = {"fresh_ms": median_ms(lambda: a + b),
        "held_ms": median_ms(lambda: torch.add(a, b, out=held))}
del a, b, held
config = get_config("stdlib", batch_size=batch_size)
model = build_model(config)
tokens = np.random.default_rng(0).integers(0, 256, (batch_size, config.context_length + 1))
rows = []
for step in range(steps):
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    model.train_on_batch(tokens[:, :-1].astype("int32"), tokens[:, 1:].astype("int32"))
    rows.append({"seconds": time.perf_counter() - start,
                 "page_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults,
                 "rss_mb": rss_mb()})
print(json.dumps({"tree_keeps_structures_alive": tree_keeps_structures_alive(),
                  "reuse_freed_host_memory": reuse, "torch_threads": torch.get_num_threads(),
                  "sum_of_134_mb_tensors": sums, "steps": rows,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6}))
"""


def measure(variant, steps, batch_size):
    environment = {**os.environ, **VARIANTS[variant], "KERAS_BACKEND": "torch",
                   "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
    completed = subprocess.run([sys.executable, "-c", CHILD, str(steps), str(batch_size)],
                               cwd=ROOT, env=environment, capture_output=True, text=True)
    if completed.returncode:
        raise RuntimeError(f"{variant} failed:\n{completed.stderr[-3000:]}")
    return {"variant": variant, **json.loads(completed.stdout.strip().splitlines()[-1])}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tools"))
    from workflow_step_times import cpu_model

    results = []
    for variant in args.variants:
        result = measure(variant, args.steps, args.batch_size)
        results.append(result)
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(
                {"machine": cpu_model(), "cores": os.cpu_count(), "steps": args.steps,
                 "batch_size": args.batch_size, "results": results}, indent=1) + "\n")
        sums = result["sum_of_134_mb_tensors"]
        print(f"{variant}: a + b {sums['fresh_ms']:.1f} ms fresh, {sums['held_ms']:.1f} ms "
              f"into a held tensor; peak {result['peak_rss_mb']:,.0f} MB", flush=True)
        for index, row in enumerate(result["steps"]):
            print(f"  step {index}: {row['seconds']:6.2f} s {row['page_faults']:>9,} faults "
                  f"{row['rss_mb']:>8,.0f} MB", flush=True)
    print("\n| Variant | Steps after the first, s | Their page faults | Memory after the last "
          "step, MB | Peak, MB |\n| --- | --- | --- | --- | --- |")
    for result in results:
        later = result["steps"][1:]
        print(f"| {result['variant']} | "
              + ", ".join(f"{row['seconds']:.1f}" for row in later) + " | "
              + ", ".join(f"{row['page_faults']:,}" for row in later) + " | "
              + f"{result['steps'][-1]['rss_mb']:,.0f} | {result['peak_rss_mb']:,.0f} |")


if __name__ == "__main__":
    main()
