"""Independent NumPy references of the papers' equations, for numerical tests.

Written in each paper's own orientation and notation, straight from the
algorithms, deliberately not sharing code or layout with kctx.

Hamburger (Geng et al. 2021): X ∈ R^{d×n} holds the n hyper-pixels as columns,
D ∈ R^{d×r}, C ∈ R^{r×n}, X̄ = DC.
"""

import numpy as np


def softmax_columns(a):
    """Column-wise softmax (over the r rows of each column), as in Alg. 1."""
    a = a - a.max(axis=0, keepdims=True)
    e = np.exp(a)
    return e / e.sum(axis=0, keepdims=True)


def cosine(D, X):
    """cosine(D, X)_ij = d_iᵀ x_j / (‖d_i‖ ‖x_j‖) — an r×n matrix."""
    Dn = D / np.linalg.norm(D, axis=0, keepdims=True)
    Xn = X / np.linalg.norm(X, axis=0, keepdims=True)
    return Dn.T @ Xn


def nmf_codes_update(X, D, C, eps):
    """Alg. 2, line 1: C_ij ← C_ij (DᵀX)_ij / (DᵀDC)_ij."""
    return C * (D.T @ X) / (D.T @ D @ C + eps)


def nmf_bases_update(X, D, C, eps):
    """Alg. 2, line 2: D_ij ← D_ij (XCᵀ)_ij / (DCCᵀ)_ij."""
    return D * (X @ C.T) / (D @ C @ C.T + eps)


def nmf(X, D, steps, eps=1e-6, temperature=1.0):
    """Alg. 2 with C₀ = softmax(DᵀX / T) (official code) and a final C update.

    Returns (X̄, D_K, C_K): the reconstruction and the factors *before* the
    final (gradient-carrying) code update.
    """
    C = softmax_columns(D.T @ X / temperature)
    for _ in range(steps):
        C = nmf_codes_update(X, D, C, eps)
        D = nmf_bases_update(X, D, C, eps)
    C_final = nmf_codes_update(X, D, C, eps)
    return D @ C_final, D, C


def vq(X, D, steps, temperature):
    """Alg. 1: C ← softmax(cosine(D, X)/T), D ← X Cᵀ diag(C 1_n)⁻¹; output
    codes are one more soft assignment. Returns (X̄, D_K)."""
    for _ in range(steps):
        C = softmax_columns(cosine(D, X) / temperature)
        D = X @ C.T @ np.diag(1.0 / C.sum(axis=1))
    C = softmax_columns(cosine(D, X) / temperature)
    return D @ C, D


def cd(X, D, steps, temperature, beta):
    """Alg. 3: C ← softmax(cosine(D, X)/T), D ← normalize(X Cᵀ); then
    C = (DᵀD + βI)⁻¹ DᵀX. Returns (X̄, D_K)."""
    for _ in range(steps):
        C = softmax_columns(cosine(D, X) / temperature)
        D = X @ C.T
        D = D / np.linalg.norm(D, axis=0, keepdims=True)
    r = D.shape[1]
    C = np.linalg.solve(D.T @ D + beta * np.eye(r), D.T @ X)
    return D @ C, D


def numerical_gradient(f, X, h=1e-6):
    """Central finite differences of a scalar function f at X (float64)."""
    grad = np.zeros_like(X)
    it = np.nditer(X, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        Xp, Xm = X.copy(), X.copy()
        Xp[i] += h
        Xm[i] -= h
        grad[i] = (f(Xp) - f(Xm)) / (2 * h)
    return grad


def self_attention(X, Wq, Wk, Wv, Wo, gamma, scale=True):
    """Eq. 3 on the n×C matrix of positions: X + γ softmax(QKᵀ/√d) V W_o."""
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    S = Q @ K.T
    if scale:
        S = S / np.sqrt(Q.shape[1])
    S = S - S.max(axis=1, keepdims=True)
    A = np.exp(S)
    A = A / A.sum(axis=1, keepdims=True)
    return X + gamma * (A @ V @ Wo)
