"""Weight-free math on ``keras.ops`` (runs on every Keras backend)."""

from kctx.ops.attention import attention_2d, multi_head_attention, unfold
from kctx.ops.kronecker_attention import (
    KRONECKER_MODES,
    kronecker_attention,
    kronecker_summary,
    outer_sum,
)
from kctx.ops.matrix_decomposition import (
    decompose,
    initial_bases,
    matrix_decomposition,
)

__all__ = [
    "KRONECKER_MODES",
    "attention_2d",
    "decompose",
    "initial_bases",
    "kronecker_attention",
    "kronecker_summary",
    "matrix_decomposition",
    "multi_head_attention",
    "outer_sum",
    "unfold",
]
