"""Cost profiler: params, MACs, latency and peak memory of any layer.

Requires the TensorFlow backend (it traces ``tf.function`` graphs).
"""

from kctx.profile.layer_profile import (
    count_params,
    matmul_peak_gflops,
    measure_latency,
    measure_peak_memory,
    memory_kept_per_model,
    profile_layer,
)
from kctx.profile.macs import count_graph_macs, count_macs

__all__ = [
    "count_graph_macs",
    "count_macs",
    "count_params",
    "matmul_peak_gflops",
    "measure_latency",
    "measure_peak_memory",
    "memory_kept_per_model",
    "profile_layer",
]
