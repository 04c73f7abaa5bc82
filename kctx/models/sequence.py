"""Sequence classifiers / regressors around PSF-Attn, and a Transformer baseline."""

import keras

from kctx.validation import check_choice, check_positive_int
from kctx.layers.psf_attention import PSFAttention
from kctx.layers.sequence_embedding import PositionEmbedding, PrependToken

POOLINGS = ("flatten", "cls")


def _embed(seq_len, input_dim, vocab_size, embed_dim, pooling, positions, dropout_rate):
    """Inputs → embedding (+ [CLS]) (+ positions) → dropout; returns (inputs, x)."""
    check_positive_int("seq_len", seq_len)
    check_positive_int("embed_dim", embed_dim)
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
    return inputs, keras.layers.Dropout(dropout_rate)(x)


def _head(x, pooling, outputs, dropout_rate, output_activation):
    """Pooling (flatten all positions, or the [CLS] position) → dropout → Dense(outputs)."""
    check_positive_int("outputs", outputs)
    x = keras.layers.Flatten()(x) if pooling == "flatten" else x[:, 0]
    x = keras.layers.Dropout(dropout_rate)(x)
    return keras.layers.Dense(outputs, activation=output_activation, dtype="float32",
                              name="head")(x)


def psf_sequence_model(seq_len, input_dim=None, vocab_size=None, outputs=1, pooling="flatten",
                       embed_dim=32, value_units=8, hidden_units=32, num_blocks=1,
                       num_factors=None, residual="factor", positions=False, dropout_rate=0.0,
                       output_activation=None, name="psf"):
    """The PSF-Attn network of Khalitov et al. (Fig. 3, Sec. 5.2).

    Embedding (``Embedding`` for token ids, ``Dense`` for real vectors: the
    paper's extra linear layer for the Adding problem) → optional learned
    position embedding → ``num_blocks`` × :class:`kctx.layers.PSFAttention`
    (each block reads the previous one's V) → pooling (``"flatten"``: all
    positions' V into the head; ``"cls"``: a prepended [CLS] token's V) →
    ``Dense(outputs)``. This is the authors' PSF-Net: no LayerNorm or
    feed-forward sub-block, a narrow V (8 channels) that the flattening head
    reads at every position. The defaults are their Adding / Temporal-order
    settings (embedding 32, MLPs of 32 GELU units, V of 8 channels,
    residual after every factor).

    Args:
        seq_len: n (fixed).
        input_dim: inputs (batch, n, input_dim) floats; give this or ``vocab_size``.
        vocab_size: inputs (batch, n) int token ids; give this or ``input_dim``.
        outputs: head units (1 for regression, the classes for classification).
        embed_dim: d of the embedding E.
        value_units: V channels of each :class:`kctx.layers.PSFAttention`.
        hidden_units: MLP width of each :class:`kctx.layers.PSFAttention`.
        num_factors: M of each :class:`kctx.layers.PSFAttention`.
        residual: the residual placement of each :class:`kctx.layers.PSFAttention`.
        positions: add a learned position embedding (the authors use one for
            token tasks and none for Adding, whose flattening head already
            knows the positions).
        dropout_rate: after the embedding, after each block and before the head.
        output_activation: of the head (logits by default).

    Examples:
        >>> model = psf_sequence_model(1024, input_dim=2)
        >>> model.output_shape
        (None, 1)
    """
    check_positive_int("num_blocks", num_blocks)
    inputs, x = _embed(seq_len, input_dim, vocab_size, embed_dim, pooling, positions,
                       dropout_rate)
    for index in range(num_blocks):
        x = PSFAttention(num_factors=num_factors, hidden_units=hidden_units,
                         value_units=value_units, residual=residual,
                         name=f"block{index + 1}_psf")(x)
        x = keras.layers.Dropout(dropout_rate)(x)
    return keras.Model(inputs, _head(x, pooling, outputs, dropout_rate, output_activation),
                       name=name)


def transformer_sequence_model(seq_len, input_dim=None, vocab_size=None, outputs=1,
                               pooling="flatten", embed_dim=32, num_blocks=1, num_heads=1,
                               ffn_units=None, positions=False, dropout_rate=0.1,
                               output_activation=None, name="transformer"):
    """The Transformer baseline of Khalitov et al. (Sec. 5.2), in Keras.

    The same embedding, pooling and head as :func:`psf_sequence_model`, with
    ``num_blocks`` post-LayerNorm Transformer encoder layers in place of
    PSF-Attn (as ``torch.nn.TransformerEncoderLayer(embed_dim, num_heads,
    ffn_units)``, the authors' baseline): ``keras.layers.MultiHeadAttention``
    (``num_heads`` heads of embed_dim / num_heads) → add & LayerNorm → ReLU MLP
    → add & LayerNorm, with dropout ``dropout_rate`` (PyTorch's 0.1) inside
    the layers only. O(n²)
    memory in the attention scores.

    Args:
        num_heads: attention heads (the authors' 1).
        ffn_units: the MLP's hidden width (default embed_dim, as the authors').
        positions: add a learned position embedding (the authors use one for
            token tasks; self-attention itself is permutation-equivariant).
        seq_len: as :func:`psf_sequence_model`; so are the other arguments.
    """
    check_positive_int("num_blocks", num_blocks)
    check_positive_int("num_heads", num_heads)
    if embed_dim % num_heads:
        raise ValueError(f"`num_heads` must divide `embed_dim`. Received: num_heads={num_heads}, "
                         f"embed_dim={embed_dim}")
    inputs, x = _embed(seq_len, input_dim, vocab_size, embed_dim, pooling, positions, 0.0)
    for index in range(num_blocks):
        prefix = f"block{index + 1}"
        attention = keras.layers.MultiHeadAttention(num_heads, embed_dim // num_heads,
                                                    dropout=dropout_rate,
                                                    name=f"{prefix}_attention")
        mixed = keras.layers.Dropout(dropout_rate)(attention(x, x))
        x = keras.layers.LayerNormalization(name=f"{prefix}_norm1")(
            keras.layers.Add()([x, mixed]))
        hidden = keras.layers.Dense(ffn_units or embed_dim, activation="relu",
                                    name=f"{prefix}_ffn1")(x)
        hidden = keras.layers.Dropout(dropout_rate)(hidden)
        hidden = keras.layers.Dropout(dropout_rate)(
            keras.layers.Dense(embed_dim, name=f"{prefix}_ffn2")(hidden))
        x = keras.layers.LayerNormalization(name=f"{prefix}_norm2")(
            keras.layers.Add()([x, hidden]))
    return keras.Model(inputs, _head(x, pooling, outputs, 0.0, output_activation), name=name)
