"""The package's ``>>>`` examples, run on the backend of the process: tests/test_docs.py runs
them on TensorFlow, tests/backend_checks.py on PyTorch (in a process without TensorFlow, as
a user of ``pip install "kctx[torch]"`` copies them)."""

import doctest
import importlib
import importlib.util
import pkgutil

import keras
import numpy as np

import kctx

# Examples that show a TensorFlow-only API (their objects say so): not run on other backends.
TENSORFLOW_ONLY = ("kctx.distribute.StrategyDistribution", "kctx.profile.macs.count_graph_macs")
# Examples that show an API of an optional package, by the module they import: run where it
# is installed (the suite's environment has them all; `pip install "kctx[torch]"` neither).
NEEDS = {"kctx.bench.segnext_gpu.dispatch_us": "jax", "kctx.bench.segnext_gpu.hlo_census": "jax",
         "kctx.profile.macs.count_jaxpr_macs": "jax", "kctx.metrics.folder.image_batches": "PIL"}


def not_installed():
    """The examples of :data:`NEEDS` whose package this environment lacks."""
    return tuple(name for name, module in NEEDS.items()
                 if importlib.util.find_spec(module) is None)


def run_docstring_examples(skip=()):
    """Run every docstring example of kctx (``keras`` and ``np`` in scope, as in Keras's own
    doctests) except those of the objects named in ``skip``; returns (failure reports,
    examples attempted, examples marked ``+SKIP``)."""
    finder = doctest.DocTestFinder()
    failures, attempted, skipped = [], 0, 0
    for info in pkgutil.walk_packages(kctx.__path__, "kctx."):
        if info.name.endswith(("__main__", ".worker")):
            continue
        module = importlib.import_module(info.name)
        for test in finder.find(module, info.name, extraglobs={"keras": keras, "np": np}):
            if test.name in skip:
                continue
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS
                                           | doctest.NORMALIZE_WHITESPACE)
            report = []
            result = runner.run(test, out=report.append)
            attempted += result.attempted
            skipped += sum(bool(e.options.get(doctest.SKIP)) for e in test.examples)
            if result.failed:
                failures.append("".join(report))
    return failures, attempted, skipped
