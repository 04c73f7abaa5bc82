"""Helpers for tf.distribute strategies (no-ops on other backends or one replica)."""

import keras


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
