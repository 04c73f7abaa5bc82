"""Keras' two copies of each convolution's input on PyTorch, with and without
``kctx.export._drop_layout_copies``, exported and compiled by ``torch.compile``.

``KERAS_BACKEND=torch python tools/layout_copies_cpu.py [--size 512] [--repeats 10]``
prints, for SegNeXt-T at batch 1, the median ms per call of the exported program as
exported and rewritten, then of ``torch.compile`` of each (each form in a fresh process:
Inductor keeps its caches per process), and the largest relative difference from Keras'
eager call. Why ``inference_function`` rewrites only the program it does not compile.
"""

import argparse
import json
import os
import subprocess
import sys
import time


def measure(size, repeats, rewrite, compile):
    import keras
    import numpy as np
    import torch

    from kctx.export import _drop_layout_copies, _torch_exported
    from kctx.models import segnext

    model = segnext("t", num_classes=150, input_shape=(size, size, 3))
    x = keras.ops.convert_to_tensor(np.random.default_rng(0).uniform(
        0, 255, (1, size, size, 3)).astype("float32"))

    with torch.no_grad():
        program = _torch_exported(model, x)
        rewritten = _drop_layout_copies(program) if rewrite else 0
        if compile:
            program = torch.compile(program)
        start = time.perf_counter()
        out = program(x)
        first_s = time.perf_counter() - start
        expected = keras.ops.convert_to_numpy(model(x, training=False))
        error = float(np.abs(keras.ops.convert_to_numpy(out) - expected).max()
                      / np.abs(expected).max())
        for _ in range(3):
            program(x)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            program(x)
            times.append((time.perf_counter() - start) * 1e3)
    return {"rewrite": rewrite, "compile": compile, "rewritten": rewritten,
            "median_ms": round(sorted(times)[len(times) // 2], 1), "min_ms": round(min(times), 1),
            "first_call_s": round(first_s, 1), "relative_error": error}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json")
    parser.add_argument("--form", nargs=2, help=argparse.SUPPRESS)  # one measuring process
    args = parser.parse_args()
    if args.form:
        result = measure(args.size, args.repeats, args.form[0] == "1", args.form[1] == "1")
        print("RESULT " + json.dumps(result))
        return
    rows = []
    for compile in ("0", "1"):
        for rewrite in ("0", "1"):
            completed = subprocess.run(
                [sys.executable, __file__, "--size", str(args.size), "--repeats",
                 str(args.repeats), "--form", rewrite, compile], capture_output=True,
                text=True, env=dict(os.environ, KERAS_BACKEND="torch"))
            line = [x for x in completed.stdout.splitlines() if x.startswith("RESULT ")]
            if not line:
                raise SystemExit(completed.stderr[-3000:])
            row = json.loads(line[0][len("RESULT "):])
            rows.append(row)
            print(f"{'compiled' if row['compile'] else 'exported'}, "
                  f"{'rewritten' if row['rewrite'] else 'as exported'} "
                  f"({row['rewritten']} inputs): {row['median_ms']} ms (min {row['min_ms']}), "
                  f"first call {row['first_call_s']} s, error {row['relative_error']:.1e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": args.size, "repeats": args.repeats, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
