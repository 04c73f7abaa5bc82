"""Weight-free math on ``keras.ops`` (runs on every Keras backend)."""

from kctx.ops.attention import attention_2d, multi_head_attention, unfold
from kctx.ops.causal_decomposition import (
    CAUSAL_METHODS,
    causal_nmf,
    causal_nmf_step,
    causal_vq,
    causal_vq_step,
    initial_causal_state,
)
from kctx.ops.chord import (
    chord_dense,
    chord_indices,
    chord_matmul,
    chord_num_factors,
    chord_offsets,
    chord_product_matmul,
    chord_width,
)
from kctx.ops.efficient_attention import efficient_attention
from kctx.ops.gelu import gelu
from kctx.ops.kronecker_attention import (
    KRONECKER_MODES,
    kronecker_attention,
    kronecker_summary,
    outer_sum,
)
from kctx.ops.depthwise import depthwise_conv_taps
from kctx.ops.latent_graph import latent_graph_propagation
from kctx.ops.linear_attention import causal_linear_attention, causal_linear_attention_step
from kctx.ops.magnitude import at_least, magnitude
from kctx.ops.matrix_decomposition import (
    decompose,
    initial_bases,
    matrix_decomposition,
)
from kctx.ops.poly_nl import poly_nl, poly_nl_direct
from kctx.ops.replicas import cross_replica_mean, synchronized_batch_norm
from kctx.ops.resize import resize_bilinear

__all__ = [
    "CAUSAL_METHODS",
    "KRONECKER_MODES",
    "at_least",
    "attention_2d",
    "causal_linear_attention",
    "causal_linear_attention_step",
    "causal_nmf",
    "causal_nmf_step",
    "causal_vq",
    "causal_vq_step",
    "chord_dense",
    "chord_indices",
    "chord_matmul",
    "chord_num_factors",
    "chord_offsets",
    "chord_product_matmul",
    "chord_width",
    "cross_replica_mean",
    "decompose",
    "depthwise_conv_taps",
    "efficient_attention",
    "gelu",
    "initial_bases",
    "initial_causal_state",
    "kronecker_attention",
    "kronecker_summary",
    "latent_graph_propagation",
    "magnitude",
    "matrix_decomposition",
    "multi_head_attention",
    "outer_sum",
    "poly_nl",
    "poly_nl_direct",
    "resize_bilinear",
    "synchronized_batch_norm",
    "unfold",
]
