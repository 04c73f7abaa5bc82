"""Weight-free math on ``keras.ops`` (runs on every Keras backend)."""

from kctx.ops.matrix_decomposition import (
    decompose,
    initial_bases,
    matrix_decomposition,
)

__all__ = ["decompose", "initial_bases", "matrix_decomposition"]
