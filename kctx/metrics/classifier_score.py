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


def classifier_score(logits, splits=1, shuffle_seed=None):
    """Inception Score of class ``logits`` (N, K), averaged over ``splits``.

    As the original code (Salimans et al.'s ``inception_score.py``) computes it: split
    i holds samples ⌊i·N/splits⌋ … ⌊(i+1)·N/splits⌋ − 1, each split's score is
    exp(mean KL(p(y|x) ‖ p̄(y))) in float64, and the result is the mean and (population)
    standard deviation over the splits.

    Args:
        logits: (N, K) class logits (for the Inception Score, the FID Inception's
            unbiased logits: pool3 · W without the bias).
        splits: number of splits (10 in the papers).
        shuffle_seed: ``None`` keeps the order given (the original code);
            torch-fidelity shuffles first with ``np.random.RandomState(2020)``: pass
            2020 to reproduce its numbers.

    Returns:
        ``(mean, std)`` over the splits (std is 0 for one split).

    Example:
        >>> confident = np.eye(4)[np.arange(100) % 4] * 60.0  # 4 classes, sure of each
        >>> round(classifier_score(confident)[0], 6)
        4.0
    """
    logits = np.asarray(logits, np.float64)
    if logits.ndim != 2:
        raise ValueError(f"`logits` must be (N, classes). Received: shape={logits.shape}")
    count = logits.shape[0]
    if not 1 <= int(splits) <= max(count, 1):
        raise ValueError(f"`splits` must be between 1 and the number of samples ({count}). "
                         f"Received: splits={splits}")
    splits = int(splits)
    if shuffle_seed is not None:
        logits = logits[np.random.RandomState(shuffle_seed).permutation(count)]
    log_p = logits - logits.max(axis=1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(axis=1, keepdims=True))
    p = np.exp(log_p)
    scores = []
    for i in range(splits):
        part = slice(i * count // splits, (i + 1) * count // splits)
        log_marginal = np.log(p[part].mean(axis=0))
        scores.append(np.exp(np.mean(np.sum(p[part] * (log_p[part] - log_marginal), axis=1))))
    return float(np.mean(scores)), float(np.std(scores))


def inception_score(logits, splits=10, shuffle_seed=None):
    """The Inception Score as papers report it: :func:`classifier_score` with 10 splits
    of the FID Inception's unbiased logits (Salimans et al., 2016).

    Returns:
        ``(mean, std)`` over the splits.

    Example:
        >>> logits = np.eye(10)[np.arange(1000) % 10] * 60.0  # 10 classes, each sure
        >>> mean, std = inception_score(logits)
        >>> round(mean, 6), round(std, 6)
        (10.0, 0.0)
    """
    return classifier_score(logits, splits=splits, shuffle_seed=shuffle_seed)


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
