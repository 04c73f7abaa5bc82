"""Cost profiler: params, MACs, latency and peak memory of any layer; receptive fields.

The cost profiler measures on the backend asked for (this process's by default):
``tf.function`` graphs on TensorFlow, ``jax.jit`` programs on JAX, eager PyTorch.
:func:`theoretical_receptive_field` reads a functional model's layer graph and
:func:`effective_receptive_field` takes input gradients on the backend in use.
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
from kctx.profile.receptive_field import (EffectiveReceptiveField, ReceptiveField, Window,
                                          effective_receptive_field, register_global_layer,
                                          register_receptive_field_rule,
                                          theoretical_receptive_field)
from kctx.profile.runtimes import (RUNTIME_BACKENDS, RUNTIME_NAMES, RUNTIMES, model_from_spec,
                                   runtime_latency)

__all__ = [
    "EffectiveReceptiveField",
    "RUNTIMES",
    "RUNTIME_BACKENDS",
    "RUNTIME_NAMES",
    "ReceptiveField",
    "Window",
    "count_graph_macs",
    "count_macs",
    "count_params",
    "effective_receptive_field",
    "matmul_peak_gflops",
    "measure_latency",
    "measure_peak_memory",
    "memory_kept_per_model",
    "model_from_spec",
    "profile_layer",
    "register_global_layer",
    "register_receptive_field_rule",
    "runtime_latency",
    "theoretical_receptive_field",
]
