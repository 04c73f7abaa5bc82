"""Deterministic mode: bit-identical CPU runs on TensorFlow and JAX.

The environment (single-threaded TensorFlow without oneDNN, single-threaded XLA) must be
in place before TensorFlow is imported or JAX starts its backend:
:func:`deterministic_variables` gives it, :func:`deterministic_environment` says whether
this process was started in it and :func:`enable_determinism` sets it (or refuses when it
is too late) and turns on TensorFlow's op determinism.
"""

import os
import sys

import keras

# What deterministic mode needs of TensorFlow, set before it is imported: one thread for
# ops and one between them, and no oneDNN kernels (measured here: with oneDNN, the
# gradients of the PSF network change in the last bit from call to call on identical
# inputs, even single-threaded; without it they do not).
DETERMINISTIC_ENVIRONMENT = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1",
                             "TF_ENABLE_ONEDNN_OPTS": "0"}
# And of XLA's CPU runtime on the JAX backend (read when JAX starts its backend): one
# thread for its kernels (appended to XLA_FLAGS, whose other flags are kept).
XLA_DETERMINISTIC_FLAGS = ("--xla_cpu_multi_thread_eigen=false",
                           "intra_op_parallelism_threads=1")


def deterministic_variables(environ=None):
    """The environment deterministic mode runs in: ``environ`` (default ``os.environ``)
    updated with :data:`DETERMINISTIC_ENVIRONMENT`, and on the JAX backend with
    :data:`XLA_DETERMINISTIC_FLAGS` appended to ``XLA_FLAGS``.

    Examples:
        >>> environment = deterministic_variables()
        >>> environment["TF_NUM_INTRAOP_THREADS"], environment["TF_ENABLE_ONEDNN_OPTS"]
        ('1', '0')
        >>> # then: subprocess.run([sys.executable, "-m", "gan.train"], env=environment)
    """
    environ = dict(os.environ if environ is None else environ)
    environ.update(DETERMINISTIC_ENVIRONMENT)
    if keras.backend.backend() == "jax":
        flags = environ.get("XLA_FLAGS", "").split()
        environ["XLA_FLAGS"] = " ".join(
            flags + [flag for flag in XLA_DETERMINISTIC_FLAGS if flag not in flags])
    return environ


def deterministic_environment():
    """Whether this process was started in the environment of :func:`deterministic_variables`."""
    expected = deterministic_variables()
    return all(os.environ.get(key) == expected[key]
               for key in (*DETERMINISTIC_ENVIRONMENT, "XLA_FLAGS") if key in expected)


def _started(module):
    if module == "tensorflow":
        return "tensorflow" in sys.modules
    if "jax" not in sys.modules:
        return False
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def enable_determinism():
    """Single-threaded TensorFlow without oneDNN, with op determinism (and single-threaded
    XLA on the JAX backend): bit-identical CPU runs.

    The environment of :func:`deterministic_variables` must be in place before
    TensorFlow is imported (and before JAX starts its backend): this sets it
    when they have not, and otherwise raises unless the process was started
    with it (the CLIs' ``--deterministic`` restarts the command with it).
    """
    if not deterministic_environment():
        started = [module for module in ("tensorflow", "jax") if _started(module)]
        if started:
            settings = " ".join(f"{key}={value!r}" if " " in value else f"{key}={value}"
                                for key, value in deterministic_variables().items()
                                if os.environ.get(key) != value)
            raise RuntimeError(
                "deterministic=True needs TensorFlow single-threaded and without oneDNN (and "
                "XLA single-threaded on JAX), which must be set before "
                f"{' and '.join(started)} start(s): start Python with {settings}, or use "
                "the command line's --deterministic (which does that).")
        os.environ.update(deterministic_variables())
    import tensorflow as tf

    threads = tf.config.threading
    if threads.get_intra_op_parallelism_threads() != 1:
        try:
            threads.set_intra_op_parallelism_threads(1)
            threads.set_inter_op_parallelism_threads(1)
        except RuntimeError:  # already initialised, from the environment: 1 thread each
            pass
    tf.config.experimental.enable_op_determinism()
