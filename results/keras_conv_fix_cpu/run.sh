#!/bin/bash
# Keras' PyTorch convolution as released (KCTX_NO_KERAS_FIXES=conv: each convolution copies
# its channels-last input twice, keras-team/keras#23279) against kctx._keras_fixes' fix,
# each measurement in a process of its own, alternating, on the CPU (torch's threads: every
# core). Run from the repository's root: bash results/keras_conv_fix_cpu/run.sh
# Writes one JSON per measurement here; print the table with
#   python results/keras_conv_fix_cpu/table.py
set -e
OUT=results/keras_conv_fix_cpu
export KERAS_BACKEND=torch
for round in 1 2; do
    for form in released fixed; do
        [ $form = released ] && fix=conv || fix=0
        # SegNeXt-T float32, 512x512, batch 1: Keras' eager call.
        KCTX_NO_KERAS_FIXES=$fix .venv/bin/python -m kctx.bench.segnext_gpu --cell t float32 \
            --size 512 --batches 1 --repeats 10 --warmup 3 \
            --json $OUT/segnext_t_call_${form}_$round.json
        # SegNeXt-T's training step (the ADE20K recipe), batch 2 of 128x128 crops.
        KCTX_NO_KERAS_FIXES=$fix .venv/bin/python -m segmentation.bench --train-step \
            --config segnext_ade20k --batch-size 2 --crop-size 128 --repeats 5 --warmup 2 \
            --json $OUT/segnext_t_train_step_${form}_$round.json
        # The HamGAN's training step (a D step, then a G step): gan.bench's default, the
        # 128x128 imagenet128_hamgan_baby at batch 4, with the Hamburger and without.
        KCTX_NO_KERAS_FIXES=$fix .venv/bin/python -m gan.bench --contexts ham_nmf none \
            --repeats 5 --warmup 1 \
            --json $OUT/hamgan_train_step_${form}_$round.json
    done
done
# The training step's two rounds above disagreed (534 against 374 ms in one, 334 against 359
# in the other): three more rounds of it alone.
for round in 3 4 5; do
    for form in released fixed; do
        [ $form = released ] && fix=conv || fix=0
        KCTX_NO_KERAS_FIXES=$fix .venv/bin/python -m segmentation.bench --train-step \
            --config segnext_ade20k --batch-size 2 --crop-size 128 --repeats 5 --warmup 2 \
            --json $OUT/segnext_t_train_step_${form}_$round.json
    done
done
