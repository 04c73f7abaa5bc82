"""Inception Score / classifier score from class logits.

IS = exp(E_x KL(p(y|x) ‖ p(y)))  (Salimans et al., 2016). Streamed with the
sums S₁ = Σₓ Σ_y p log p, S₂ = Σₓ p(y|x) and n:
E_x KL = (S₁ − Σ_y S₂,y log(S₂,y / n)) / n.
"""

import keras
import numpy as np
from keras import ops


def classifier_score(logits, splits=1):
    """Inception Score of class ``logits`` (N, K), averaged over ``splits``.

    Returns ``(mean, std)`` over the splits (std is 0 for one split).
    """
    logits = np.asarray(logits, np.float64)
    if logits.ndim != 2:
        raise ValueError(f"`logits` must be (N, classes). Received: shape={logits.shape}")
    scores = []
    for part in np.array_split(logits, splits):
        log_p = part - part.max(axis=1, keepdims=True)
        log_p = log_p - np.log(np.exp(log_p).sum(axis=1, keepdims=True))
        p = np.exp(log_p)
        log_marginal = np.log(p.mean(axis=0))
        scores.append(np.exp(np.mean(np.sum(p * (log_p - log_marginal), axis=1))))
    return float(np.mean(scores)), float(np.std(scores))


@keras.saving.register_keras_serializable(package="kctx")
class ClassifierScore(keras.metrics.Metric):
    """Streaming Inception Score (single split) from logits.

    ``update_state(logits)`` accumulates float64 sums; ``result()`` is
    exp(E_x KL(p(y|x) ‖ p(y))) over everything seen.

    Args:
        num_classes: K.
        name: metric name.
    """

    def __init__(self, num_classes, name="classifier_score", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes = int(num_classes)
        self.plogp = self.add_variable((), "zeros", dtype="float64", name="plogp")
        self.marginal = self.add_variable((self.num_classes,), "zeros", dtype="float64",
                                          name="marginal")
        self.count = self.add_variable((), "zeros", dtype="float64", name="count")

    def update_state(self, logits, sample_weight=None):
        if sample_weight is not None:
            raise ValueError("ClassifierScore does not support sample_weight.")
        log_p = ops.log_softmax(ops.cast(logits, "float64"), axis=-1)
        p = ops.exp(log_p)
        self.plogp.assign_add(ops.sum(p * log_p))
        self.marginal.assign_add(ops.sum(p, axis=0))
        self.count.assign_add(ops.cast(ops.shape(p)[0], "float64"))

    def result(self):
        marginal = self.marginal / self.count
        log_marginal = ops.log(ops.maximum(marginal, 1e-300))
        mean_kl = (self.plogp - ops.sum(self.marginal * log_marginal)) / self.count
        return ops.exp(mean_kl)

    def get_config(self):
        config = super().get_config()
        config["num_classes"] = self.num_classes
        return config
