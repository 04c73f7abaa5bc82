"""Entry point of the isolated profiling process: ``python -m kctx.profile.worker TASK``.

Reads a JSON request on stdin and prints one result line on stdout. ``TASK`` is one of
the profiler's tasks, or ``kctx.MODULE:FUNCTION``: a function of a kctx module called
with the request as keyword arguments (how the benchmarks measure in fresh processes).
"""

import importlib
import json
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    task = argv[0]
    request = json.loads(sys.stdin.read())

    import kctx  # noqa: F401  (registers the kctx layers for deserialization)
    from kctx.profile import layer_profile

    if task == "profile":
        spec = request["spec"]
        if spec.get("module") and spec["module"] != "__main__":
            importlib.import_module(spec["module"])
        result = layer_profile._profile_here(
            spec["serialized"],
            request["input_shape"],
            tuple(request["modes"]),
            request["repeats"],
            request["train_repeats"],
            request["warmup"],
            request["jit_compile"],
            request["seed"],
        )
    elif task == "matmul_peak":
        result = layer_profile.matmul_peak_gflops(
            tuple(request["sizes"]), request["repeats"], isolate=False
        )
    elif task == "retention":
        result = layer_profile.memory_kept_per_model(**request, isolate=False)
    elif task == "runtime":
        from kctx.profile.runtimes import runtime_latency

        result = runtime_latency(**request, isolate=False)
    elif ":" in task and task.startswith("kctx."):
        module_name, function = task.split(":", 1)
        result = getattr(importlib.import_module(module_name), function)(**request)
    else:
        raise SystemExit(f"unknown task {task!r}")
    sys.stdout.write(layer_profile._RESULT_MARKER + json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
