"""Kernel Inception Distance: the unbiased MMD² with a cubic polynomial kernel.

KID = MMD²ᵤ(X, Y) = 1/(m(m−1)) Σ_{i≠j} [k(xᵢ, xⱼ) + k(yᵢ, yⱼ)] − 2/m² Σ_{i,j} k(xᵢ, yⱼ),
k(x, y) = (γ·xᵀy + c₀)^d with d = 3, γ = 1/D, c₀ = 1, averaged over random subsets of
m samples of each side (Bińkowski et al., "Demystifying MMD GANs", ICLR 2018, Eq. 4 and
§4). Unlike FID it has an unbiased estimator, so it is steadier on small sample sets.
"""

import numpy as np


def polynomial_kernel(x, y, degree=3, gamma=None, coef0=1.0):
    """k(x, y) = (γ·xᵀy + c₀)^d for the rows of ``x`` and ``y`` (γ defaults to 1/D)."""
    gamma = 1.0 / x.shape[1] if gamma is None else gamma
    return (x @ y.T * gamma + coef0) ** degree


def mmd2_unbiased(k_xx, k_xy, k_yy):
    """The unbiased MMD² from the three (m, m) kernel matrices (Bińkowski et al., Eq. 4)."""
    m = k_xx.shape[0]
    # Summed in the MMD-GAN code's order (row sums less the diagonal, then their sum),
    # so float32 kernels round as there.
    off_diagonal_xx = (k_xx.sum(axis=1) - np.diagonal(k_xx)).sum()
    off_diagonal_yy = (k_yy.sum(axis=1) - np.diagonal(k_yy)).sum()
    return ((off_diagonal_xx + off_diagonal_yy) / (m * (m - 1))
            - 2 * k_xy.sum(axis=0).sum() / (m * m))


def kernel_distance(features1, features2, subsets=100, subset_size=1000, seed=2020,
                    degree=3, gamma=None, coef0=1.0, dtype="float32"):
    """KID between two feature sets, as torch-fidelity (and the MMD-GAN code) computes it.

    For each of ``subsets`` rounds, ``subset_size`` rows of each side are drawn without
    replacement (``np.random.RandomState(seed).choice``, first side then second, as
    torch-fidelity draws them, so the same seed picks the same subsets) and their
    unbiased MMD² is taken.

    Args:
        features1: (N₁, D) features, e.g. of real images.
        features2: (N₂, D) features of generated images.
        subsets: number of subsets (100 in torch-fidelity).
        subset_size: m (1000 in torch-fidelity); at most min(N₁, N₂).
        seed: the subsets' random seed (torch-fidelity's default 2020).
        degree: the polynomial kernel's degree d (3).
        gamma: its scale γ (``None``: 1/D).
        coef0: its offset c₀ (1).
        dtype: the kernels' precision: ``"float32"`` as torch-fidelity (its features
            are float32), ``"float64"`` for more digits.

    Returns:
        ``(mean, std)`` of MMD² over the subsets (KID values slightly below 0 are
        valid and mean the distributions are very close).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> a, b = rng.normal(size=(200, 8)), rng.normal(1.0, 1.0, size=(200, 8))
        >>> kernel_distance(a, b, subsets=5, subset_size=100)[0] > \\
        ...     kernel_distance(a, a[::-1], subsets=5, subset_size=100)[0]
        True
    """
    features1 = np.asarray(features1, dtype)
    features2 = np.asarray(features2, dtype)
    if features1.ndim != 2 or features2.ndim != 2 or features1.shape[1] != features2.shape[1]:
        raise ValueError("KID needs two (N, D) feature sets of one D. Received: shapes "
                         f"{features1.shape} and {features2.shape}")
    n1, n2 = len(features1), len(features2)
    if not 2 <= int(subset_size) <= min(n1, n2):
        raise ValueError(f"`subset_size` must be between 2 and the smaller sample count "
                         f"({min(n1, n2)}: {n1} and {n2} samples). Received: "
                         f"subset_size={subset_size}")
    rng = np.random.RandomState(seed)
    values = np.zeros(int(subsets))
    for i in range(int(subsets)):
        x = features1[rng.choice(n1, subset_size, replace=False)]
        y = features2[rng.choice(n2, subset_size, replace=False)]
        values[i] = mmd2_unbiased(polynomial_kernel(x, x, degree, gamma, coef0),
                                  polynomial_kernel(x, y, degree, gamma, coef0),
                                  polynomial_kernel(y, y, degree, gamma, coef0))
    return float(np.mean(values)), float(np.std(values))
