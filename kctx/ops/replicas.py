"""Reductions over the replicas of a ``tf.distribute`` strategy, for layers with state.

Identity outside a strategy and on the JAX / torch backends, so the layers
that use them stay backend-agnostic.
"""

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
