"""Pick the tf.distribute strategy for this machine or cluster, and tell the chief.

``get_strategy`` returns TPUStrategy when a TPU resolves (a TPU VM or a pod
slice), MultiWorkerMirroredStrategy when ``TF_CONFIG`` names a cluster of
several workers (one process per host), MirroredStrategy when several GPUs
are visible (or explicit devices are given), and the default (single-device)
strategy otherwise, and logs which.
"""

import json
import os


def _cluster_spec():
    """The ``cluster`` of ``TF_CONFIG`` when it names more than one task, else None."""
    text = os.environ.get("TF_CONFIG")
    if not text:
        return None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON ({error}). Received: "
                         f"TF_CONFIG={text[:200]!r}") from None
    cluster = config.get("cluster") or {}
    tasks = sum(len(cluster.get(kind, ())) for kind in ("chief", "worker"))
    return cluster if tasks > 1 else None


def get_strategy(tpu=None, devices=None, log=print):
    """The tf.distribute strategy to train under.

    Args:
        tpu: TPU name or address for ``TPUClusterResolver`` (``"local"`` on a
            TPU VM); ``None`` to use ``TF_CONFIG`` / GPUs / CPU.
        devices: explicit device names for a MirroredStrategy (e.g. two logical
            CPUs, see ``kctx.testing.configure_logical_cpus``).
        log: called with one line naming the strategy and replica count.

    With ``TF_CONFIG`` naming several workers (``{"cluster": {"worker":
    ["host1:port", "host2:port"]}, "task": {"type": "worker", "index": i}}``,
    one process per worker), the strategy is
    ``MultiWorkerMirroredStrategy``; create it first thing in the process.

    Raises:
        RuntimeError: when ``tpu`` is given but no TPU can be reached.
    """
    import tensorflow as tf

    if tpu:
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
                tpu="" if tpu == "local" else tpu
            )
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except Exception as error:  # noqa: BLE001 - resolver errors vary (URLError, NotFound)
            raise RuntimeError(
                f"Could not reach TPU {tpu!r} ({type(error).__name__}: {str(error)[:200]}). "
                "Pass --tpu local on a TPU VM, or a TPU name/grpc address; drop --tpu for CPU/GPU."
            ) from None
        strategy = tf.distribute.TPUStrategy(resolver)
    elif devices:
        strategy = tf.distribute.MirroredStrategy(list(devices))
    elif _cluster_spec():
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif len(tf.config.list_logical_devices("GPU")) > 1:
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    if log:
        workers = _worker_count(strategy)
        log(
            f"distribution: {type(strategy).__name__} with "
            f"{strategy.num_replicas_in_sync} replica(s)"
            + (f" on {workers} workers (this is task {_task(strategy)})" if workers > 1 else "")
        )
    return strategy


def _task(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return None
    return f"{resolver.task_type}:{resolver.task_id}"


def _worker_count(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or type(strategy).__name__.startswith("TPU"):
        return 1
    spec = resolver.cluster_spec().as_dict()
    return sum(len(spec.get(kind, ())) for kind in ("chief", "worker")) or 1


def is_chief(strategy):
    """Whether this process writes the run's files: always, except on the non-chief
    workers of a multi-worker strategy (the chief is task ``chief``, else worker 0)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or type(strategy).__name__.startswith("TPU"):
        return True
    task_type, task_id = getattr(resolver, "task_type", None), getattr(resolver, "task_id", 0)
    if task_type is None:
        return True
    spec = resolver.cluster_spec().as_dict()
    if "chief" in spec:
        return task_type == "chief"
    return task_type == "worker" and int(task_id or 0) == 0


def worker_index(strategy):
    """``(index, count)`` of this worker among a multi-worker strategy's workers (the
    chief first); ``(0, 1)`` in a single process (TPU hosts included: TPUStrategy
    shards its input per host by itself)."""
    count = _worker_count(strategy)
    if count == 1:
        return 0, 1
    resolver = strategy.cluster_resolver
    spec = resolver.cluster_spec().as_dict()
    offset = len(spec.get("chief", ())) if resolver.task_type == "worker" else 0
    return offset + int(resolver.task_id or 0), count


def sum_over_workers(strategy, value):
    """Sum a NumPy array over the workers of a multi-worker strategy (each worker
    passes its own, e.g. the confusion matrix of its evaluation shard); the value
    itself in a single process. Every worker must call it."""
    import numpy as np
    import tensorflow as tf

    index, count = worker_index(strategy)
    if count == 1:
        return value
    local = strategy.num_replicas_in_sync // count
    array = tf.constant(np.asarray(value, np.float64) / local)
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.identity(array)),
                            axis=None)
    return total.numpy()
