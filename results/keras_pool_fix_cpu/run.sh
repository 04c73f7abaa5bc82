#!/bin/bash
# Keras' PyTorch pooling as released (KCTX_NO_KERAS_FIXES=pool: each pooling copies its
# channels-last input to channels-first memory and returns a view the next operation copies,
# keras-team/keras#23649) against kctx._keras_fixes' fix, each measurement in a process of
# its own, alternating, on the CPU (torch's threads: every core). Run from the repository's
# root: bash results/keras_pool_fix_cpu/run.sh
# Writes one JSON per measurement here; print the table with
#   python results/keras_pool_fix_cpu/table.py
set -e
OUT=results/keras_pool_fix_cpu
for round in 1 2; do
    for form in released fixed; do
        [ $form = released ] && fix=pool || fix=0
        # The FID Inception extractor on PyTorch (Inception-v3: 13 poolings a call), 256
        # random 299x299 images in batches of 32, glibc's default host memory (the
        # committed JSON were measured before the flag, when that was the bench's only way).
        KCTX_NO_KERAS_FIXES=$fix .venv/bin/python -m kctx.bench fid --backends torch \
            --glibc-default --json $OUT/fid_torch_${form}_$round.json
        # KANet_KV at 224x224 (its strided attention modules average-pool), Keras' eager
        # call on PyTorch, batch 1 and 8.
        KCTX_NO_KERAS_FIXES=$fix .venv/bin/python -m kctx.bench runtimes --models kanet_kv \
            --runtimes keras_torch --batches 1 8 --json $OUT/kanet_kv_torch_${form}_$round.json
        # The HamGAN's training step (a D step, then a G step; the discriminator's residual
        # blocks average-pool): gan.bench's default, the 128x128 imagenet128_hamgan_baby at
        # batch 4, with the Hamburger and without.
        KERAS_BACKEND=torch KCTX_NO_KERAS_FIXES=$fix .venv/bin/python -m gan.bench \
            --contexts ham_nmf none --repeats 5 --warmup 1 \
            --json $OUT/hamgan_train_step_${form}_$round.json
    done
done
