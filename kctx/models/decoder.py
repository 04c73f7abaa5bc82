"""A decoder-only language model whose token mixer is chosen by name: the causal Hamburger,
softmax attention, linear attention or a causal convolution, each trained in its parallel
form and generating through its recurrent form."""

import keras
from keras import ops

from kctx.layers.causal_hamburger import CausalHamburger
from kctx.layers.causal_mixers import CausalConv1D, CausalLinearAttention, CausalSelfAttention
from kctx.ops.gelu import gelu
from kctx.validation import check_choice, check_nonnegative_float, check_positive_int

MIXERS = {"causal_hamburger": CausalHamburger, "attention": CausalSelfAttention,
          "linear_attention": CausalLinearAttention, "causal_conv": CausalConv1D}
"""The token mixers of :class:`CausalLanguageModel` by name."""


@keras.saving.register_keras_serializable(package="kctx")
class DecoderBlock(keras.layers.Layer):
    """A pre-norm decoder block: x + mixer(LN(x)), then x + MLP(LN(x)) with a GELU MLP of
    ``mlp_ratio``·C hidden units. With ``short_conv=k`` the mixer's input first goes through
    a depthwise causal convolution over the last k positions, x + mixer(conv_k(LN(x))): the
    local mixing that H3 and Mamba give their global mixers (and RWKV's token shift, k = 2),
    k·C + C weights.

    Args:
        mixer: a name of :data:`MIXERS`.
        mixer_options: keyword arguments of the mixer's class (the causal Hamburger's
            ``residual`` is ``False``: the block adds the residual).
        mlp_ratio: hidden units of the MLP per channel.
        short_conv: k of the depthwise causal convolution before the mixer, or ``None``.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (batch, T, C).

    Examples:
        >>> block = DecoderBlock("causal_conv", {"kernel_size": 3})
        >>> tuple(block(keras.random.normal((2, 5, 8))).shape)
        (2, 5, 8)
    """

    def __init__(self, mixer="attention", mixer_options=None, mlp_ratio=4, short_conv=None,
                 **kwargs):
        super().__init__(**kwargs)
        check_choice("mixer", mixer, tuple(MIXERS))
        check_positive_int("mlp_ratio", mlp_ratio)
        if short_conv is not None:
            check_positive_int("short_conv", short_conv)
        self.mixer_name = mixer
        self.mixer_options = dict(mixer_options or {})
        self.mlp_ratio = mlp_ratio
        self.short_conv = short_conv
        options = dict(self.mixer_options)
        if mixer == "causal_hamburger":
            options.setdefault("residual", False)
        self.mixer = MIXERS[mixer](**options, dtype=self.dtype_policy, name="mixer")
        self.short_convolution = None if short_conv is None else CausalConv1D(
            short_conv, depthwise=True, dtype=self.dtype_policy, name="short_conv")

    def build(self, input_shape):
        channels = int(input_shape[-1])
        self.mixer_norm = keras.layers.LayerNormalization(epsilon=1e-5, dtype=self.dtype_policy,
                                                          name="mixer_norm")
        self.mlp_norm = keras.layers.LayerNormalization(epsilon=1e-5, dtype=self.dtype_policy,
                                                        name="mlp_norm")
        self.mlp_hidden = keras.layers.Dense(self.mlp_ratio * channels, activation=gelu,
                                             dtype=self.dtype_policy, name="mlp_hidden")
        self.mlp_output = keras.layers.Dense(channels, dtype=self.dtype_policy,
                                             name="mlp_output")
        for layer in (self.mixer_norm, self.mixer, self.mlp_norm):
            layer.build(input_shape)
        if self.short_convolution is not None:
            self.short_convolution.build(input_shape)
        self.mlp_hidden.build(input_shape)
        self.mlp_output.build((*input_shape[:-1], self.mlp_ratio * channels))

    def _mlp(self, x):
        return x + self.mlp_output(self.mlp_hidden(self.mlp_norm(x)))

    def call(self, inputs):
        x = self.mixer_norm(inputs)
        if self.short_convolution is not None:
            x = self.short_convolution(x)
        return self._mlp(inputs + self.mixer(x))

    def initial_state(self, batch_size, capacity=None):
        """The mixer's state before the first position (``capacity``: the positions an
        attention cache of fixed size holds, for compiled steps); with ``short_conv``,
        ``(its k − 1 inputs, the mixer's state)``."""
        state = self.mixer.initial_state(batch_size, capacity)
        if self.short_convolution is None:
            return state
        return self.short_convolution.initial_state(batch_size), state

    def step(self, inputs, state):
        """The block at one position (batch, C); returns ``(outputs, state)``."""
        x = self.mixer_norm(inputs)
        if self.short_convolution is None:
            mixed, state = self.mixer.step(x, state)
            return self._mlp(inputs + mixed), state
        local_state, mixer_state = state
        x, local_state = self.short_convolution.step(x, local_state)
        mixed, mixer_state = self.mixer.step(x, mixer_state)
        return self._mlp(inputs + mixed), (local_state, mixer_state)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(mixer=self.mixer_name, mixer_options=self.mixer_options,
                      mlp_ratio=self.mlp_ratio, short_conv=self.short_conv)
        return config


@keras.saving.register_keras_serializable(package="kctx")
class CausalLanguageModel(keras.Model):
    """Token ids (batch, T) → next-token logits (batch, T, vocabulary): an embedding,
    ``num_blocks`` :class:`DecoderBlock` s with the named token mixer, a final layer norm
    and a linear head.

    No position encoding: the causal mixers see the order through causality (decoders
    without position encodings learn position, Haviv et al., 2022), so every arm gets the
    same inputs and the model runs at any length, in training and in generation.

    ``model(tokens)`` scores whole sequences (the mixers' parallel forms);
    ``model.generate(prompt, length)`` continues a prompt one token at a time through their
    recurrent forms (the causal Hamburger's and linear attention's state has a size
    independent of the position; attention's key-value cache grows with it).

    Args:
        vocabulary_size: the number of token ids.
        embed_dim: C, the channels.
        num_blocks: the decoder blocks.
        mixer: a name of :data:`MIXERS`.
        mixer_options: keyword arguments of the mixer's class.
        mlp_ratio: the blocks' MLP hidden units per channel.
        short_conv: k of the blocks' depthwise causal convolution before the mixer (H3's and
            Mamba's short convolution), or ``None``.
        **kwargs: ``keras.Model`` arguments (``name``, ``dtype``).

    Call arguments:
        inputs: int token ids (batch, T).

    Examples:
        >>> model = CausalLanguageModel(vocabulary_size=16, embed_dim=8, num_blocks=1,
        ...                             mixer="causal_hamburger",
        ...                             mixer_options={"rank": 2, "steps": 2})
        >>> tuple(model(ops.zeros((2, 5), "int32")).shape)
        (2, 5, 16)
        >>> tuple(model.generate(ops.ones((2, 3), "int32"), 4, temperature=0.0).shape)
        (2, 7)

    Reference:
        Haviv, Ram, Press, Izsak & Levy, "Transformer Language Models without Positional
        Encodings Still Learn Positional Information", Findings of EMNLP 2022.
    """

    def __init__(self, vocabulary_size=256, embed_dim=128, num_blocks=4,
                 mixer="causal_hamburger", mixer_options=None, mlp_ratio=4, short_conv=None,
                 **kwargs):
        super().__init__(**kwargs)
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("embed_dim", embed_dim)
        check_positive_int("num_blocks", num_blocks)
        self.vocabulary_size = vocabulary_size
        self.embed_dim = embed_dim
        self.num_blocks = num_blocks
        self.mixer_name = mixer
        self.mixer_options = dict(mixer_options or {})
        self.mlp_ratio = mlp_ratio
        self.short_conv = short_conv
        self.embedding = keras.layers.Embedding(vocabulary_size, embed_dim,
                                                dtype=self.dtype_policy, name="embedding")
        self.blocks = [DecoderBlock(mixer, self.mixer_options, mlp_ratio, short_conv,
                                    dtype=self.dtype_policy, name=f"block_{index}")
                       for index in range(num_blocks)]
        self.final_norm = keras.layers.LayerNormalization(epsilon=1e-5, dtype=self.dtype_policy,
                                                          name="final_norm")
        self.head = keras.layers.Dense(vocabulary_size, dtype="float32", name="head")

    @property
    def input_dtype(self):
        """Token ids: int32 (what an exported artifact's signature takes)."""
        return "int32"

    def build(self, input_shape):
        shape = (*input_shape, self.embed_dim)
        self.embedding.build(input_shape)
        for block in self.blocks:
            block.build(shape)
        self.final_norm.build(shape)
        self.head.build(shape)

    def call(self, inputs):
        x = self.embedding(inputs)
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x))

    def initial_state(self, batch_size, capacity=None):
        """Every block's mixer state before the first position; with ``capacity``, the
        attention caches hold that many positions from the start, so that every step has
        the same shapes (``jax.jit(model.step)`` compiles once)."""
        return [block.initial_state(batch_size, capacity) for block in self.blocks]

    def step(self, tokens, states):
        """Next-token logits (batch, vocabulary) after ``tokens`` (batch,) and the states of
        the positions before; returns ``(logits, states)``."""
        x = self.embedding(tokens)
        states = list(states)
        for index, block in enumerate(self.blocks):
            x, states[index] = block.step(x, states[index])
        return self.head(self.final_norm(x)), states

    def generate(self, prompt, length, temperature=1.0, seed=None):
        """``prompt`` (batch, P) continued by ``length`` tokens: (batch, P + length).

        The prompt runs through the recurrent forms position by position, then each new
        token is drawn from softmax(logits / ``temperature``) (``temperature=0``: the most
        likely token) and fed back.

        Args:
            prompt: int token ids (batch, P), P ≥ 1.
            length: the tokens to generate.
            temperature: of the sampling; 0 for greedy decoding.
            seed: an int or a ``keras.random.SeedGenerator`` for the draws.
        """
        check_positive_int("length", length)
        check_nonnegative_float("temperature", temperature)
        prompt = ops.convert_to_tensor(prompt, "int32")
        if len(prompt.shape) != 2 or prompt.shape[1] == 0:
            raise ValueError("`prompt` must be token ids (batch, P) with P ≥ 1. Received: "
                             f"prompt.shape={tuple(prompt.shape)}")
        if not self.built:
            self.build(tuple(prompt.shape))
        seed = keras.random.SeedGenerator(seed) if not isinstance(
            seed, keras.random.SeedGenerator) else seed
        states = self.initial_state(prompt.shape[0])
        for position in range(prompt.shape[1]):
            logits, states = self.step(prompt[:, position], states)
        tokens = [prompt]
        for _ in range(length):
            if temperature == 0:
                token = ops.cast(ops.argmax(logits, axis=-1), "int32")
            else:
                token = ops.cast(keras.random.categorical(logits / temperature, 1,
                                                          seed=seed)[:, 0], "int32")
            tokens.append(ops.expand_dims(token, 1))
            logits, states = self.step(token, states)
        return ops.concatenate(tokens, axis=1)

    def get_config(self):
        config = super().get_config()
        config.update(vocabulary_size=self.vocabulary_size, embed_dim=self.embed_dim,
                      num_blocks=self.num_blocks, mixer=self.mixer_name,
                      mixer_options=self.mixer_options, mlp_ratio=self.mlp_ratio,
                      short_conv=self.short_conv)
        return config
