import pytest
import tensorflow as tf

from kctx.distribute import StrategyDistribution, get_strategy, is_chief, worker_index
from kctx.ops import cross_replica_mean
from kctx.testing import mirrored_strategy


def test_default_strategy_on_cpu_is_described():
    strategy = get_strategy()
    assert strategy.num_replicas_in_sync == 1
    line = StrategyDistribution(strategy).describe()
    assert line == f"distribution: {type(strategy).__name__} with 1 replica(s)"


def test_explicit_devices_give_mirrored_strategy():
    devices = [d.name for d in tf.config.list_logical_devices("CPU")[:2]]
    strategy = get_strategy(devices=devices)
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == 2


def test_unreachable_tpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="Could not reach TPU 'no-such-tpu'"):
        get_strategy(tpu="no-such-tpu")


def test_cross_replica_mean():
    assert float(cross_replica_mean(tf.constant(3.0))) == 3.0
    strategy = mirrored_strategy(2)

    def replica_fn():
        ctx = tf.distribute.get_replica_context()
        return cross_replica_mean(tf.cast(ctx.replica_id_in_sync_group, tf.float32))

    result = strategy.run(replica_fn)
    values = [float(v) for v in strategy.experimental_local_results(result)]
    assert values == [0.5, 0.5]


def test_tf_config_with_one_task_keeps_one_process(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["127.0.0.1:1"]}, '
                                    '"task": {"type": "worker", "index": 0}}')
    strategy = get_strategy()
    assert strategy.num_replicas_in_sync == 1
    assert is_chief(strategy) and worker_index(strategy) == (0, 1)
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        get_strategy()


def test_get_distribution_wraps_the_strategy_behind_one_interface():
    from kctx.distribute import StrategyDistribution, as_distribution, get_distribution

    lines = []
    default = get_distribution(log=lines.append)
    assert isinstance(default, StrategyDistribution) and default.backend == "tensorflow"
    assert (default.replicas, default.worker, default.chief) == (1, (0, 1), True)
    assert len(default.devices) == 1 and "CPU" in default.devices[0].upper()
    assert lines == [default.describe()] and "with 1 replica(s)" in lines[0]
    mirrored = as_distribution(mirrored_strategy(2))
    assert mirrored.strategy is mirrored_strategy(2) and mirrored.replicas == 2
    assert len(mirrored.devices) == 2 and mirrored.name == "MirroredStrategy"
    assert as_distribution(mirrored) is mirrored
    assert float(mirrored.sum_over_workers(2.5)) == 2.5


# Run on the PyTorch backend (tests/workflow_runs.py's environment, KERAS_TORCH_DEVICE=cpu).
TORCH_DISTRIBUTION_CHECK = """
import json, os
from kctx.distribute import TorchDistribution, as_distribution, get_distribution

lines = []
distribution = get_distribution(log=lines.append)
assert isinstance(distribution, TorchDistribution) and distribution.backend == "torch"
assert (distribution.replicas, distribution.worker, distribution.chief) == (1, (0, 1), True)
assert distribution.strategy is None and distribution.devices == ["cpu"], distribution.devices
assert lines == ["distribution: PyTorch single device with 1 replica(s) (cpu)"], lines
assert isinstance(as_distribution(None), TorchDistribution)
assert distribution.sum_over_workers(2.5) == 2.5
assert distribution.dataset(lambda input_context: input_context) is None
with distribution.scope(), distribution.fitting(None, None):
    pass
assert get_distribution(devices=["cpu"], log=None).devices == ["cpu"]
two_workers = json.dumps({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                          "task": {"type": "worker", "index": 0}})
for arguments, variables, received in (
        ({"tpu": "local"}, {}, "tpu='local'"),
        ({"devices": ["cpu", "cpu"]}, {}, "devices=['cpu', 'cpu']"),
        ({}, {"WORLD_SIZE": "2"}, "WORLD_SIZE=2"),
        ({}, {"KERAS_DISTRIBUTION_NUM_PROCESSES": "2"}, "KERAS_DISTRIBUTION_NUM_PROCESSES=2"),
        ({}, {"TF_CONFIG": two_workers}, "TF_CONFIG naming a cluster of several tasks")):
    os.environ.update(variables)
    try:
        get_distribution(log=None, **arguments)
    except ValueError as error:
        assert "Keras provides no distribution on the PyTorch backend" in str(error), error
        assert "KERAS_BACKEND=jax (DataParallel)" in str(error), error
        assert str(error).endswith(f"Received: {received}"), error
    else:
        raise AssertionError(f"{arguments} {variables} did not raise")
    for key in variables:
        del os.environ[key]
try:
    TorchDistribution("meta")
except ValueError as error:
    assert "KERAS_TORCH_DEVICE" in str(error) and "Received: device='meta'" in str(error), error
else:
    raise AssertionError("another device than Keras's did not raise")
print("TORCH_DISTRIBUTION_OK")
"""


def test_pytorch_trains_on_one_device_and_refuses_several():
    """On PyTorch (in a subprocess): one device, Keras's, behind the same interface; a TPU,
    several devices or a cluster of several processes (torchrun's, JAX's, TF_CONFIG's)
    raise, pointing to JAX or TensorFlow (Keras has no distribution on PyTorch)."""
    import subprocess
    import sys

    from workflow_runs import environment

    completed = subprocess.run([sys.executable, "-c", TORCH_DISTRIBUTION_CHECK],
                               env=environment(KERAS_BACKEND="torch", KERAS_TORCH_DEVICE="cpu"),
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-5000:]
    assert "TORCH_DISTRIBUTION_OK" in completed.stdout
