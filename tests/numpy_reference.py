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


# --- Kronecker Attention Networks (Gao, Wang & Ji, KDD 2020), paper orientation ---
# Matrices are (features × vectors): Q ∈ R^{d×m}, K ∈ R^{d×n}, V ∈ R^{p×n}.


def attn(Q, K, V, score_fn=None):
    """Sec. 2.1: O = V softmax(KᵀQ), column-wise softmax (over keys), no scaling."""
    E = K.T @ Q  # n × m
    if score_fn is not None:
        E = score_fn(E)
    return V @ softmax_columns(E)


def kronecker_c(X):
    """Eq. 1: H = mean over the h horizontal slices (w×c), L = mean over the w lateral
    slices (h×c); C = [Hᵀ, Lᵀ] ∈ R^{c×(w+h)}."""
    H = X.mean(axis=0)
    L = X.mean(axis=1)
    return np.concatenate([H.T, L.T], axis=1)


def mode3_unfold(X):
    """Fig. 1: c × hw, column i·w + j is the fiber X[i, j, :]."""
    h, w, c = X.shape
    return X.reshape(h * w, c).T


def kao(X, mode, num_heads=1, Wq=None, Wk=None, Wv=None, score_fn=None):
    """KAO_KV (Eq. 2) or KAO_QKV (Eq. 3) of one h×w×c map, heads splitting channels;
    optional linear transforms W (c × c') applied as Wᵀ·matrix; score_fn(E, head)."""
    h, w, c = X.shape
    C = kronecker_c(X)
    Q = mode3_unfold(X) if mode == "kv" else C
    project = (lambda W, M: M if W is None else W.T @ M)
    Q, K, V = project(Wq, Q), project(Wk, C), project(Wv, C)
    d, p = Q.shape[0] // num_heads, V.shape[0] // num_heads
    outs = []
    for g in range(num_heads):
        fn = None if score_fn is None else (lambda E, g=g: score_fn(E, g))
        outs.append(attn(Q[g * d:(g + 1) * d], K[g * d:(g + 1) * d], V[g * p:(g + 1) * p], fn))
    O = np.concatenate(outs, axis=0)  # p × m
    if mode == "kv":
        return O.T.reshape(h, w, -1)
    Ht, Lt = O[:, :w], O[:, w:]  # p × w and p × h
    # Frontal slice k is the outer sum of the h-vector Lt[k] and the w-vector Ht[k].
    return Lt.T[:, None, :] + Ht.T[None, :, :]


def attention_2d(X, num_heads=1, pool=None):
    """Regular attention on the unfolding, K = V max-pooled by ``pool`` (Table 1)."""
    h, w, c = X.shape
    P = X
    if pool is not None:
        ph, pw = pool
        P = X[:h // ph * ph, :w // pw * pw].reshape(h // ph, ph, w // pw, pw, c).max(axis=(1, 3))
    Q, KV = mode3_unfold(X), mode3_unfold(P)
    d = c // num_heads
    O = np.concatenate([attn(Q[g * d:(g + 1) * d], KV[g * d:(g + 1) * d], KV[g * d:(g + 1) * d])
                        for g in range(num_heads)], axis=0)
    return O.T.reshape(h, w, c)


# Poly-NL (Babiloni et al. 2021) and the non-local family: X ∈ R^{N×C}, positions as rows.


def poly_nl_elementwise(X, W1, W2, W3):
    """Eq. 7: y_ab = Σ_{d,f,h} Σ_e (1/N) w1_hd w2_fd w3_db x_ad x_ef x_eh, term by term."""
    N = X.shape[0]
    return np.einsum("hd,fd,db,ad,ef,eh->ab", W1, W2, W3, X, X, X, optimize=True) / N


def softmax(a, axis):
    a = a - a.max(axis=axis, keepdims=True)
    e = np.exp(a)
    return e / e.sum(axis=axis, keepdims=True)


def embedded_gaussian(X, W_theta, W_phi, W_g):
    """Wang et al. Eq. 1–2 (embedded Gaussian): y_i = Σ_j softmax_j(θ_iᵀ φ_j) g_j."""
    theta, phi, g = X @ W_theta, X @ W_phi, X @ W_g
    return softmax(theta @ phi.T, axis=1) @ g


def efficient_attention(Q, K, V):
    """Shen et al. Eq. 2, left to right for the check: (ρ_q(Q) ρ_k(K)ᵀ) V, one head."""
    return (softmax(Q, axis=1) @ softmax(K, axis=0).T) @ V


def latent_gnn(F, Psi1, Psi2):
    """Zhang et al. Sec. 3.2 with the official normalisations: F (N×C) the features,
    Psi1 / Psi2 (N×d) the non-negative visible→latent / latent→visible affinities."""
    A1 = Psi1 / np.linalg.norm(Psi1, axis=0, keepdims=True)  # each latent node over positions
    A2 = Psi2 / np.linalg.norm(Psi2, axis=1, keepdims=True)  # each position over latent nodes
    Z = A1.T @ F
    Zn = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    return A2 @ (softmax(Zn @ Zn.T, axis=1) @ Z)


# Sparse factorization (Khalitov et al.): chord factors as dense matrices, built from Sec. 3.


def chord_mask(n):
    """Boolean n×n: row i has non-zeros at i and (i + 2^k) mod n for 2^k < n."""
    mask = np.eye(n, dtype=bool)
    k = 0
    while 2 ** k < n:
        for i in range(n):
            mask[i, (i + 2 ** k) % n] = True
        k += 1
    return mask


# PyTorch's AdamW (torch.optim.AdamW, PyTorch 2.x, one parameter group per (lr_mult,
# decay_mult)); equal to torch.optim.AdamW in float64 (checked once against torch 2.14.1:
# largest difference 5.6e-17 over 5 steps of three groups).


def torch_adamw(params, grads_per_step, learning_rates, multipliers, weight_decay,
                betas=(0.9, 0.999), eps=1e-8):
    """The parameters after one AdamW step per entry of ``grads_per_step`` (lists of
    gradients), at the scheduled ``learning_rates``; parameter i's group has learning
    rate lr · multipliers[i][0] and weight decay weight_decay · multipliers[i][1]."""
    params = [np.array(p, np.float64) for p in params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for step, (grads, lr) in enumerate(zip(grads_per_step, learning_rates), start=1):
        for i, g in enumerate(grads):
            group_lr, group_wd = lr * multipliers[i][0], weight_decay * multipliers[i][1]
            params[i] *= 1 - group_lr * group_wd
            m[i] = m[i] + (g - m[i]) * (1 - betas[0])  # exp_avg.lerp_(grad, 1 - beta1)
            v[i] = v[i] * betas[1] + g * g * (1 - betas[1])
            step_size = group_lr / (1 - betas[0] ** step)
            denominator = np.sqrt(v[i]) / np.sqrt(1 - betas[1] ** step) + eps
            params[i] -= step_size * m[i] / denominator
    return params


# mmsegmentation's EncoderDecoder.slide_inference (mmseg 1.x), NCHW as there.


def mmseg_slide_inference(encode_decode, inputs, crop, stride, num_classes):
    """``inputs`` (N, C, H, W); ``encode_decode(crop (N, C, h, w))`` → (N, K, h, w)."""
    h_stride = w_stride = stride
    h_crop = w_crop = crop
    batch_size, _, h_img, w_img = inputs.shape
    h_grids = max(h_img - h_crop + h_stride - 1, 0) // h_stride + 1
    w_grids = max(w_img - w_crop + w_stride - 1, 0) // w_stride + 1
    preds = np.zeros((batch_size, num_classes, h_img, w_img))
    count_mat = np.zeros((batch_size, 1, h_img, w_img))
    for h_idx in range(h_grids):
        for w_idx in range(w_grids):
            y1 = h_idx * h_stride
            x1 = w_idx * w_stride
            y2 = min(y1 + h_crop, h_img)
            x2 = min(x1 + w_crop, w_img)
            y1 = max(y2 - h_crop, 0)
            x1 = max(x2 - w_crop, 0)
            crop_seg_logit = encode_decode(inputs[:, :, y1:y2, x1:x2])
            preds += np.pad(crop_seg_logit, ((0, 0), (0, 0), (int(y1), int(h_img - y2)),
                                             (int(x1), int(w_img - x2))))
            count_mat[:, :, y1:y2, x1:x2] += 1
    assert (count_mat == 0).sum() == 0
    return preds / count_mat


def causal_nmf(X, D0, steps, eps=1e-6, temperature=1.0, block_size=None):
    """The causal NMF by its per-position definition (kctx.ops.causal_decomposition): for
    every t, round k updates column t's code against D_t^(k-1), then D_t^(k) from the sums
    over the prefix j ≤ t of x_j c_jᵀ and c_j c_jᵀ, each written out as a loop. With
    ``block_size`` L the prefix is j < ⌊t/L⌋·L (the blocks before t's) and an empty prefix
    keeps D0. X (d, n), D0 (d, r); returns X̄ (d, n), column t reconstructed from D_t^(K)
    and one more code update."""
    d, n = X.shape

    def prefix(t):
        return range(t + 1) if block_size is None else range(t // block_size * block_size)

    codes = {t: softmax_columns(D0.T @ X[:, t:t + 1] / temperature) for t in range(n)}
    bases = {t: D0 for t in range(n)}
    for _ in range(steps):
        codes = {t: nmf_codes_update(X[:, t:t + 1], bases[t], codes[t], eps)
                 for t in range(n)}
        new_bases = {}
        for t in range(n):
            if not prefix(t):
                new_bases[t] = D0
                continue
            xct = sum(X[:, j:j + 1] @ codes[j].T for j in prefix(t))
            cct = sum(codes[j] @ codes[j].T for j in prefix(t))
            new_bases[t] = bases[t] * xct / (bases[t] @ cct + eps)
        bases = new_bases
    out = np.zeros_like(X)
    for t in range(n):
        final = nmf_codes_update(X[:, t:t + 1], bases[t], codes[t], eps)
        out[:, t:t + 1] = bases[t] @ final
    return out


def causal_vq(X, D0, steps, eps=1e-6, temperature=0.1, block_size=None):
    """The causal soft VQ by its per-position definition (kctx.ops.causal_decomposition):
    for every t, round k assigns column t softly to D_t^(k-1) (softmax of cosines / T),
    then D_t^(k) is the code-weighted mean of the prefix j ≤ t, Σ x_j c_jᵀ / (Σ c_j + eps),
    each written out as a loop. With ``block_size`` L the prefix is j < ⌊t/L⌋·L and an
    empty prefix keeps D0. X (d, n), D0 (d, r); returns X̄ (d, n), column t reconstructed
    from D_t^(K) and one more soft assignment."""
    d, n = X.shape

    def prefix(t):
        return range(t + 1) if block_size is None else range(t // block_size * block_size)

    def assign(t, D):
        return softmax_columns(cosine(D, X[:, t:t + 1]) / temperature)

    bases = {t: D0 for t in range(n)}
    for _ in range(steps):
        codes = {t: assign(t, bases[t]) for t in range(n)}
        bases = {t: (sum(X[:, j:j + 1] @ codes[j].T for j in prefix(t))
                     / (sum(codes[j].T for j in prefix(t)) + eps)) if prefix(t) else D0
                 for t in range(n)}
    out = np.zeros_like(X)
    for t in range(n):
        out[:, t:t + 1] = bases[t] @ assign(t, bases[t])
    return out


def causal_linear_attention(Q, K, V, eps=1e-6):
    """Katharopoulos et al. (2020), Eq. 9 with causal sums, written as the loop over t:
    V'_t = φ(Q_t)ᵀ Σ_{j≤t} φ(K_j) V_jᵀ / (φ(Q_t)ᵀ Σ_{j≤t} φ(K_j)), φ = elu + 1.
    Q, K (T, d_k), V (T, d_v)."""
    def phi(x):
        return np.where(x > 0, x + 1.0, np.exp(x))

    out = np.zeros((Q.shape[0], V.shape[1]))
    for t in range(Q.shape[0]):
        numerator = sum(phi(Q[t]) @ phi(K[j]) * V[j] for j in range(t + 1))
        denominator = sum(phi(Q[t]) @ phi(K[j]) for j in range(t + 1))
        out[t] = numerator / (denominator + eps)
    return out


def depthwise_conv(x, w, strides, padding):
    """TensorFlow's depthwise convolution, output by output: (B, H, W, C) and (kh, kw, C)
    → (B, H', W', C), y[b, i, j, c] = Σ_{u,v} x̄[b, s·i + u, t·j + v, c] w[u, v, c], where
    "same" zero-pads x by max((⌈H/s⌉ − 1)·s + kh − H, 0) rows, the odd one at the bottom.
    Returns (y, x̄, (top, left))."""
    (s, t), (kh, kw) = strides, w.shape[:2]
    b, h, wd, c = x.shape
    if padding == "same":
        ho, wo = -(-h // s), -(-wd // t)
        ph, pw = max((ho - 1) * s + kh - h, 0), max((wo - 1) * t + kw - wd, 0)
    else:
        ho, wo, ph, pw = (h - kh) // s + 1, (wd - kw) // t + 1, 0, 0
    xp = np.zeros((b, h + ph, wd + pw, c))
    xp[:, ph // 2:ph // 2 + h, pw // 2:pw // 2 + wd] = x
    y = np.zeros((b, ho, wo, c))
    for i in range(ho):
        for j in range(wo):
            patch = xp[:, s * i:s * i + kh, t * j:t * j + kw]  # (B, kh, kw, C)
            y[:, i, j] = np.einsum("buvc,uvc->bc", patch, w)
    return y, xp, (ph // 2, pw // 2)


def depthwise_conv_gradients(x, w, g, strides, padding):
    """∂/∂x and ∂/∂w of Σ y·g for :func:`depthwise_conv`, output by output."""
    (s, t), (kh, kw) = strides, w.shape[:2]
    y, xp, (top, left) = depthwise_conv(x, w, strides, padding)
    dxp, dw = np.zeros_like(xp), np.zeros_like(w, dtype=np.float64)
    for i in range(y.shape[1]):
        for j in range(y.shape[2]):
            dxp[:, s * i:s * i + kh, t * j:t * j + kw] += g[:, i, j, None, None, :] * w
            dw += np.einsum("buvc,bc->uvc", xp[:, s * i:s * i + kh, t * j:t * j + kw],
                            g[:, i, j])
    return dxp[:, top:top + x.shape[1], left:left + x.shape[2]], dw
