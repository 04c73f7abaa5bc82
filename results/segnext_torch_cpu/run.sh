#!/bin/bash
# SegNeXt-T float32, 512x512, batch 1, on the CPU with PyTorch (2 cores): the official
# mmseg 1.2.2 model (eager, as mmseg runs it) beside kctx's Keras model on the PyTorch
# backend, called eagerly and through kctx.export.inference_function (torch.export +
# torch.compile, and the exported program alone). Run from the repository's root after
# `bash tools/gpu_wheels.sh && DRY_RUN=1 bash tools/gpu_batch1_lease.sh`, whose dry run
# installs the official packages into /tmp/gpu-lease-dry-site (and blocks TensorFlow there).
set -e
SITE=/tmp/gpu-lease-dry-site
OUT=results/segnext_torch_cpu
export PYTHONPATH=$SITE/blocked:$SITE/packages:$PWD
.venv/bin/python tools/segnext_official_latency.py --variant t --device cpu --size 512 \
    --dtype float32 --batches 1 --repeats 10 --warmup 3 --batch-repeats 1 --batch-warmup 1 \
    --no-macs --json $OUT/official.json
KERAS_BACKEND=torch .venv/bin/python -m kctx.bench.segnext_gpu --cell t float32 --size 512 \
    --batches 1 --repeats 10 --warmup 3 --inference-function --json $OUT/kctx_inference_function.json
KERAS_BACKEND=torch .venv/bin/python -m kctx.bench.segnext_gpu --cell t float32 --size 512 \
    --batches 1 --repeats 10 --warmup 3 --json $OUT/kctx_eager.json
KERAS_BACKEND=torch .venv/bin/python -m kctx.bench.segnext_gpu --cell t float32 --size 512 \
    --batches 1 --repeats 10 --warmup 3 --inference-function exported \
    --json $OUT/kctx_exported.json
