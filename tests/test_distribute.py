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
