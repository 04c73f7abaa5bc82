"""Causal token mixers for decoders, each in a parallel form (``layer(x)``) and a recurrent
form (``layer.step(x_t, state)`` from ``layer.initial_state(batch_size)``): softmax
attention with a key-value cache, linear attention, and a causal convolution. With
:class:`kctx.layers.CausalHamburger` they are the arms of a causal language model
(:class:`kctx.models.CausalLanguageModel`)."""

import math

import keras
from keras import ops

from kctx.ops.linear_attention import causal_linear_attention, causal_linear_attention_step
from kctx.validation import check_positive_int, check_sequence_input


class _HeadsMixer(keras.layers.Layer):
    """The query / key / value / output projections of a multi-head mixer on (B, T, C)."""

    def __init__(self, num_heads=4, key_dim=None, kernel_initializer="glorot_uniform",
                 **kwargs):
        super().__init__(**kwargs)
        check_positive_int("num_heads", num_heads)
        check_positive_int("key_dim", key_dim, allow_none=True)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        _, channels = check_sequence_input(self, input_shape, length_known=False)
        if self.key_dim is None and channels % self.num_heads:
            raise ValueError(f"{type(self).__name__}: the channels ({channels}) must divide "
                             f"into num_heads={self.num_heads} heads, or give key_dim.")
        self._head_dim = self.key_dim or channels // self.num_heads
        width = self.num_heads * self._head_dim
        self.qkv = keras.layers.Dense(3 * width, kernel_initializer=self.kernel_initializer,
                                      dtype=self.dtype_policy, name="qkv")
        self.qkv.build(input_shape)
        self.projection = keras.layers.Dense(channels,
                                             kernel_initializer=self.kernel_initializer,
                                             dtype=self.dtype_policy, name="projection")
        self.projection.build((*input_shape[:-1], width))

    def _heads(self, x):
        """q, k, v of a sequence (B, T, C) as (B, H, T, d), or of a position (B, C) as
        (B, H, d)."""
        qkv = self.qkv(x)
        if len(x.shape) == 3:
            qkv = ops.reshape(qkv, (-1, ops.shape(qkv)[1], 3, self.num_heads, self._head_dim))
            return tuple(ops.transpose(qkv[:, :, index], (0, 2, 1, 3)) for index in range(3))
        qkv = ops.reshape(qkv, (-1, 3, self.num_heads, self._head_dim))
        return tuple(qkv[:, index] for index in range(3))

    def _merge(self, heads):
        """The output projection of heads (B, H, T, d) or (B, H, d)."""
        width = self.num_heads * self._head_dim
        if len(heads.shape) == 4:
            heads = ops.transpose(heads, (0, 2, 1, 3))
            return self.projection(ops.reshape(heads, (-1, ops.shape(heads)[1], width)))
        return self.projection(ops.reshape(heads, (-1, width)))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, key_dim=self.key_dim,
                      kernel_initializer=keras.initializers.serialize(self.kernel_initializer))
        return config


def _softmax(scores):
    """Softmax over the last axis, also over a single position (the first generated one,
    where ``keras.ops.softmax`` warns that the axis has size 1)."""
    weights = ops.exp(scores - ops.max(scores, axis=-1, keepdims=True))
    return weights / ops.sum(weights, axis=-1, keepdims=True)


@keras.saving.register_keras_serializable(package="kctx")
class CausalSelfAttention(_HeadsMixer):
    """Multi-head softmax attention where position t attends to positions ≤ t.

    softmax(Q Kᵀ / √d + M) V with M = −∞ above the diagonal (Vaswani et al., 2017), O(T²·C)
    in its parallel form. The recurrent form keeps a key-value cache that grows by one
    position per step (its memory and each step's cost grow with t), or one allocated for
    ``capacity`` positions (``initial_state(batch, capacity)``) that every step writes into,
    so that compiled steps keep one shape.

    Args:
        num_heads: H.
        key_dim: d per head (default C / H).
        kernel_initializer: of the projections.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (batch, T, C).

    Examples:
        >>> layer = CausalSelfAttention(num_heads=2)
        >>> x = keras.random.normal((2, 6, 8), seed=0)
        >>> y = layer(x)
        >>> state = layer.initial_state(2)
        >>> y_0, state = layer.step(x[:, 0], state)
        >>> bool(ops.max(ops.abs(y_0 - y[:, 0])) < 1e-5)
        True

    Reference:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (masked decoder attention).
    """

    def call(self, inputs):
        q, k, v = self._heads(inputs)
        length = ops.shape(inputs)[1]
        scores = ops.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(self._head_dim)
        mask = ops.tril(ops.ones((length, length), dtype="bool"))
        scores = ops.cast(scores, "float32")
        scores = ops.where(mask, scores, ops.zeros_like(scores) - 1e9)
        weights = ops.cast(_softmax(scores), v.dtype)
        return self._merge(ops.einsum("bhts,bhsd->bhtd", weights, v))

    def initial_state(self, batch_size, capacity=None):
        """An empty key-value cache: keys and values (batch, H, 0, d) that each step makes
        one position longer; with ``capacity``, keys and values (batch, H, capacity, d)
        allocated once and the next position (a scalar), so that every step has the same
        shapes (one compiled program: ``jax.jit``, XLA). Steps past ``capacity`` are not
        checked under compilation."""
        if capacity is None:
            empty = ops.zeros((batch_size, self.num_heads, 0, self._head_dim),
                              self.compute_dtype)
            return (empty, empty)
        check_positive_int("capacity", capacity)
        cache = ops.zeros((batch_size, self.num_heads, capacity, self._head_dim),
                          self.compute_dtype)
        return (cache, cache, ops.zeros((), "int32"))

    def step(self, inputs, state):
        """The output at one position (batch, C) from the cache of the positions before;
        returns ``(outputs, state)`` with the cache holding this position too."""
        q, k, v = self._heads(inputs)
        if len(state) == 3:  # a cache of fixed capacity and the position to write
            position = state[2]
            keys = ops.slice_update(state[0], (0, 0, position, 0), ops.expand_dims(k, 2))
            values = ops.slice_update(state[1], (0, 0, position, 0), ops.expand_dims(v, 2))
            state = (keys, values, position + 1)
        else:
            keys = ops.concatenate([state[0], ops.expand_dims(k, 2)], axis=2)
            values = ops.concatenate([state[1], ops.expand_dims(v, 2)], axis=2)
            state = (keys, values)
        scores = ops.cast(ops.einsum("bhd,bhsd->bhs", q, keys) / math.sqrt(self._head_dim),
                          "float32")
        if len(state) == 3:  # the slots after this position are empty
            written = ops.arange(ops.shape(keys)[2]) < state[2]
            scores = ops.where(written, scores, ops.zeros_like(scores) - 1e9)
        weights = ops.cast(_softmax(scores), v.dtype)
        return self._merge(ops.einsum("bhs,bhsd->bhd", weights, values)), state


@keras.saving.register_keras_serializable(package="kctx")
class CausalLinearAttention(_HeadsMixer):
    """Multi-head causal linear attention (:func:`kctx.ops.causal_linear_attention`):
    φ(Q_t)ᵀ Σ_{j≤t} φ(K_j) V_jᵀ / φ(Q_t)ᵀ Σ_{j≤t} φ(K_j), φ = elu + 1, O(T·C·d); the
    recurrent form's state is the two sums, H·(d² + d) numbers whatever t.

    Args:
        num_heads: H.
        key_dim: d per head (default C / H).
        chunk_size: positions per chunk of the parallel form.
        kernel_initializer: of the projections.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (batch, T, C).

    Examples:
        >>> layer = CausalLinearAttention(num_heads=2, chunk_size=4)
        >>> x = keras.random.normal((2, 6, 8), seed=0)
        >>> y = layer(x)
        >>> state = layer.initial_state(2)
        >>> y_0, state = layer.step(x[:, 0], state)
        >>> bool(ops.max(ops.abs(y_0 - y[:, 0])) < 1e-5)
        True

    Reference:
        Katharopoulos, Vyas, Pappas & Fleuret, "Transformers are RNNs: Fast Autoregressive
        Transformers with Linear Attention", ICML 2020.
    """

    def __init__(self, num_heads=4, key_dim=None, chunk_size=64,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(num_heads=num_heads, key_dim=key_dim,
                         kernel_initializer=kernel_initializer, **kwargs)
        check_positive_int("chunk_size", chunk_size)
        self.chunk_size = chunk_size

    def call(self, inputs):
        q, k, v = (ops.cast(t, "float32") for t in self._heads(inputs))
        heads = causal_linear_attention(q, k, v, chunk_size=self.chunk_size)
        return self._merge(ops.cast(heads, self.compute_dtype))

    def initial_state(self, batch_size, capacity=None):
        """Zero sums S (batch, H, d, d) and z (batch, H, d) (``capacity``: unused, the sums
        have one size at every position)."""
        d = self._head_dim
        return (ops.zeros((batch_size, self.num_heads, d, d)),
                ops.zeros((batch_size, self.num_heads, d)))

    def step(self, inputs, state):
        """The output at one position (batch, C) and the sums including it."""
        q, k, v = (ops.cast(t, "float32") for t in self._heads(inputs))
        heads, state = causal_linear_attention_step(q, k, v, state)
        return self._merge(ops.cast(heads, self.compute_dtype)), state

    def get_config(self):
        config = super().get_config()
        config["chunk_size"] = self.chunk_size
        return config


@keras.saving.register_keras_serializable(package="kctx")
class CausalConv1D(keras.layers.Layer):
    """A causal convolution over positions, y_t = Σ_{i<k} W_i x_{t−i} + b: the token mixer of
    a convolution-only baseline, which sees the last ``kernel_size`` positions only. The
    recurrent form's state is the last k − 1 inputs.

    ``depthwise=True`` mixes each channel over positions on its own,
    y_t = Σ_{i<k} w_i ⊙ x_{t−i} + b (k·C weights instead of k·C²): the short convolution
    that H3 and Mamba put before their global token mixers, which
    :class:`~kctx.models.DecoderBlock` puts before any mixer (``short_conv``).

    Args:
        kernel_size: k.
        kernel_initializer: of the (k, C, C) kernel, or the (k, C, 1) depthwise one.
        depthwise: one filter per channel (Keras's depthwise kernel layout).
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (batch, T, C).

    Examples:
        >>> layer = CausalConv1D(kernel_size=3)
        >>> x = keras.random.normal((2, 6, 8), seed=0)
        >>> y = layer(x)
        >>> state = layer.initial_state(2)
        >>> y_0, state = layer.step(x[:, 0], state)
        >>> bool(ops.max(ops.abs(y_0 - y[:, 0])) < 1e-5)
        True

    Reference:
        van den Oord et al., "WaveNet: A Generative Model for Raw Audio", 2016 (causal
        convolutions); Fu et al., "Hungry Hungry Hippos: Towards Language Modeling with
        State Space Models", ICLR 2023, and Gu & Dao, "Mamba: Linear-Time Sequence Modeling
        with Selective State Spaces", 2023 (the depthwise short convolution).
    """

    def __init__(self, kernel_size=4, kernel_initializer="glorot_uniform", depthwise=False,
                 **kwargs):
        super().__init__(**kwargs)
        check_positive_int("kernel_size", kernel_size)
        self.kernel_size = kernel_size
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.depthwise = bool(depthwise)

    def build(self, input_shape):
        _, channels = check_sequence_input(self, input_shape, length_known=False)
        self._channels = channels
        if self.depthwise:
            self.kernel = self.add_weight(name="kernel", shape=(self.kernel_size, channels, 1),
                                          initializer=self.kernel_initializer)
            self.bias = self.add_weight(name="bias", shape=(channels,), initializer="zeros")
            return
        self.conv = keras.layers.Conv1D(channels, self.kernel_size, padding="causal",
                                        kernel_initializer=self.kernel_initializer,
                                        dtype=self.dtype_policy, name="conv")
        self.conv.build(input_shape)

    def call(self, inputs):
        if not self.depthwise:
            return self.conv(inputs)
        # The k − 1 positions before the first are zeros, as Keras's causal padding.
        padded = ops.pad(inputs, [[0, 0], [self.kernel_size - 1, 0], [0, 0]])
        outputs = ops.depthwise_conv(padded, ops.cast(self.kernel, inputs.dtype), 1, "valid")
        return outputs + ops.cast(self.bias, outputs.dtype)

    @property
    def _kernel(self):
        """The (k, C, C) kernel, or the (k, C) depthwise one."""
        return self.kernel[..., 0] if self.depthwise else self.conv.kernel

    @property
    def _bias(self):
        return self.bias if self.depthwise else self.conv.bias

    def initial_state(self, batch_size, capacity=None):
        """The k − 1 positions before the first: zeros (batch, k − 1, C), as the causal
        padding (``capacity``: unused, the window has one size at every position)."""
        return (ops.zeros((batch_size, self.kernel_size - 1, self._channels),
                          self.compute_dtype),)

    def step(self, inputs, state):
        """The output at one position (batch, C) from it and the k − 1 before."""
        window = ops.concatenate([state[0], ops.expand_dims(inputs, 1)], axis=1)
        kernel = ops.cast(self._kernel, window.dtype)
        outputs = ops.einsum("bkc,kc->bc" if self.depthwise else "bkc,kcd->bd", window, kernel)
        outputs = outputs + ops.cast(self._bias, outputs.dtype)
        return outputs, (window[:, 1:],)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(kernel_size=self.kernel_size,
                      kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
                      depthwise=self.depthwise)
        return config
