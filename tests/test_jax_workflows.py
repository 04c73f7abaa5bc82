"""The workflows on the JAX backend: data parallelism over 2 virtual CPU devices, the float64
metrics, MAC counts, export of a JAX run, and the pieces that carry a JAX run (NumPy step
checkpoints, one optimizer for two). The layer battery on JAX is tests/test_backends.py's.

Kill-and-resume on JAX is tests/test_runner.py's (parametrized over the backends: the HamGAN
over 2 devices, exported on TensorFlow from its NumPy checkpoint). Keras picks its backend at import, so the JAX checks run in subprocesses.
"""

import json
import pathlib

import keras
import numpy as np
import pytest

from kctx.training import ArrayCheckpoint, CheckpointError
from kctx.training.optimizers import OptimizerGroup
from workflow_runs import finish, jax_environment, run_jax, start

TESTS = pathlib.Path(__file__).parent


def test_data_parallel_step_on_two_devices_is_the_step_on_one():
    """The HamGAN's two-optimizer step and a batch-normalised segmenter's step under
    DataParallel over 2 devices equal the step on 1 (tests/jax_distribution_check.py)."""
    assert "JAX_DISTRIBUTION_OK" in run_jax([str(TESTS / "jax_distribution_check.py")])


MACS_SCRIPT = """
import json, keras
from kctx.layers import context_block
from kctx.profile import count_macs
from classification.configs import get_config
from classification.workflow import build_model

def block(name, shape):
    inputs = keras.Input(shape[1:])
    return keras.Model(inputs, context_block(name)(inputs))

config = get_config("digits", image_size=8, width_multiplier=0.25)
models = {"kanet": build_model(config), "self_attention": block("self_attention", (2, 6, 6, 32)),
          "ham_nmf": block("ham_nmf", (2, 6, 6, 32)), "kao_kv": block("kao_kv", (2, 6, 6, 32))}
inputs = keras.Input((8, 8, 4))
models["conv"] = keras.Model(inputs, keras.layers.DepthwiseConv2D(3)(
    keras.layers.Conv2D(8, 3, padding="same", groups=2)(inputs)))
shapes = {"kanet": (1, 8, 8, 3), "conv": (2, 8, 8, 4)}
counts = {name: count_macs(lambda x, model=model: model(x, training=False),
                           shapes.get(name, (2, 6, 6, 32))) for name, model in models.items()}
print("MACS", json.dumps(counts))
"""


def test_mac_counts_are_the_same_on_both_backends():
    """kctx.profile.count_macs walks the TensorFlow graph or the jaxpr; the same model gives
    the same count (matmuls, einsums, convolutions, depthwise and grouped)."""
    output = run_jax(["-c", MACS_SCRIPT], devices=1)
    jax_counts = json.loads(output.split("MACS ", 1)[1].splitlines()[0])
    namespace = {}
    exec(MACS_SCRIPT.replace('print("MACS", json.dumps(counts))', ""), namespace)
    assert jax_counts == namespace["counts"]
    assert all(value > 0 for value in jax_counts.values())


FCD_SCRIPT = """
import json, numpy as np
from kctx.data import digits
from kctx.metrics import ClassifierScore, FrechetInceptionDistance
from kctx.metrics.float64 import host_float64

real, _ = digits("train")
generated, _ = digits("test")
generated = np.clip(generated + np.random.default_rng(0).normal(0, 0.3, generated.shape),
                    -1, 1).astype("float32")
fcd = FrechetInceptionDistance("digits_classifier")
for start in range(0, len(real), 500):  # streamed in batches
    fcd.update_state(real[start:start + 500], None)
for start in range(0, len(generated), 128):
    fcd.update_state(None, generated[start:start + 128])
score = ClassifierScore(10)
score.update_state(fcd.extractor.logits(generated))
print("RESULT_JSON", json.dumps({"fcd": float(fcd.result()), "is": float(score.result()),
                         "host": host_float64(), "counts": list(fcd.counts())}))
"""


def test_fcd_and_classifier_score_on_jax_equal_tensorflow(fcd_classifier):
    """The float64 sums on JAX (NumPy on the host: JAX has no float64 without x64) give the
    TensorFlow backend's FCD and classifier score (the session's classifier, on both)."""
    output = run_jax(["-c", FCD_SCRIPT], devices=1)
    on_jax = json.loads(output.split("RESULT_JSON ", 1)[1].splitlines()[0])
    namespace = {}
    exec(FCD_SCRIPT.split('print("RESULT_JSON"')[0], namespace)
    fcd, score = namespace["fcd"], namespace["score"]
    assert on_jax["host"] and on_jax["counts"] == list(fcd.counts())
    # Same features up to float32 kernels of two backends, summed in float64 on both.
    assert on_jax["fcd"] == pytest.approx(float(fcd.result()), rel=1e-4)
    assert on_jax["is"] == pytest.approx(float(score.result()), rel=1e-5)


def _variables():
    first = keras.Variable(np.arange(6, dtype="float32").reshape(2, 3), name="first")
    second = keras.Variable(np.float32(2.0), name="second")
    return [first, second]


def test_array_checkpoint_round_trip_fallback_and_mismatch(tmp_path):
    variables = _variables()
    checkpoint = ArrayCheckpoint(tmp_path, {"model": variables}, max_to_keep=2)
    assert checkpoint.restore(log=None) == (0, False)
    for step in (1, 2, 3):
        variables[1].assign(float(step))
        checkpoint.save(step, finished=step == 3)
    assert [pathlib.Path(p).name for p in checkpoint.checkpoints] == ["ckpt-2.npz",
                                                                       "ckpt-3.npz"]
    variables[1].assign(0.0)
    assert checkpoint.restore(log=None) == (3, True)
    assert float(variables[1].numpy()) == 3.0
    # A truncated newest checkpoint: the one before, with a log line naming it.
    path = pathlib.Path(checkpoint.latest())
    path.write_bytes(path.read_bytes()[:100])
    lines = []
    assert checkpoint.restore(log=lines.append) == (2, False)
    assert float(variables[1].numpy()) == 2.0 and "ckpt-3.npz cannot be read" in lines[0]
    # Other variables (another model): nothing assigned, an error naming the checkpoints.
    other = ArrayCheckpoint(tmp_path, {"model": [keras.Variable(np.zeros((3, 2)))] * 2})
    with pytest.raises(CheckpointError, match="No checkpoint in .* can be read"):
        other.restore(log=None)
    assert not list(tmp_path.glob(".ckpt-*"))  # no temporary file left behind


def test_optimizer_group_updates_each_variable_with_its_own_optimizer():
    first, second = _variables()
    fast, slow = keras.optimizers.SGD(1.0), keras.optimizers.SGD(0.1)
    group = OptimizerGroup([(fast, [first]), (slow, [second])])
    assert len(group.variables) == len(fast.variables) + len(slow.variables)
    group.apply([np.ones((2, 3), "float32"), np.float32(1.0)], [first, second])
    np.testing.assert_allclose(first.numpy(), np.arange(6).reshape(2, 3) - 1.0)
    assert float(second.numpy()) == pytest.approx(1.9)
    assert [len(part) for part in group.split(group.variables)] == \
        [len(fast.variables), len(slow.variables)]
    with pytest.raises(ValueError, match="given to two optimizers"):
        OptimizerGroup([(keras.optimizers.SGD(), [first]), (keras.optimizers.SGD(), [first])])
    with pytest.raises(ValueError, match="No optimizer of the group updates"):
        group.apply([np.float32(1.0)], [keras.Variable(1.0)])


# The sequence workflow's tiny adding-problem run: two processes, their first checkpoint at
# step 2 of 4. The classification pipeline's per-worker shards are the TensorFlow two-worker
# test's; here what is JAX's own: jax.distributed, per-process parts of each global batch,
# NumPy checkpoints written by process 0 and read by both, the held-out sums over processes.
SEQUENCE_FLAGS = ["--length", "32", "--steps", "4", "--batch-size", "8", "--eval-every", "2",
                  "--eval-examples", "200", "--embed-dim", "8", "--hidden-units", "8",
                  "--target-accuracy", "0"]

INITIAL_SCRIPT = """
import sys, keras, numpy as np
from sequence.configs import get_config
from sequence.workflow import build_model
keras.utils.set_random_seed(0)  # the runner's initial weights (seed 0)
model = build_model(get_config("adding", length=32, embed_dim=8, hidden_units=8))
np.savez(sys.argv[1], *[np.asarray(v.value) for v in model.variables])  # checkpoint order
"""


def _npz_weights(path, count):
    with np.load(path) as stored:
        return [stored[f"model/{index}"] for index in range(count)]


def test_two_jax_processes_train_like_one_and_resume_after_kill(tmp_path):
    """Two JAX processes on 127.0.0.1 (``jax.distributed`` from the KERAS_DISTRIBUTION_*
    variables, one CPU device each, gloo collectives) train the sequence workflow's adding
    problem with one input pipeline each; both are killed with SIGKILL after their first
    checkpoint, and a restart resumes from it. Their first checkpoint and finished run
    equal one process training over 2 devices."""
    from workflow_runs import free_ports, kill_when

    flags = [*SEQUENCE_FLAGS, "--verbose", "0", "--deterministic"]

    def launch():
        address = f"127.0.0.1:{free_ports(1)[0]}"
        return [start(["-m", "sequence.train", *flags, "--model-dir",
                       str(tmp_path / "workers")],
                      env=jax_environment(1, deterministic=True,
                                          KERAS_DISTRIBUTION_JOB_ADDRESSES=address,
                                          KERAS_DISTRIBUTION_NUM_PROCESSES="2",
                                          KERAS_DISTRIBUTION_PROCESS_ID=str(index)))
                for index in range(2)]

    first = tmp_path / "workers" / "checkpoints" / "ckpt-2.npz"
    outputs = kill_when(launch(), first.exists)
    assert first.exists(), outputs[0][-3000:]
    assert not (tmp_path / "workers" / "results.json").exists()
    first_step = tmp_path / "first-step.npz"
    first_step.write_bytes(first.read_bytes())  # the restart keeps only the newest two
    for worker in launch():
        status, output = finish(worker)
        assert status == 0, output[-3000:]
        assert "DataParallel with 2 replica(s) on 2 workers" in output
        assert "ckpt-2.npz at step 2" in output, output[-2000:]
    run = json.loads((tmp_path / "workers" / "run.json").read_text())
    assert (run["backend"], run["replicas"], run["processes"]) == ("jax", 2, 2)

    status, output = finish(start(["-m", "sequence.train", *flags, "--model-dir",
                                   str(tmp_path / "one")],
                                  env=jax_environment(2, deterministic=True)))
    assert status == 0, output[-3000:]
    run_jax(["-c", INITIAL_SCRIPT, str(tmp_path / "initial.npz")], devices=1)
    with np.load(tmp_path / "initial.npz") as stored:
        initial = [stored[f"arr_{index}"] for index in range(len(stored.files))]
    count = len(initial)
    workers = json.loads((tmp_path / "workers" / "results.json").read_text())
    one = json.loads((tmp_path / "one" / "results.json").read_text())
    assert workers["steps"] == one["steps"] == 4
    for key in ("accuracy", "loss"):
        assert workers[key] == pytest.approx(one[key], rel=1e-3, abs=1 / 200), key
    from workflow_runs import assert_same_update

    assert_same_update(initial, _npz_weights(tmp_path / "one" / "checkpoints" / "ckpt-2.npz",
                                             count),
                       _npz_weights(first_step, count), label="first checkpoint: 2 processes vs 1")
    assert_same_update(initial, _npz_weights(tmp_path / "one" / "checkpoints" / "ckpt-4.npz",
                                             count),
                       _npz_weights(tmp_path / "workers" / "checkpoints" / "ckpt-4.npz", count),
                       rtol=1e-2, variable_rtol=1e-1, label="resumed 2 processes vs 1")
