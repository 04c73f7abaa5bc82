"""Sequence classifiers / regressors around PSF-Attn, and an equal-size Transformer baseline."""

import keras

from kctx._validation import check_choice, check_positive_int
from kctx.layers.psf_attention import PSFAttention
from kctx.layers.sequence_embedding import PositionEmbedding, PrependToken

POOLINGS = ("flatten", "cls")


def _sequence_model(mixer, seq_len, input_dim, vocab_size, outputs, pooling, embed_dim,
                    num_blocks, ffn_units, dropout_rate, output_activation, positions, name):
    check_positive_int("seq_len", seq_len)
    check_positive_int("outputs", outputs)
    check_positive_int("embed_dim", embed_dim)
    check_positive_int("num_blocks", num_blocks)
    check_choice("pooling", pooling, POOLINGS)
    if (input_dim is None) == (vocab_size is None):
        raise ValueError("Give exactly one of `input_dim` (real-valued inputs (batch, n, "
                         "input_dim)) and `vocab_size` (token ids (batch, n)). Received: "
                         f"input_dim={input_dim!r}, vocab_size={vocab_size!r}")
    if vocab_size is not None:
        inputs = keras.Input((seq_len,), dtype="int32", name="tokens")
        x = keras.layers.Embedding(vocab_size, embed_dim, name="embedding")(inputs)
    else:
        inputs = keras.Input((seq_len, input_dim), name="inputs")
        x = keras.layers.Dense(embed_dim, name="embedding")(inputs)
    if pooling == "cls":
        x = PrependToken(name="cls_token")(x)
    if positions:
        x = PositionEmbedding(name="positions")(x)
    for index in range(num_blocks):
        prefix = f"block{index + 1}"
        mixed = keras.layers.Dropout(dropout_rate)(mixer(prefix)(x))
        x = keras.layers.LayerNormalization(name=f"{prefix}_norm1")(
            keras.layers.Add()([x, mixed]))
        hidden = keras.layers.Dense(ffn_units or 2 * embed_dim, activation="gelu",
                                    name=f"{prefix}_ffn1")(x)
        hidden = keras.layers.Dropout(dropout_rate)(
            keras.layers.Dense(embed_dim, name=f"{prefix}_ffn2")(hidden))
        x = keras.layers.LayerNormalization(name=f"{prefix}_norm2")(
            keras.layers.Add()([x, hidden]))
    x = keras.layers.Flatten()(x) if pooling == "flatten" else x[:, 0]
    x = keras.layers.Dropout(dropout_rate)(x)
    outputs = keras.layers.Dense(outputs, activation=output_activation, dtype="float32",
                                 name="head")(x)
    return keras.Model(inputs, outputs, name=name)


def psf_sequence_model(seq_len, input_dim=None, vocab_size=None, outputs=1, pooling="flatten",
                       embed_dim=32, num_blocks=1, hidden_units=64, num_factors=None,
                       ffn_units=None, dropout_rate=0.0, output_activation=None, name="psf"):
    """A PSF-Attn sequence model (Fig. 3 of Khalitov et al.).

    Embedding (``Embedding`` for token ids, ``Dense`` for real vectors) →
    ``num_blocks`` × [PSF-Attn → add & LayerNorm → GELU MLP → add & LayerNorm]
    → pooling (``"flatten"``: all positions into the head; ``"cls"``: a
    prepended [CLS] token's output) → ``Dense(outputs)``. PSF-Attn knows the
    positions through its chord structure, so no position embedding is added.

    Args:
        seq_len: n (fixed).
        input_dim / vocab_size: exactly one; inputs (batch, n, input_dim) floats
            or (batch, n) int token ids.
        outputs: head units (1 for regression, the classes for classification).
        hidden_units, num_factors: of each :class:`kctx.layers.PSFAttention`.
        ffn_units: the MLP's hidden width (default 2·embed_dim).
        output_activation: of the head (logits by default).
    """
    def mixer(prefix):
        return PSFAttention(num_factors=num_factors, hidden_units=hidden_units,
                            name=f"{prefix}_psf")

    return _sequence_model(mixer, seq_len, input_dim, vocab_size, outputs, pooling, embed_dim,
                           num_blocks, ffn_units, dropout_rate, output_activation, False, name)


def transformer_sequence_model(seq_len, input_dim=None, vocab_size=None, outputs=1,
                               pooling="flatten", embed_dim=32, num_blocks=1, num_heads=2,
                               ffn_units=None, dropout_rate=0.0, output_activation=None,
                               name="transformer"):
    """The Transformer baseline of the same shape as :func:`psf_sequence_model`:
    ``keras.layers.MultiHeadAttention`` (``num_heads`` heads of embed_dim / num_heads)
    in place of PSF-Attn, plus a learned position embedding (self-attention is
    permutation-equivariant without it). O(n²) memory in the attention scores."""
    check_positive_int("num_heads", num_heads)
    if embed_dim % num_heads:
        raise ValueError(f"`num_heads` must divide `embed_dim`. Received: num_heads={num_heads}, "
                         f"embed_dim={embed_dim}")

    class _SelfAttention:
        def __init__(self, prefix):
            self.layer = keras.layers.MultiHeadAttention(num_heads, embed_dim // num_heads,
                                                         name=f"{prefix}_attention")

        def __call__(self, x):
            return self.layer(x, x)

    return _sequence_model(_SelfAttention, seq_len, input_dim, vocab_size, outputs, pooling,
                           embed_dim, num_blocks, ffn_units, dropout_rate, output_activation,
                           True, name)
