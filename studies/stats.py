"""Statistics over seeds: means with t confidence intervals, and paired differences.

With n seeds per arm, the 95% confidence interval of the mean is
``mean ± t(0.975; n−1) · sd / √n`` (sd with n − 1 in the denominator). Two
arms run with the same seeds see the same data order and initial-weight
seed, so they are compared through the per-seed differences d_k = a_k − b_k:
the interval of their mean, and the paired t-test of "mean difference = 0"
(two-sided). A difference is *significant* when its interval excludes zero
(equivalently p < 1 − confidence).

Metrics that count (top-1 over 359 digits) can give the same difference on
every seed. Their spread is then zero (or rounding noise), and the t
interval would be a point that "excludes zero" from two seeds. Such pairs
are tested with the exact two-sided sign test instead, p = 2 · 0.5ⁿ
(significant from n = 6 seeds at 95%), and get no interval.
"""

import math

import numpy as np
from scipy import stats as scipy_stats


def _t_quantile(confidence, n):
    return float(scipy_stats.t.ppf((1.0 + confidence) / 2.0, n - 1))


def describe(values, confidence=0.95):
    """Mean, sd and the t interval of the mean of ``values`` (``None`` entries are dropped).

    Returns a dict with ``n``, ``mean``, ``sd``, ``ci_low``, ``ci_high``
    (``None`` where undefined: no values, or one value for sd and the interval).
    """
    x = np.asarray([v for v in values if v is not None], dtype=np.float64)
    n = int(x.size)
    result = {"n": n, "mean": None, "sd": None, "ci_low": None, "ci_high": None}
    if n == 0:
        return result
    result["mean"] = float(x.mean())
    if n > 1:
        sd = float(x.std(ddof=1))
        half = _t_quantile(confidence, n) * sd / math.sqrt(n)
        result.update(sd=sd, ci_low=result["mean"] - half, ci_high=result["mean"] + half)
    return result


def paired(values, baseline_values, confidence=0.95):
    """The paired comparison of two arms: ``values`` and ``baseline_values`` are
    ``{seed: value}``; seeds missing or ``None`` in either are left out.

    Returns a dict with ``n`` (pairs), ``seeds``, ``mean_diff`` (arm − baseline),
    ``sd_diff``, ``ci_low``, ``ci_high``, ``t``, ``p`` (two-sided paired
    t-test), ``test`` (``"t"``, or ``"sign"`` where every pair differs by the
    same amount: then ``p`` is the sign test's and there is no interval) and
    ``significant`` (the interval excludes 0; for the sign test p < 1 −
    confidence); ``None`` where undefined (fewer than two pairs).
    """
    seeds = sorted(s for s in values if values[s] is not None
                   and baseline_values.get(s) is not None)
    d = np.asarray([values[s] - baseline_values[s] for s in seeds], dtype=np.float64)
    n = int(d.size)
    result = {"n": n, "seeds": seeds, "mean_diff": float(d.mean()) if n else None,
              "sd_diff": None, "ci_low": None, "ci_high": None, "t": None, "p": None,
              "test": None, "significant": None}
    if n < 2:
        return result
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd <= 1e-9 * abs(mean) or sd == 0.0:
        # The same difference on every seed (up to rounding): no spread for a t interval.
        p = 1.0 if mean == 0.0 else min(1.0, 2.0 * 0.5 ** n)
        result.update(sd_diff=sd, p=p, test="sign", significant=bool(p < 1.0 - confidence))
        return result
    se = sd / math.sqrt(n)
    t = mean / se
    p = float(2.0 * scipy_stats.t.sf(abs(t), n - 1))
    half = _t_quantile(confidence, n) * se
    low, high = mean - half, mean + half
    result.update(sd_diff=sd, ci_low=low, ci_high=high, t=t, p=p, test="t",
                  significant=bool(low > 0.0 or high < 0.0))
    return result


def paired_power(n, sd_diff, effect, confidence=0.95):
    """The power of the two-sided paired t-test at ``1 − confidence`` with ``n`` seeds to
    find a true mean difference ``effect`` when the per-seed differences have standard
    deviation ``sd_diff``: P(|T| > t(1 − α/2; n − 1)) with T noncentral t, n − 1 degrees
    of freedom and noncentrality effect / (sd_diff / √n).

    Examples:
        >>> round(paired_power(10, 1.0, 1.0), 3)  # Cohen's d = 1: 10 pairs give 80 %
        0.803
    """
    if n < 2:
        return 0.0
    critical = _t_quantile(confidence, n)
    noncentrality = effect / (sd_diff / math.sqrt(n))
    distribution = scipy_stats.nct(n - 1, noncentrality)
    return float(distribution.sf(critical) + distribution.cdf(-critical))


def seeds_for_power(sd_diff, effect, power=0.8, confidence=0.95, max_seeds=100_000):
    """The fewest seeds (paired differences) whose :func:`paired_power` reaches ``power``
    (``None`` beyond ``max_seeds``).

    Examples:
        >>> seeds_for_power(1.0, 1.0), seeds_for_power(1.0, 0.5)
        (10, 34)
    """
    low, high = 2, 2
    while paired_power(high, sd_diff, effect, confidence) < power:
        if high >= max_seeds:
            return None
        low, high = high, min(2 * high, max_seeds)
    while low < high:  # power grows with n: the first n that reaches it
        middle = (low + high) // 2
        if paired_power(middle, sd_diff, effect, confidence) >= power:
            high = middle
        else:
            low = middle + 1
    return high
