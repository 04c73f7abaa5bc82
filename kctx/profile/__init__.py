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
from kctx.profile.runtimes import RUNTIME_NAMES, RUNTIMES, model_from_spec, runtime_latency

__all__ = [
    "RUNTIMES",
    "RUNTIME_NAMES",
    "count_graph_macs",
    "count_macs",
    "count_params",
    "matmul_peak_gflops",
    "measure_latency",
    "measure_peak_memory",
    "memory_kept_per_model",
    "model_from_spec",
    "profile_layer",
    "runtime_latency",
]
