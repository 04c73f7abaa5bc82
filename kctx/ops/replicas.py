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


def replicas_in_sync():
    """How many replicas of a ``tf.distribute`` strategy compute the current step together
    (1 outside a strategy and on the JAX / torch backends, whose data-parallel step is one
    program over the global batch)."""
    context = _replica_context()
    return 1 if context is None else int(context.num_replicas_in_sync)


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


def synchronized_batch_norm(requested=True):
    """The ``synchronized`` argument for ``keras.layers.BatchNormalization``: ``requested``
    on TensorFlow, False on the other backends.

    Keras's synchronized batch normalisation all-reduces the batch moments over a
    ``tf.distribute`` strategy's replicas and exists on TensorFlow only. Under JAX's
    data parallelism (``keras.distribution.DataParallel``) a training step is one
    jitted program over the sharded global batch, so the moments it computes are
    already those of the global batch (cross-replica), and the flag is not needed.

    Examples:
        >>> replicas = 2
        >>> norm = keras.layers.BatchNormalization(
        ...     synchronized=synchronized_batch_norm(replicas > 1))
    """
    return bool(requested) and keras.backend.backend() == "tensorflow"
