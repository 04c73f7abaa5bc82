"""``inference_function``'s forms of the exported graph on PyTorch, measured with and
without each step, as exported and compiled by ``torch.compile``: Keras' convolution as
released (which copies each convolution's input twice) or with ``kctx._keras_fixes``' fix
(``KCTX_NO_KERAS_FIXES=conv`` in the measuring process gives the former), what the graph
computes from the weights alone computed once (``kctx.export._fold_weights``) and the
export's checks of each tensor's metadata removed (``kctx.export._drop_metadata_checks``).

``KERAS_BACKEND=torch python tools/exported_rewrites_cpu.py [--size 512] [--repeats 10]
[--json F]`` prints, for SegNeXt-T at batch 1, each form's median ms per call (each in a
fresh process: Inductor keeps its caches per process, and Keras' convolution is chosen at
import), the kernels its call launches (``kctx.bench.standalone.torch_census`` of the
exported program, ``inductor_census`` of the compiled one's code) and the largest relative
difference from Keras' eager call. Why ``inference_function`` folds the weights into both
programs and drops the checks only from the one it does not compile (Inductor drops them
itself). Committed runs: ``results/exported_rewrites_cpu.json`` (512×512) and
``results/exported_rewrites_cpu_64.json`` (``--size 64 --repeats 20``).
"""

import argparse
import json
import os
import subprocess
import sys
import time

# (Keras' convolution fixed, fold the weights, drop the checks, compile): the forms measured.
FORMS = ((False, False, False, False), (True, False, False, False), (True, True, False, False),
         (True, True, True, False),
         (False, False, False, True), (True, False, False, True), (True, True, False, True))


def measure(size, repeats, conv_fixed, fold, checks, compile):
    import keras
    import numpy as np
    import torch

    from kctx import _keras_fixes
    from kctx.bench.standalone import inductor_census, torch_census
    from kctx.export import _drop_metadata_checks, _fold_weights, _torch_exported
    from kctx.models import segnext

    assert (_keras_fixes.conv_input_copies() == 0) == conv_fixed

    model = segnext("t", num_classes=150, input_shape=(size, size, 3))
    x = keras.ops.convert_to_tensor(np.random.default_rng(0).uniform(
        0, 255, (1, size, size, 3)).astype("float32"))

    with torch.no_grad():
        program = _torch_exported(model, x)
        folded = _fold_weights(program) if fold else 0
        removed = _drop_metadata_checks(program) if checks else 0
        start = time.perf_counter()
        if compile:
            from torch._inductor.utils import run_and_get_code

            program = torch.compile(program)
            out, code = run_and_get_code(program, x)
            census = inductor_census(code)
        else:
            out = program(x)
            census = torch_census(lambda: program(x), inputs=[x])
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
    return {"conv_fixed": conv_fixed, "fold": fold, "checks": checks, "compile": compile,
            "folded": folded, "checks_removed": removed,
            "kernels": census["kernels"],
            "median_ms": round(sorted(times)[len(times) // 2], 1), "min_ms": round(min(times), 1),
            "first_call_s": round(first_s, 1), "relative_error": error}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json")
    parser.add_argument("--form", nargs=4, help=argparse.SUPPRESS)  # one measuring process
    args = parser.parse_args()
    if args.form:
        result = measure(args.size, args.repeats, *(flag == "1" for flag in args.form))
        print("RESULT " + json.dumps(result))
        return
    rows = []
    for form in FORMS:
        completed = subprocess.run(
            [sys.executable, __file__, "--size", str(args.size), "--repeats",
             str(args.repeats), "--form", *("1" if flag else "0" for flag in form)],
            capture_output=True, text=True,
            env=dict(os.environ, KERAS_BACKEND="torch",
                     KCTX_NO_KERAS_FIXES="0" if form[0] else "conv"))
        line = [x for x in completed.stdout.splitlines() if x.startswith("RESULT ")]
        if not line:
            raise SystemExit(completed.stderr[-3000:])
        row = json.loads(line[0][len("RESULT "):])
        rows.append(row)
        rewrites = ["Keras' convolution fixed" if row["conv_fixed"] else
                    "Keras' convolution as released"] + [
            f"{row['folded']} values folded"] * row["fold"] + [
            f"{row['checks_removed']} checks removed"] * row["checks"]
        print(f"{'compiled' if row['compile'] else 'exported'}, "
              f"{', '.join(rewrites)}: {row['median_ms']} ms "
              f"(min {row['min_ms']}), {row['kernels']} kernels, first call "
              f"{row['first_call_s']} s, error {row['relative_error']:.1e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": args.size, "repeats": args.repeats, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
