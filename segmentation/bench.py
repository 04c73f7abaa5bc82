"""``python -m segmentation.bench [--models ...] [--json PATH]``: the digits_seg Ham segmenter's
inference latency in six CPU runtimes, beside the library's rows.

Rows: the segmenter (``digits_seg``'s ResNet-tiny with the Ham head) at 64×64 and 512×512,
then :mod:`kctx.bench.runtimes`'s models (the Table 3 ham, KANet_KV), at batch 1 and 8;
columns: Keras on TensorFlow, with XLA, on JAX (jit), ONNX Runtime, LiteRT float32 and
int8. Each cell is the median of ``--repeats`` calls after ``--warmup`` in a fresh process
(:func:`kctx.profile.runtime_latency`), random weights and inputs.
"""

import argparse
import os

from kctx.bench import runtimes

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


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = argparse.ArgumentParser(prog="python -m segmentation.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    runtimes.add_arguments(parser, MODELS)
    runtimes.main(parser.parse_args(argv), MODELS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
