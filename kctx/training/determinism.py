"""Deterministic mode: bit-identical CPU runs on TensorFlow, JAX and PyTorch.

The environment (single-threaded TensorFlow without oneDNN, single-threaded XLA,
single-threaded PyTorch with cuBLAS's fixed workspace) must be in place before
TensorFlow is imported, JAX starts its backend or PyTorch starts CUDA: :func:`deterministic_variables` gives it,
:func:`deterministic_environment` says whether this process was started in it and
:func:`enable_determinism` sets it (or refuses when it is too late) and turns on
TensorFlow's op determinism (and on PyTorch one intra-op thread and
``torch.use_deterministic_algorithms``).
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
# Not for determinism but for speed, in the same restart: TensorFlow's best-fit-with-
# coalescing allocator on the CPU, which keeps the memory it frees instead of returning
# every large buffer to the system and page-faulting it in again (measured here, one
# thread: an outer product into a fresh 134 MB tensor 100 → 13 ms; the language decoder's
# step with the causal Hamburger 18.6 → 12.2 s, with attention 3.1 → 2.1 s; SegNeXt-T's
# step, whose tensors are smaller, unchanged; the gradients of ResNet-tiny and SegNeXt-T
# bit for bit the same). Not part of :func:`deterministic_environment`'s check.
TF_ALLOCATOR_ENVIRONMENT = {"TF_CPU_ALLOCATOR_USE_BFC": "true"}
# And of XLA's CPU runtime on the JAX backend (read when JAX starts its backend): one
# thread for its kernels (appended to XLA_FLAGS, whose other flags are kept).
XLA_DETERMINISTIC_FLAGS = ("--xla_cpu_multi_thread_eigen=false",
                           "intra_op_parallelism_threads=1")
# And of PyTorch: one thread for its CPU kernels (read when torch is imported, so that the
# commands started in this environment, `evaluate` included, run the training's kernels),
# and on a GPU (read when CUDA starts) the cuBLAS workspace that
# ``torch.use_deterministic_algorithms`` requires for deterministic matrix products.
TORCH_DETERMINISTIC_ENVIRONMENT = {"OMP_NUM_THREADS": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def deterministic_variables(environ=None):
    """The environment deterministic mode runs in: ``environ`` (default ``os.environ``)
    updated with :data:`DETERMINISTIC_ENVIRONMENT` (and :data:`TF_ALLOCATOR_ENVIRONMENT`
    where ``environ`` does not set it), on the JAX backend with
    :data:`XLA_DETERMINISTIC_FLAGS` appended to ``XLA_FLAGS``, and on the PyTorch
    backend with :data:`TORCH_DETERMINISTIC_ENVIRONMENT`.

    Examples:
        >>> environment = deterministic_variables()
        >>> environment["TF_NUM_INTRAOP_THREADS"], environment["TF_ENABLE_ONEDNN_OPTS"]
        ('1', '0')
        >>> # then: subprocess.run([sys.executable, "-m", "gan.train"], env=environment)
    """
    environ = dict(os.environ if environ is None else environ)
    environ.update(DETERMINISTIC_ENVIRONMENT)
    for key, value in TF_ALLOCATOR_ENVIRONMENT.items():
        environ.setdefault(key, value)
    if keras.backend.backend() == "jax":
        flags = environ.get("XLA_FLAGS", "").split()
        environ["XLA_FLAGS"] = " ".join(
            flags + [flag for flag in XLA_DETERMINISTIC_FLAGS if flag not in flags])
    if keras.backend.backend() == "torch":
        environ.update(TORCH_DETERMINISTIC_ENVIRONMENT)
    return environ


def deterministic_environment():
    """Whether this process was started in the environment of :func:`deterministic_variables`."""
    expected = deterministic_variables()
    return all(os.environ.get(key) == expected[key]
               for key in (*DETERMINISTIC_ENVIRONMENT, "XLA_FLAGS",
                           *TORCH_DETERMINISTIC_ENVIRONMENT) if key in expected)


def _started(module):
    """Whether it is too late to set ``module``'s environment: TensorFlow imported, JAX's
    backend or PyTorch's CUDA started."""
    if module == "tensorflow":
        return "tensorflow" in sys.modules
    if module == "torch":
        return "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized()
    if "jax" not in sys.modules:
        return False
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def enable_determinism():
    """Single-threaded TensorFlow without oneDNN, with op determinism (and single-threaded
    XLA on the JAX backend; on PyTorch one intra-op thread and deterministic algorithms):
    bit-identical CPU runs.

    The environment of :func:`deterministic_variables` must be in place before
    TensorFlow is imported (and before JAX starts its backend, or PyTorch CUDA):
    this sets it when they have not, and otherwise raises unless the process was
    started with it (the CLIs' ``--deterministic`` restarts the command with it).
    """
    if not deterministic_environment():
        started = [module for module in ("tensorflow", "jax", "torch") if _started(module)]
        if started:
            settings = " ".join(f"{key}={value!r}" if " " in value else f"{key}={value}"
                                for key, value in deterministic_variables().items()
                                if os.environ.get(key) != value)
            raise RuntimeError(
                "deterministic=True needs TensorFlow single-threaded and without oneDNN (and "
                "XLA single-threaded on JAX, cuBLAS's fixed workspace on PyTorch), which must "
                f"be set before {' and '.join(started)} start(s): start Python with "
                f"{settings}, or use the command line's --deterministic (which does that).")
        os.environ.update(deterministic_variables())
    if keras.backend.backend() == "torch":
        _enable_torch_determinism()
    import tensorflow as tf

    threads = tf.config.threading
    if threads.get_intra_op_parallelism_threads() != 1:
        try:
            threads.set_intra_op_parallelism_threads(1)
            threads.set_inter_op_parallelism_threads(1)
        except RuntimeError:  # already initialised, from the environment: 1 thread each
            pass
    tf.config.experimental.enable_op_determinism()
    _disable_addn_scheduling()


def _disable_addn_scheduling():
    """Turn off Grappler's memory optimizer for the ``tf.function`` graphs built from now on.

    What op determinism leaves out (measured on TensorFlow 2.21, CPU, one thread): the
    memory optimizer's scheduling pass rewrites an ``AddN`` of more than two inputs that are
    live at the graph's estimated memory peak, when that peak exceeds 80% of the device's
    memory (for TensorFlow's CPU device a fixed 256 MB, so any training step of a few
    hundred MB), into a temporary variable and one ``AssignAdd`` per input, with no order
    among them, so the inputs are summed in the order their producers finish, which changes
    from process to process. Grappler's
    arithmetic optimizer makes such an ``AddN`` of a chain of adds (``keras.layers.Add`` of
    MSCAN's four attention branches), and SegNeXt-T's training step at 128×128 and batch
    8 then gave gradients that differed in the last bits between two runs of the same
    command. ``tf.config.optimizer.set_experimental_options`` has no switch for the
    memory optimizer, so this sets ``memory_optimization = NO_MEM_OPT`` in the eager
    context's base config (the other Grappler passes, and so the numbers of graphs without
    such an ``AddN``, are unchanged: by default the memory optimizer only schedules and, on
    GPUs, swaps).
    """
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
    from tensorflow.python.eager import context

    eager = context.context()
    config = config_pb2.ConfigProto()
    if eager._config is not None:
        config.CopyFrom(eager._config)
    config.graph_options.rewrite_options.memory_optimization = (
        rewriter_config_pb2.RewriterConfig.NO_MEM_OPT)
    eager._config = config
    # Functions take their config from these call options, made once per thread from it.
    eager._thread_local_data.function_call_options = None


def _enable_torch_determinism():
    """One intra-op thread (a reduction's order then depends on nothing but the op) and
    ``torch.use_deterministic_algorithms`` (which raises on an op that has no
    deterministic kernel rather than running a nondeterministic one)."""
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
