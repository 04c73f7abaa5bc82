"""Inception Score / classifier score from class logits.

IS = exp(E_x KL(p(y|x) ‖ p(y)))  (Salimans et al., 2016). Streamed with the
sums S₁ = Σₓ Σ_y p log p, S₂ = Σₓ p(y|x) and n:
E_x KL = (S₁ − Σ_y S₂,y log(S₂,y / n)) / n. The sums are float64 on every backend
(:mod:`kctx.metrics.float64`).
"""

import keras
import numpy as np
from keras import ops

from kctx.metrics.float64 import Float64Sums


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

    ``update_state(logits)`` accumulates float64 sums (NumPy arrays on the host
    on JAX without x64, updated eagerly); ``result()`` is exp(E_x KL(p(y|x) ‖ p(y)))
    over everything seen.

    Args:
        num_classes: K.
        name: metric name.
    """

    def __init__(self, num_classes, name="classifier_score", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes = int(num_classes)
        self._sums = Float64Sums(self, {"plogp": (), "marginal": (self.num_classes,),
                                        "count": ()})

    @property
    def plogp(self):
        return self._sums.value("plogp")

    @property
    def marginal(self):
        return self._sums.value("marginal")

    @property
    def count(self):
        return self._sums.value("count")

    def update_state(self, logits, sample_weight=None):
        if sample_weight is not None:
            raise ValueError("ClassifierScore does not support sample_weight.")
        sums, xp = self._sums, self._sums.ops
        logits = sums.cast(logits)
        if sums.host:  # log-softmax in float64, as ops.log_softmax computes it
            shifted = logits - logits.max(axis=-1, keepdims=True)
            log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        else:
            log_p = ops.log_softmax(logits, axis=-1)
        p = xp.exp(log_p)
        sums.add("plogp", xp.sum(p * log_p))
        sums.add("marginal", xp.sum(p, axis=0))
        sums.add("count", sums.cast(ops.shape(p)[0]))

    def result(self):
        xp = self._sums.ops
        marginal = self.marginal / self.count
        log_marginal = xp.log(xp.maximum(marginal, 1e-300))
        mean_kl = (self.plogp - xp.sum(self.marginal * log_marginal)) / self.count
        return xp.exp(mean_kl)

    def reset_state(self):
        self._sums.reset()

    def get_config(self):
        config = super().get_config()
        config["num_classes"] = self.num_classes
        return config
