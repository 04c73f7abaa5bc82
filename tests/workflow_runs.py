"""Helpers of the workflow tests: tiny configs, CLI subprocesses, update comparisons."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np

from kctx.training import DETERMINISTIC_ENVIRONMENT
from kctx.training.determinism import XLA_DETERMINISTIC_FLAGS
from studies.study import config_flags

ROOT = pathlib.Path(__file__).resolve().parents[1]

# A few steps of every workflow on its embedded default data, with two checkpoints. The GAN
# at half the digits config's widths (GAN_HALF_WIDTHS, the in-process GAN runs' too) (a quarter of its convolutions' work: its killed and
# resumed mixed_bfloat16 runs, whose bfloat16 convolutions CPUs without native bfloat16
# emulate, took 64 s a TensorFlow process at full width and 38 s at this one, measured here).
GAN_HALF_WIDTHS = dict(base_channels=64, generator_channels=(32, 32, 16),
                       discriminator_blocks=((16, True), (32, True), (32, False)))
TINY = {
    "gan": ["--steps", "4", "--batch-size", "8", "--checkpoint-every", "2",
            *config_flags(GAN_HALF_WIDTHS), "--eval-samples", "150"],
    "classification": ["--epochs", "2", "--batch-size", "478", "--width-multiplier", "0.25",
                       "--image-size", "8", "--eval-batch-size", "128"],
    "segmentation": ["--steps", "4", "--batch-size", "4", "--crop-size", "32",
                     "--checkpoint-every", "2", "--head-channels", "32", "--eval-images", "16",
                     "--prediction-images", "2"],
    "sequence": ["--length", "32", "--steps", "4", "--batch-size", "8", "--eval-every", "2",
                 "--eval-examples", "200", "--embed-dim", "8", "--hidden-units", "8",
                 "--target-accuracy", "0"],
}
CHECKPOINT_STEP = {"gan": 2, "classification": 3, "segmentation": 2, "sequence": 2}
WEIGHTS_FILE = {"gan": "generator.keras"}

# Runs a workflow's CLI and SIGKILLs it right after training step `kill_after` (one step
# past a checkpoint): a real `kill -9` at a known point of the run.
KILL_SCRIPT = """
import importlib, os, signal, sys
import keras
from kctx.training import train_main

workflow, kill_after, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]


class Kill(keras.callbacks.Callback):
    steps = 0

    def on_train_batch_end(self, batch, logs=None):
        Kill.steps += 1
        if Kill.steps == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)


sys.exit(train_main(importlib.import_module(f"{workflow}.workflow").WORKFLOW, argv,
                    callbacks=[Kill()]))
"""


def environment(**extra):
    """The test process's environment for a subprocess: quiet TensorFlow, the package on
    the path, no TF_CONFIG unless given."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT))
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def jax_environment(devices=2, deterministic=False, **extra):
    """:func:`environment` for a JAX subprocess with ``devices`` virtual CPU devices;
    ``deterministic``: in the environment ``--deterministic`` runs in (a CLI started in it
    does not start itself again, which costs a second import of TensorFlow and JAX)."""
    # The session's XLA_FLAGS first (tests/conftest.py's compile options), then this
    # process's devices.
    flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split()
             if not flag.startswith("--xla_force_host_platform_device_count")]
    flags.append(f"--xla_force_host_platform_device_count={devices}")
    variables = {}
    if deterministic:
        flags += XLA_DETERMINISTIC_FLAGS
        variables = dict(DETERMINISTIC_ENVIRONMENT)
    return environment(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", XLA_FLAGS=" ".join(flags),
                       PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
                       **{**variables, **extra})


def run_jax(args, devices=2, timeout=900):
    """Run ``python ARGS`` on JAX with ``devices`` CPU devices; returns its output."""
    completed = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                               env=jax_environment(devices), cwd=ROOT, timeout=timeout)
    assert completed.returncode == 0, (completed.stdout[-3000:], completed.stderr[-5000:])
    return completed.stdout


def start(args, env=None, cwd=ROOT):
    return subprocess.Popen([sys.executable, *args], env=env or environment(), cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process, timeout=900):
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def kill_when(processes, ready, timeout=600):
    """SIGKILL every one of ``processes`` as soon as ``ready()`` holds (or the first exits,
    or ``timeout`` seconds pass); returns their outputs."""
    import signal
    import time

    deadline = time.time() + timeout
    while time.time() < deadline and processes[0].poll() is None and not ready():
        time.sleep(0.05)
    for process in processes:
        process.send_signal(signal.SIGKILL)
    return [finish(process)[1] for process in processes]


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for item in sockets:
        item.bind(("127.0.0.1", 0))
    ports = [item.getsockname()[1] for item in sockets]
    for item in sockets:
        item.close()
    return ports


def tf_config(ports, index):
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
                       "task": {"type": "worker", "index": index}})


def load_weights(path):
    import keras

    return [np.asarray(w) for w in keras.saving.load_model(path).weights]


def saved_arrays(path):
    """The arrays of a ``.keras`` file's weights, by their place in its weights file, read
    without building the model (what two runs' files are compared by: loading one builds
    its model, 2 to 3 CPU s a GAN generator in a test process)."""
    import io
    import zipfile

    import h5py

    with zipfile.ZipFile(path) as archive:
        weights = io.BytesIO(archive.read("model.weights.h5"))
    arrays = {}
    with h5py.File(weights, "r") as file:
        file.visititems(lambda name, item: arrays.__setitem__(name, item[()])
                        if isinstance(item, h5py.Dataset) else None)
    return arrays


def assert_saved_in_mixed_bfloat16(model, label=""):
    """A model saved by a ``--dtype-policy mixed_bfloat16`` run: its layers compute in
    bfloat16 on float32 weights, and the Hamburgers keep their decomposition in float32
    (their own policy is the mixed one)."""
    from kctx.layers import Hamburger

    layers = model._flatten_layers(include_self=False)
    policies = [layer.dtype_policy.name for layer in layers if layer.weights]
    assert policies.count("mixed_bfloat16") >= 0.9 * len(policies), (label, policies)
    assert {weight.dtype for weight in model.weights} == {"float32"}, label
    assert all(layer.dtype_policy.name == "mixed_bfloat16" for layer in layers
               if isinstance(layer, Hamburger)), label


def assert_same_update(initial, expected, actual, rtol=1e-3, variable_rtol=1e-2, label=""):
    """Two trainings from the same ``initial`` weights made the same update.

    Different CPUs (oneDNN kernels), thread counts, replica splits and
    all-reduce orders round differently, so weights are compared through the
    update Δ = w − w₀, not at a fixed atol:

    - over all variables, ‖Δ_actual − Δ_expected‖ ≤ rtol · ‖Δ_expected‖;
    - per variable, ‖Δa − Δe‖ ≤ variable_rtol · (‖Δe‖ + its share of the whole
      update, ‖Δ‖·√(n_v / n)), so a variable with no true gradient (a conv bias
      before batch norm: pure rounding noise) passes, and one updated wrongly
      (a relative error near 1) fails.
    """
    initial, expected, actual = ([np.asarray(w, np.float64) for w in ws]
                                 for ws in (initial, expected, actual))
    assert len(initial) == len(expected) == len(actual)
    deltas_e = [e - w for w, e in zip(initial, expected)]
    deltas_a = [a - w for w, a in zip(initial, actual)]
    total = np.sqrt(sum(np.sum(d ** 2) for d in deltas_e))
    count = sum(d.size for d in deltas_e)
    difference = np.sqrt(sum(np.sum((a - e) ** 2) for a, e in zip(deltas_a, deltas_e)))
    assert total > 0, f"{label}: the expected run did not change the weights"
    assert difference <= rtol * total, (
        f"{label}: the updates differ by {difference:.3g}, more than {rtol} of their size "
        f"{total:.3g}")
    for index, (e, a) in enumerate(zip(deltas_e, deltas_a)):
        allowed = variable_rtol * (np.linalg.norm(e) + total * np.sqrt(e.size / count))
        assert np.linalg.norm(a - e) <= allowed, (
            f"{label}: variable {index} {e.shape} differs by {np.linalg.norm(a - e):.3g} "
            f"(update {np.linalg.norm(e):.3g}, allowed {allowed:.3g})")


def run_pytest_on(backend, paths, selection=None, tensorflow=False):
    """pytest on ``paths`` (``-k selection``) in a subprocess on ``backend`` (JAX over 2
    virtual CPU devices), where TensorFlow cannot be imported (tests/without_tensorflow.py,
    as an install without it) unless ``tensorflow``; returns its standard output."""
    # PyTorch on one intra-op thread: its default, one per core, spins on the cores the other
    # worker shares (tests/test_runner.py's mixed precision: 4× the CPU time).
    tests = ROOT / "tests"
    env = jax_environment(2) if backend == "jax" else dict(
        os.environ, KERAS_BACKEND=backend, OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(tests), str(ROOT)]))
    env.pop("KCTX_TEST_CPU", None)  # the inner session's tests are not this session's
    command = [sys.executable, *([] if tensorflow else [str(tests / "without_tensorflow.py")]),
               "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider", "--durations=0",
               *map(str, paths)]
    if selection:
        command += ["-k", selection]
    completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT,
                               timeout=1200)
    assert completed.returncode == 0, (completed.stdout[-6000:], completed.stderr[-3000:])
    return completed.stdout

