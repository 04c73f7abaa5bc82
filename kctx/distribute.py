"""tf.distribute helpers: pick the strategy for this machine; cross-replica reductions.

``get_strategy`` returns TPUStrategy when a TPU resolves, MirroredStrategy
when several GPUs are visible (or explicit devices are given), and the default
(single-device) strategy otherwise, and logs which.
"""

import keras


def get_strategy(tpu=None, devices=None, log=print):
    """The tf.distribute strategy to train under.

    Args:
        tpu: TPU name or address for ``TPUClusterResolver`` (``"local"`` on a
            TPU VM); ``None`` to use GPUs / CPU.
        devices: explicit device names for a MirroredStrategy (e.g. two logical
            CPUs, see ``kctx.testing.configure_logical_cpus``).
        log: called with one line naming the strategy and replica count.

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
    elif len(tf.config.list_logical_devices("GPU")) > 1:
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    if log:
        log(
            f"distribution: {type(strategy).__name__} with "
            f"{strategy.num_replicas_in_sync} replica(s)"
        )
    return strategy


def _replica_context():
    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync <= 1:
        return None
    return context


def cross_replica_mean(value):
    """Mean of ``value`` over the replicas in sync (identity outside a strategy).

    Use it for statistics that update state, so every replica writes the same
    value (as synchronized batch normalisation does for its moments).
    """
    context = _replica_context()
    if context is None:
        return value
    import tensorflow as tf

    return context.all_reduce(tf.distribute.ReduceOp.MEAN, value)
