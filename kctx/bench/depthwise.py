"""Depthwise convolutions as the backend's convolution and as a sum of taps.

Each of the KANets' and MSCAN's depthwise convolutions (``CONFIGS``: the KANets' 3×3 at
stride 1 and 2 on a (64, 16, 16, 96) map, the shape of ``tools/jax_cpu_profile.py
--convolutions``; SegNeXt-T's first stage at 512 × 512, a (1, 128, 128, 32) map, for MSCA's
5×5 and strips and the MLP's 3×3 on its 256 hidden channels) is profiled twice on this
process's Keras backend, each in a fresh process (:func:`kctx.profile.profile_layer`):
``keras.layers.DepthwiseConv2D`` (the backend's grouped convolution) and
``kctx.layers.TapDepthwiseConv2D(taps=True)`` (:func:`kctx.ops.depthwise.depthwise_conv_taps`)
with the same configuration. Inference is one call, a training step the call with the
gradients of its input and kernel. The memory of a step is, on JAX, the temporary buffers of
its compiled XLA program (``memory_analysis()``, what the step holds beside its inputs and
outputs; a process's resident set at these sizes grows mostly by the compilation), and
elsewhere the profiler's measure. What ``TapDepthwiseConv2D.TAP_KERNELS`` picks on each JAX
platform comes from these tables.
"""

from kctx.arguments import output_path, positive_int
from kctx.bench import memory_measure, report
from kctx.profile import profile_layer

# name: (kernel size, strides, use_bias, input shape).
CONFIGS = {
    "kanet_3x3": ((3, 3), 1, False, (64, 16, 16, 96)),
    "kanet_3x3_stride2": ((3, 3), 2, False, (64, 32, 32, 96)),
    "msca_5x5": ((5, 5), 1, True, (1, 128, 128, 32)),
    "msca_1x7": ((1, 7), 1, True, (1, 128, 128, 32)),
    "msca_7x1": ((7, 1), 1, True, (1, 128, 128, 32)),
    "msca_1x11": ((1, 11), 1, True, (1, 128, 128, 32)),
    "msca_11x1": ((11, 1), 1, True, (1, 128, 128, 32)),
    "msca_1x21": ((1, 21), 1, True, (1, 128, 128, 32)),
    "msca_21x1": ((21, 1), 1, True, (1, 128, 128, 32)),
    "mlp_3x3": ((3, 3), 1, True, (1, 128, 128, 256)),
}
FORMS = ("convolution", "taps")


def depthwise_layer(name, form):
    """The layer of configuration ``name`` (``CONFIGS``) as ``form``: "convolution"
    (``keras.layers.DepthwiseConv2D``) or "taps" (``TapDepthwiseConv2D(taps=True)``)."""
    import keras

    from kctx.layers import TapDepthwiseConv2D

    kernel_size, strides, use_bias, _ = CONFIGS[name]
    options = dict(strides=strides, padding="same", use_bias=use_bias)
    if form == "taps":
        return TapDepthwiseConv2D(kernel_size, taps=True, **options)
    return keras.layers.DepthwiseConv2D(kernel_size, **options)


def xla_step_temp_mb(layer, input_shape):
    """MB of temporary buffers of the layer's training step (the gradients of
    sum(call(x)²) with respect to its weights and x) as one compiled XLA program (JAX)."""
    import jax
    import jax.numpy as jnp
    import keras

    layer.build(input_shape)
    trainable = [variable.value for variable in layer.trainable_variables]
    non_trainable = [variable.value for variable in layer.non_trainable_variables]

    def loss(trainable, x):
        y, _ = layer.stateless_call(trainable, non_trainable, x)
        return keras.ops.sum(keras.ops.square(y))

    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(
        trainable, jnp.zeros(input_shape)).compile()
    return compiled.memory_analysis().temp_size_in_bytes / 2**20


def run_depthwise(names=tuple(CONFIGS), repeats=10, isolate=True, log=print):
    rows = []
    for name in names:
        shape = CONFIGS[name][3]
        for form in FORMS:
            log(f"profiling {name} as {form} at {shape} ...")
            result = profile_layer(depthwise_layer(name, form), shape, repeats=repeats,
                                   warmup=2, isolate=isolate)
            row = {"config": name, "form": form, "input_shape": list(shape),
                   "kernel_size": list(CONFIGS[name][0]), "strides": CONFIGS[name][1], **result}
            if result["backend"] == "jax":
                row["xla_train_temp_mb"] = xla_step_temp_mb(depthwise_layer(name, form), shape)
            rows.append(row)
    return rows


def _step_mb(row):
    return row.get("xla_train_temp_mb", row["train_mem_mb"])


def format_table(rows):
    header = (f"{'Configuration':<18} {'Input':<18} {'Conv ms':>8} {'Taps ms':>8} {'×':>5} | "
              f"{'Conv step':>9} {'Taps step':>9} {'×':>5} | {'Conv MB':>8} {'Taps MB':>8}")
    lines = [header, "-" * len(header)]
    by_config = {}
    for row in rows:
        by_config.setdefault(row["config"], {})[row["form"]] = row
    for name, forms in by_config.items():
        conv, taps = forms["convolution"], forms["taps"]
        lines.append(
            f"{name:<18} {'×'.join(map(str, conv['input_shape'])):<18} "
            f"{conv['infer_ms']:>8.2f} {taps['infer_ms']:>8.2f} "
            f"{conv['infer_ms'] / taps['infer_ms']:>5.1f} | {conv['train_ms']:>9.2f} "
            f"{taps['train_ms']:>9.2f} {conv['train_ms'] / taps['train_ms']:>5.1f} | "
            f"{_step_mb(conv):>8.1f} {_step_mb(taps):>8.1f}")
    backends = sorted({row["backend"] for row in rows})
    memory = ("the compiled XLA program's temporary buffers" if
              all("xla_train_temp_mb" in row for row in rows) else memory_measure(rows))
    lines.append("")
    lines.append(f"Backend {', '.join(backends)}; median times of one call and of one training "
                 f"step (the call and the gradients of its input and kernel); ×: the "
                 f"convolution's time over the taps'; memory of the training step: "
                 f"{memory}.")
    return "\n".join(lines)


def main(args):
    rows = run_depthwise(names=args.configs, repeats=args.repeats)
    return report(rows, format_table(rows), args.json)


def add_arguments(parser):
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS),
                        help="the depthwise convolutions to profile (all by default)")
    parser.add_argument("--repeats", type=positive_int, default=10,
                        help="timed calls and training steps (median reported)")
    parser.add_argument("--json", type=output_path,
                        help="write the rows as a JSON list to this path")
