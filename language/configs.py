"""Named language-modelling configurations: the context length, the decoder and its mixer,
and the optimisation."""

import dataclasses

from kctx.models import MIXERS
from kctx.ops import CAUSAL_METHODS
from kctx.training import (
    DTYPE_POLICIES,
    check_nonnegative,
    check_one_of,
    check_positive,
    replace_config,
)


@dataclasses.dataclass(frozen=True)
class LanguageConfig:
    """One experiment's settings (every field is a ``python -m language.train`` flag).

    Character-level modelling of the standard library's sources (:mod:`language.data`) by a
    decoder-only model (:class:`kctx.models.CausalLanguageModel`): embedding, pre-norm
    blocks of a token mixer and a GELU MLP, and a linear head; AdamW on a cosine-decayed
    learning rate with the global gradient norm clipped at 1.

    Attributes:
        name: the config's name.
        context_length: T, the characters of context the model is trained and scored on.
        mixer: causal_hamburger, attention, linear_attention or causal_conv.
        embed_dim: C, the model's channels.
        num_blocks: decoder blocks.
        mlp_ratio: the MLP's hidden units per channel.
        rank: causal Hamburger: r, the dictionary atoms.
        ham_steps: causal Hamburger: K, the rounds of updates.
        ham_method: causal Hamburger: nmf or vq, its matrix decomposition.
        latent_dim: causal Hamburger: d, the ham's channels (none: 2·C, so that its two
            breads have the parameters of attention's four C × C projections).
        num_heads: attention and linear attention: heads.
        kernel_size: causal convolution: k, the positions it sees.
        chunk_size: causal Hamburger and linear attention: positions per chunk of the
            parallel form (none: the Hamburger all at once, linear attention 64).
        block_size: causal Hamburger: L, positions that share a dictionary fitted to the
            blocks before theirs (none: a dictionary per position).
        short_conv: k of a depthwise causal convolution before every block's mixer, as H3
            and Mamba give their global mixers (none: no convolution).
        steps: training steps.
        batch_size: global batch size (sequences of T characters).
        learning_rate: AdamW's peak learning rate (cosine decay to 0 over the steps).
        weight_decay: AdamW's decoupled weight decay.
        checkpoint_every: steps between checkpoints.
        eval_every: steps between held-out evaluations (0: at the end only).
        eval_characters: held-out characters scored (0: the whole held-out split).
        eval_batch_size: batch of the held-out evaluation.
    """

    name: str
    context_length: int = 512
    mixer: str = "causal_hamburger"
    embed_dim: int = 128
    num_blocks: int = 4
    mlp_ratio: int = 4
    rank: int = 16
    ham_steps: int = 6
    ham_method: str = "nmf"
    latent_dim: int | None = None
    num_heads: int = 4
    kernel_size: int = 4
    chunk_size: int | None = None
    block_size: int | None = None
    short_conv: int | None = None
    steps: int = 3000
    batch_size: int = 16
    learning_rate: float = 1e-3
    weight_decay: float = 0.01
    checkpoint_every: int = 500
    eval_every: int = 0
    eval_characters: int = 200_000
    eval_batch_size: int = 8
    dtype_policy: str = "float32"

    def __post_init__(self):
        check_one_of(self, "dtype_policy", DTYPE_POLICIES)
        check_one_of(self, "mixer", tuple(MIXERS))
        check_one_of(self, "ham_method", CAUSAL_METHODS)
        check_positive(self, "context_length", "embed_dim", "num_blocks", "mlp_ratio", "rank",
                       "ham_steps", "num_heads", "kernel_size", "steps", "batch_size",
                       "checkpoint_every", "eval_batch_size")
        check_positive(self, "learning_rate", integer=False)
        check_nonnegative(self, "weight_decay", integer=False)
        check_nonnegative(self, "eval_every", "eval_characters")
        for name in ("latent_dim", "chunk_size", "block_size", "short_conv"):
            if getattr(self, name) is not None:
                check_positive(self, name)

    def mixer_options(self):
        """The keyword arguments of the mixer's layer."""
        if self.mixer == "causal_hamburger":
            return {"rank": self.rank, "steps": self.ham_steps, "method": self.ham_method,
                    "latent_dim": self.latent_dim or 2 * self.embed_dim,
                    "chunk_size": self.chunk_size, "block_size": self.block_size}
        if self.mixer == "attention":
            return {"num_heads": self.num_heads}
        if self.mixer == "linear_attention":
            return {"num_heads": self.num_heads, "chunk_size": self.chunk_size or 64}
        return {"kernel_size": self.kernel_size}


CONFIGS = {
    # 512 characters of context (the study's short context) and 2,048 (its long one, the
    # same characters per batch).
    "stdlib": LanguageConfig(name="stdlib"),
    "stdlib_2048": LanguageConfig(name="stdlib_2048", context_length=2048, batch_size=4),
}


def get_config(name, **overrides):
    """A named config with fields replaced (:func:`kctx.training.replace_config`)."""
    return replace_config(CONFIGS, name, "language", **overrides)
