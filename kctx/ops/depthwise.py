"""Depthwise 2-D convolution as a sum of shifted taps (weight-free keras.ops math)."""

from keras import ops


def _padding(size, kernel, stride, padding):
    """(before, after, outputs) along one axis, as TensorFlow's and Keras' "same" / "valid"."""
    if padding == "valid":
        return 0, 0, (size - kernel) // stride + 1
    outputs = -(-size // stride)
    total = max((outputs - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2, outputs


def _sum_of_taps(padded, w, rows, columns, s, t):
    """Σ_{u,v} x̄[:, s·i + u, t·j + v, :] · w[u, v, :] for i < rows, j < columns, on an
    already padded x̄ (B, H̄, W̄, C) and a (kh, kw, C) kernel: :func:`depthwise_conv_taps`'s
    forward pass, and its input gradient's phases."""
    y = None
    for u in range(w.shape[0]):
        for v in range(w.shape[1]):
            window = padded[:, u:u + (rows - 1) * s + 1:s, v:v + (columns - 1) * t + 1:t, :]
            y = window * w[u, v] if y is None else y + window * w[u, v]
    return y


def depthwise_conv_taps(x, kernel, bias=None, strides=(1, 1), padding="same"):
    """y[b, i, j, c] = Σ_{u<kh, v<kw} x̄[b, s·i + u, t·j + v, c] · w[u, v, c] (+ bias[c]).

    The depthwise convolution of ``keras.layers.DepthwiseConv2D`` (depth multiplier 1,
    NHWC, undilated) with strides (s, t): x̄ is x zero-padded as Keras pads ("same":
    max((⌈H/s⌉ − 1)·s + kh − H, 0) rows, half of them on top, the odd one below, likewise
    for the columns; "valid": none). Written as kh·kw shifted (strided) slices times each
    tap's per-channel weight, which XLA fuses into element-wise kernels: its grouped
    convolutions are far from the memory bandwidth this form needs, on GPUs for MSCAN's
    long strips (1×21, 21×1: ``tools/gpu_depthwise.py``) and on CPUs for every kernel
    (``python -m kctx.bench depthwise``).

    The gradients are written out and keep only x and w for the backward pass:
    ∂x̄[b, s·i + u, t·j + v, c] += g[b, i, j, c] · w[u, v, c], the same sum of taps over g
    spread by the strides and the flipped kernel, cropped to x; and ∂w[u, v, c] =
    Σ_{b,i,j} x̄[b, s·i + u, t·j + v, c] · g[b, i, j, c], one tap per round of a loop. As
    kh·kw reductions side by side, which automatic differentiation of the sum gives, XLA on
    a CPU held a shifted copy of x̄ for nearly every tap (1.7–11× the temporary memory) and
    took up to 1.8× the time (``tools/depthwise_gradient_forms.py``).

    Args:
        x: (B, H, W, C).
        kernel: (kh, kw, C, 1), Keras' depthwise kernel layout.
        bias: optional (C,).
        strides: (s, t), or an int for both.
        padding: "same" or "valid", as Keras'.

    Returns:
        (B, H', W', C): H' = ⌈H/s⌉ ("same") or ⌊(H − kh)/s⌋ + 1 ("valid").

    Example:
        >>> import numpy as np
        >>> x = np.arange(9, dtype="float32").reshape(1, 3, 3, 1)
        >>> np.asarray(depthwise_conv_taps(x, np.ones((1, 3, 1, 1), "float32")))[0, :, :, 0]
        array([[ 1.,  3.,  3.],
               [ 7., 12.,  9.],
               [13., 21., 15.]], dtype=float32)
        >>> ones = np.ones((3, 3, 1, 1), "float32")
        >>> np.asarray(depthwise_conv_taps(x, ones, strides=2))[0, :, :, 0]
        array([[ 8., 12.],
               [20., 24.]], dtype=float32)
    """
    if padding not in ("same", "valid"):
        raise ValueError(f'`padding` must be "same" or "valid". Received: padding={padding!r}')
    s, t = (strides, strides) if isinstance(strides, int) else tuple(strides)
    # The kernel's value, not a variable (TensorFlow's custom gradients of a function that
    # reads a variable must return the variable's gradient apart).
    x, kernel = ops.convert_to_tensor(x), ops.copy(kernel)
    kh, kw = kernel.shape[0], kernel.shape[1]
    size = x.shape[1], x.shape[2]
    top, bottom, height = _padding(size[0], kh, s, padding)
    left, right, width = _padding(size[1], kw, t, padding)
    pads = ((0, 0), (top, bottom), (left, right), (0, 0))
    padded_size = top + size[0] + bottom, left + size[1] + right
    # x̄'s rows and columns in phases: row s·q + ρ is row q of phase ρ.
    rows, columns = -(-padded_size[0] // s), -(-padded_size[1] // t)

    def pad(a):
        return ops.pad(a, pads) if top or bottom or left or right else a

    @ops.custom_gradient
    def convolve(x, kernel):
        def gradients(*args, upstream=None):
            g = args[0] if upstream is None else upstream
            channels = x.shape[3]
            batch = ops.shape(x)[0] if x.shape[0] is None else x.shape[0]
            # ∂x̄ by phases: the rows s·q + ρ of x̄ take the taps u = ρ + s·m, from g[q − m]
            # (likewise the columns): a correlation of g with the flipped sub-kernel
            # w[ρ::s, σ::t] for each phase (ρ, σ), the phases interleaved; rows past the
            # last window (a "valid" remainder) and phases without taps take none.
            zeros = ops.zeros((rows, columns, channels), g.dtype) + ops.zeros_like(
                g[:, :1, :1, :])
            phases = []
            for rho in range(s):
                for sigma in range(t):
                    sub = kernel[rho::s, sigma::t, :, 0]
                    m, n = sub.shape[0], sub.shape[1]
                    if not (m and n):
                        phases.append(zeros)
                        continue
                    spread = ops.pad(g, ((0, 0), (m - 1, max(rows - height, 0)),
                                         (n - 1, max(columns - width, 0)), (0, 0)))
                    phases.append(_sum_of_taps(spread, ops.flip(sub, axis=(0, 1)), rows,
                                               columns, 1, 1))
            d_padded = phases[0]
            if len(phases) > 1:
                d_padded = ops.reshape(ops.stack(phases, axis=3),
                                       (-1, rows, columns, s, t, channels))
                d_padded = ops.reshape(ops.transpose(d_padded, (0, 1, 3, 2, 4, 5)),
                                       (-1, rows * s, columns * t, channels))
            d_x = d_padded[:, top:top + size[0], left:left + size[1], :]

            # ∂w, one tap a round (its window of x̄ a slice at a traced offset).
            padded = pad(x)
            window_shape = (batch, (height - 1) * s + 1, (width - 1) * t + 1, channels)

            # Each sum over B·H'·W' products accumulates in float32 (bfloat16 would round it).
            g_float = ops.cast(g, "float32")

            def tap(index, d_kernel):
                start = (0, index // kw, index % kw, 0)
                window = ops.slice(padded, start, window_shape)[:, ::s, ::t, :]
                products = ops.cast(window, "float32") * g_float
                return ops.slice_update(d_kernel, (index, 0),
                                        ops.sum(products, axis=(0, 1, 2))[None])

            d_kernel = ops.fori_loop(0, kh * kw, tap, ops.zeros((kh * kw, channels), "float32"))
            return d_x, ops.cast(ops.reshape(d_kernel, kernel.shape), kernel.dtype)

        return _sum_of_taps(pad(x), kernel[..., 0], height, width, s, t), gradients

    y = convolve(x, kernel)
    return y if bias is None else y + bias
