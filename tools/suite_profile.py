"""Where the test suite's CPU goes, from a py-spy recording of the whole session.

Record the suite with its subprocesses (py-spy is not a dependency: ``pip install py-spy``
into any environment), on a clone as docs/development.md's suite-time runs are::

    py-spy record --subprocesses --nonblocking -r 20 --format raw -o suite.txt -- \\
        .venv/bin/python -m pytest

then ``python tools/suite_profile.py suite.txt`` prints the seconds (samples / rate) under
each kind of work, the processes by command, and the tests whose xdist worker traced
TensorFlow graphs longest. A sample counts under every category whose frame it holds, so
the rows overlap (the import of Keras is part of all imports). The sampling itself slows
the run (49 minutes against 36 unsampled, measured here): read shares, not wall times.
"""

import argparse
import collections
import re

CATEGORIES = {
    "imports (any module)": r"_find_and_load",
    "  import keras": r"<module> \(keras/__init__\.py",
    "  import tensorflow": r"<module> \(tensorflow/__init__\.py",
    "  import scikit-learn (Keras's wrappers)": r"<module> \(sklearn/__init__",
    "  import jax": r"<module> \(jax/__init__\.py",
    "  import torch": r"<module> \(torch/__init__\.py",
    "Keras fit": r"\bfit \(keras/src/backend/\w+/trainer\.py",
    "TensorFlow graph tracing": r"func_graph_from_py_func",
    "TensorFlow graph execution": r"quick_execute",
    "Keras layer build": r"build_wrapper",
    "Keras .keras save / load": r"saving_lib\.py",
    "ONNX export (tf2onnx)": r"export_onnx",
    "  tf2onnx graph optimizers": r"optimize_graph",
    "LiteRT export": r"export_litert",
    "SavedModel export": r"export_saved_model",
    "JAX compile": r"compile_or_get_cached|backend_compile",
    "JAX tracing": r"trace_to_jaxpr",
}


def samples(path):
    """(stack, count) for each line of a py-spy raw file."""
    with open(path, errors="replace") as lines:
        for line in lines:
            stack, _, count = line.rstrip().rpartition(" ")
            if count.isdigit():
                yield stack, int(count)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", help="py-spy's --format raw output")
    parser.add_argument("--rate", type=float, default=20.0, help="py-spy's -r (samples/s)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    patterns = {name: re.compile(pattern) for name, pattern in CATEGORIES.items()}
    total = 0
    categories, processes, commands = (collections.Counter(), collections.Counter(),
                                       collections.defaultdict(set))
    tests, tracing = collections.Counter(), collections.Counter()
    for stack, count in samples(args.raw):
        total += count
        for name, pattern in patterns.items():
            if pattern.search(stack):
                categories[name] += count
        chain = re.findall(r'process (\d+):"([^"]{0,60})', stack)
        if not chain:  # py-spy writes a multi-line command's other lines apart
            command = "(unattributed)"
        elif len(chain) <= 2:  # pytest and its xdist workers
            command = "pytest (xdist workers)"
            test = re.search(r";(test_\w+) \((test_\w+\.py)", stack)
            key = f"{test[2]}::{test[1]}" if test else "(outside a test)"
            tests[key] += count
            if "func_graph_from_py_func" in stack:
                tracing[key] += count
        else:
            command = re.sub(r"/tmp/\S*", "", chain[-1][1]).strip() or "(python -c)"
        processes[command] += count
        if chain:
            commands[command].add(chain[-1][0])
    seconds = 1.0 / args.rate
    print(f"{total * seconds:,.0f} s sampled\n\nkind of work")
    for name in CATEGORIES:
        print(f"  {categories[name] * seconds:8,.0f} s {100 * categories[name] / total:5.1f}%  "
              f"{name}")
    print("\nprocesses by command")
    for command, count in processes.most_common(args.top):
        print(f"  {count * seconds:8,.0f} s  {len(commands[command]):3d} processes  {command}")
    print("\ntests in the xdist workers (their subprocesses apart): seconds, of them tracing")
    for test, count in tests.most_common(args.top):
        print(f"  {count * seconds:8,.0f} s {tracing[test] * seconds:6,.0f} s  {test}")


if __name__ == "__main__":
    main()
