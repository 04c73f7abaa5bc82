"""``python -m segmentation.bench [--models ...] [--json PATH]``: the digits_seg Ham segmenter's
inference latency in the CPU runtimes of ``python -m kctx.bench runtimes``, beside that
command's rows; ``--train-step``: the training step of a config's segmenter on the process's
Keras backend and device.

Rows: the segmenter (``digits_seg``'s ResNet-tiny with the Ham head) at 64×64 and 512×512,
then :mod:`kctx.bench.runtimes`'s models (the Table 3 ham, KANet_KV, SegNeXt-T), at batch 1
and 8; columns: the ten runtimes of :data:`kctx.profile.RUNTIMES` (Keras on TensorFlow, XLA,
JAX and PyTorch; :func:`kctx.export.inference_function` on JAX and PyTorch; ONNX Runtime;
LiteRT float32 and int8). Each cell is the median of ``--repeats`` calls after ``--warmup``
in a fresh process (:func:`kctx.profile.runtime_latency`), random weights and inputs.

``--train-step [--config segnext_ade20k] [--batch-size N] [--crop-size S] [--jit-compile]``:
``model.train_on_batch`` of the workflow's model, optimizer and loss (``segnext_ade20k``:
SegNeXt-T, 512² crops, batch 16, mmseg's paramwise AdamW, cross-entropy at the crop's size)
on random images and labels already on the device: compiled by XLA on JAX, eager on PyTorch,
a ``tf.function`` on TensorFlow, as ``fit`` runs it; ``--jit-compile`` compiles it with
``jit_compile=True`` (XLA on TensorFlow, ``torch.compile`` on PyTorch). Median of
``--repeats`` steps after ``--warmup``; ``train_on_batch`` returns the losses as NumPy
values, so a timed step ends when the device has finished it.
"""

import argparse
import json
import os
import statistics
import time

import numpy as np

from kctx.bench import runtimes
from kctx.bench.standalone import wait_for_turn

# The digits_seg segmenter (the `digits_seg` config's), built by segmentation.models in
# the measuring process.
SEGMENTER = dict(backbone="resnet_tiny", output_stride=8, context="ham_nmf", num_classes=11,
                 head_channels=128)
MODELS = {
    **{f"segmenter_{size}": (f"digits_seg Ham segmenter {size}×{size}",
                             {"builder": "segmentation.models:segmenter",
                              "kwargs": dict(SEGMENTER, input_shape=[size, size, 3])})
       for size in (64, 512)},
    **runtimes.MODELS,
}


def train_step_time(config="segnext_ade20k", batch_size=None, repeats=10, warmup=3, seed=0,
                    crop_size=None, jit_compile="auto"):
    """The median ``train_on_batch`` time of ``config``'s model (see the module's
    docstring) on this process's backend, compiled with ``jit_compile`` (Keras'
    ``Model.compile`` argument); a dict with every step's ms."""
    import keras

    from segmentation.configs import get_config
    from segmentation.workflow import IGNORE_LABEL, build_model, build_optimizer

    overrides = {key: value for key, value in (("batch_size", batch_size),
                                                ("crop_size", crop_size)) if value}
    config = get_config(config, **overrides)
    keras.utils.set_random_seed(seed)
    model = build_model(config)
    model.compile(optimizer=build_optimizer(config), jit_compile=jit_compile,
                  loss=keras.losses.SparseCategoricalCrossentropy(
                      from_logits=True, ignore_class=IGNORE_LABEL))
    size, batch = config.crop_size, config.batch_size
    rng = np.random.default_rng(seed)
    images = keras.ops.convert_to_tensor(
        rng.uniform(-1, 1, (batch, size, size, 3)).astype("float32"))
    labels = keras.ops.convert_to_tensor(
        rng.integers(0, config.num_classes, (batch, size, size)).astype("int32"))
    start = time.perf_counter()
    model.train_on_batch(images, labels)
    first_s = time.perf_counter() - start
    for _ in range(warmup):
        model.train_on_batch(images, labels)
    wait_for_turn()  # under tools' run_in_turn: time while no other process does
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.train_on_batch(images, labels)
        times.append((time.perf_counter() - start) * 1e3)
    return {"config": config.name, "backbone": config.backbone, "batch_size": batch,
            "crop_size": size, "backend": keras.backend.backend(), "jit_compile": jit_compile,
            "params": int(sum(int(np.prod(v.shape)) for v in model.trainable_variables)),
            "first_step_s": round(first_s, 2), "step_ms": round(statistics.median(times), 3),
            "min_ms": round(min(times), 3), "times_ms": [round(t, 3) for t in times],
            "images_per_s": round(batch * 1e3 / statistics.median(times), 2),
            "repeats": repeats, "warmup": warmup}


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = argparse.ArgumentParser(prog="python -m segmentation.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-step", action="store_true",
                        help="time the training step of --config's model instead")
    parser.add_argument("--config", default="segnext_ade20k", help="with --train-step")
    parser.add_argument("--batch-size", type=int, help="with --train-step (default: the config's)")
    parser.add_argument("--crop-size", type=int, help="with --train-step (default: the config's)")
    parser.add_argument("--jit-compile", action="store_const", const=True, default="auto",
                        help="with --train-step: Model.compile(jit_compile=True)")
    runtimes.add_arguments(parser, MODELS)
    args = parser.parse_args(argv)
    if args.train_step:
        result = train_step_time(args.config, args.batch_size, args.repeats, args.warmup,
                                 crop_size=args.crop_size, jit_compile=args.jit_compile)
        compiled = ", jit_compile=True" if result["jit_compile"] is True else ""
        print(f"{result['backend']}{compiled}: {result['config']} training step, batch "
              f"{result['batch_size']} of {result['crop_size']}²: {result['step_ms']:.1f} ms "
              f"({result['images_per_s']:.1f} images/s; first step {result['first_step_s']} s)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
        return 0
    runtimes.main(args, MODELS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
