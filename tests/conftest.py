"""Session set-up: quiet TensorFlow and two logical CPUs for MirroredStrategy.

The suite runs on TensorFlow; tests/test_backends.py runs test modules of it again on JAX
and PyTorch (``KERAS_BACKEND``), in processes where TensorFlow cannot be imported."""

import os
import resource
import sys
import tempfile
import time

import pytest

import without_tensorflow

if os.environ.get(without_tensorflow.ENVIRONMENT_VARIABLE) == "1":
    # Started from a process of tests/without_tensorflow.py's (as pytest-xdist's workers
    # are): TensorFlow stays hidden here too.
    without_tensorflow.hide_tensorflow()
# The test command installs without byte-compiling (`pip install --no-compile`: 68 s instead
# of 130 for the test extra, which compiles every module of TensorFlow, JAX, PyTorch...): the
# session writes the bytecode of the modules its processes import, once, even where
# PYTHONDONTWRITEBYTECODE is set (its subprocesses too), so that each later process reads
# it (a process importing TensorFlow, JAX and PyTorch: 22 s compiling them, 9 s after).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# One OpenBLAS thread per process (read when NumPy loads, which is after this: pytest and
# its plugins do not import it; subprocesses inherit it). The workers share the two
# cores, and in a process that has imported TensorFlow, NumPy's small matmuls on OpenBLAS's
# default threads ran over 100× slower beside other work than on one thread (150×128 by
# 128×150: 8.0 against 0.07 ms, measured here): the KID subsets of an FCD evaluation took 3.2 s,
# tests/test_gan.py's evaluation test 74 instead of 49 s. Every test passes the same with it
# (a bit-for-bit comparison is between two runs under the same setting).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
assert "numpy" not in sys.modules, "NumPy loaded before conftest set OPENBLAS_NUM_THREADS"

if os.environ["KERAS_BACKEND"] == "tensorflow":
    from kctx.testing import configure_logical_cpus

    # Must run before TensorFlow initialises its devices.
    configure_logical_cpus(2)

# The directories this process makes for the session are removed when it ends
# (pytest_unconfigure): xdist's workers and the tests' subprocesses (pytest again on JAX and
# PyTorch included) inherit the variables and make none.
_SESSION_DIRECTORIES = []
# Every temporary file of the workers and of the tests' subprocesses goes to one folder of the
# session's (TMPDIR, inherited). A process killed with SIGKILL (the workflows' kill and resume
# tests) cannot remove its own: TensorFlow's autograph writes each converted tf.data function
# to a file it removes at exit (test_runner.py's TensorFlow GAN kill test left 4 in /tmp; a
# day's runs of the suite left 313), beside TensorFlow Datasets' empty `tmp*tfds` folders.
# This process keeps the system's folder (`tempfile.gettempdir()` is read first), so pytest's
# `tmp_path` folders stay where pytest keeps them for a failed test's inspection.
if "KCTX_TEST_TMPDIR" not in os.environ:
    tempfile.gettempdir()
    os.environ["KCTX_TEST_TMPDIR"] = tempfile.mkdtemp(prefix="kctx-test-tmp-")
    os.environ["TMPDIR"] = os.environ["KCTX_TEST_TMPDIR"]
    _SESSION_DIRECTORIES.append(os.environ["KCTX_TEST_TMPDIR"])

# Cached artefacts (e.g. the digits classifier of the FCD) go to a per-session
# directory, never to the user's home.
if "KCTX_CACHE_DIR" not in os.environ:
    os.environ["KCTX_CACHE_DIR"] = tempfile.mkdtemp(prefix="kctx-test-cache-")
    _SESSION_DIRECTORIES.append(os.environ["KCTX_CACHE_DIR"])

# XLA compiles the suite's programs (the JAX subprocesses' and TensorFlow's jit_compile ones)
# without LLVM's costly optimisations: they are small and run a few steps, so compiling is
# most of their time (measured here: the JAX data-parallel check 86 → 49 CPU s, a JAX layer
# battery share 68 → 56, TensorFlow's XLA layer and GAN checks 74 → 60). The flags change
# how fast the machine code runs, not what it computes: every tolerance and every
# bit-for-bit comparison (between two runs under the same flags) holds as before.
# Subprocesses inherit them (tests/workflow_runs.py's environments keep them).
FAST_COMPILE_XLA_FLAGS = ("--xla_backend_optimization_level=0",
                          "--xla_llvm_disable_expensive_passes=true")
_flags = os.environ.get("XLA_FLAGS", "").split()
os.environ["XLA_FLAGS"] = " ".join(_flags + [flag for flag in FAST_COMPILE_XLA_FLAGS
                                             if flag.split("=")[0] not in
                                             {given.split("=")[0] for given in _flags}])

# The JAX subprocesses (kill and resume of every workflow, two processes, mixed precision)
# compile the same programs again and again; JAX's persistent compilation cache, shared by the
# session's processes, loads them instead (a tiny JAX segmentation run, beside a study: 25 s
# warm, 61 s without the cache).
# A loaded executable is the one XLA compiled: the cache key holds the program, the compile
# options, the jaxlib version and XLA_FLAGS, so the deterministic runs stay what they were.
# Every program, not only those that took a second to compile: a JAX process compiles a few
# hundred small ones (the eager ops of building and initialising a model, each shape once),
# which are most of a tiny run's time (a tiny GAN run: 33 s with the cache at its default 1 s
# threshold, 21 s with every program cached).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="kctx-test-jax-cache-")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    _SESSION_DIRECTORIES.append(os.environ["JAX_COMPILATION_CACHE_DIR"])


@pytest.fixture(scope="session")
def fcd_classifier():
    """The session's cached digits classifier (the FCD's extractor), trained in this test
    process on TensorFlow if no process of the session has trained it yet; returns its
    path. Tests whose JAX or PyTorch subprocesses score an FCD take it first, since the
    first process to need the classifier trains it for the whole session (a fresh process
    training it took 88 CPU s on JAX, 52 on PyTorch, 42 on TensorFlow, measured here). The
    session's FCDs then come from the same classifier whichever test runs first."""
    from kctx.metrics.extractors import DIGITS_CLASSIFIER_FILE, cache_dir, digits_classifier

    path = cache_dir() / DIGITS_CLASSIFIER_FILE
    if not path.exists():
        digits_classifier(log=None)
    return path


@pytest.fixture(autouse=True)
def _seeded_draws(request):
    """Every test starts from a random state of its own, whatever its worker ran before:
    Python's, NumPy's, TensorFlow's and PyTorch's global seeds and Keras' (an unseeded
    initializer takes its seed from Python's ``random``), from the test's id and
    ``KCTX_TEST_SEED`` (0 unless set). A test draws the same weights alone as in the suite,
    on every worker and in any order, so a failure reproduces with the test alone; another
    ``KCTX_TEST_SEED`` tries every tolerance on other draws."""
    import zlib

    import keras

    base = int(os.environ.get("KCTX_TEST_SEED") or 0)
    keras.utils.set_random_seed((zlib.crc32(request.node.nodeid.encode()) + base) % 2**31)


def _reset_peak():
    # Writing 5 to clear_refs resets VmHWM (the peak RSS) to the current RSS (Linux >= 4.0).
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        pass


_CPU_START = {}


def _cpu_seconds():
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                           resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


_RUNS_TESTS = [True]


def pytest_configure(config):
    # pytest-xdist's controller replays its workers' reports (and these hooks) without
    # running the tests: only the processes that run them log.
    _RUNS_TESTS[0] = hasattr(config, "workerinput") or not config.getoption("numprocesses",
                                                                             None)
    if not hasattr(config, "workerinput"):
        _compile_sources()


def pytest_unconfigure(config):
    """The session's temporary and cache directories go with it (each run left about 25 MB
    of caches, and the files of the processes it killed, in the temporary folder)."""
    import shutil

    for directory in _SESSION_DIRECTORIES:
        shutil.rmtree(directory, ignore_errors=True)


def _compile_sources():
    """Byte-compile the checkout's packages once, before the workers start: the suite starts
    about 150 Python processes, and where PYTHONDONTWRITEBYTECODE is set (or the checkout is
    fresh) each would compile kctx and the workflows from source again (0.5 s of a
    process's 6 s of imports, measured here; compileall takes 0.5 s once)."""
    import compileall
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    for package in ("kctx", "gan", "segmentation", "classification", "sequence", "language",
                    "studies", "tests"):
        if (root / package).is_dir():
            compileall.compile_dir(str(root / package), quiet=1)


def pytest_runtest_logstart(nodeid, location):
    if os.environ.get("KCTX_TEST_MEMORY"):
        _reset_peak()
    if os.environ.get("KCTX_TEST_CPU") and _RUNS_TESTS[0]:
        _CPU_START[nodeid] = (_cpu_seconds(), time.time())


def _log_cpu(nodeid):
    """With KCTX_TEST_CPU=FILE, append each test's CPU seconds in the test process and in
    the subprocesses it waited for (where the suite's work goes, apart from how the two
    workers' tests overlapped: a test's wall time counts the other worker's load too), then
    the wall-clock times it started and ended and the worker (where a worker waited)."""
    path = os.environ.get("KCTX_TEST_CPU")
    if path and nodeid in _CPU_START:
        ((own0, children0), started), (own, children) = _CPU_START.pop(nodeid), _cpu_seconds()
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(path, "a") as log:
            log.write(f"{own - own0:.2f}\t{children - children0:.2f}\t{nodeid}\t"
                      f"{started:.2f}\t{time.time():.2f}\t{worker}\n")


def pytest_runtest_logfinish(nodeid, location):
    """With KCTX_TEST_MEMORY=FILE, append each test's peak RSS during it and RSS after it (MB),
    and the xdist worker, to FILE: where a long test session's memory goes."""
    _log_cpu(nodeid)
    path = os.environ.get("KCTX_TEST_MEMORY")
    if path:
        from kctx.profile.layer_profile import _status_mb

        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(path, "a") as log:
            log.write(f"{_status_mb('VmHWM'):.0f}\t{_status_mb('VmRSS'):.0f}\t{worker}\t"
                      f"{nodeid}\n")

