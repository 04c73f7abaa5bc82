#!/bin/bash
# Keras' tree functions on PyTorch three ways, each measurement in a process of its own,
# alternating, on the CPU (torch's threads: every core):
#   released  Keras 3.15.1's (KCTX_NO_KERAS_FIXES=tree): every _dict_to_ordered_dict, run by
#             every flatten and pack_sequence_as, flattens and unflattens its argument,
#             leaves included, and leaves it in a reference cycle (keras-team/keras#23110);
#   cycle     kctx at 007cb53: the same traversal without the cycle;
#   shortcut  kctx now: also returns a leaf as it is and rebuilds a plain list or tuple
#             from its items without a pytree round trip.
# Run from the repository's root: bash results/keras_tree_fix_cpu/run.sh
# Writes one JSON per measurement here; print the table with
#   python results/keras_tree_fix_cpu/table.py
set -e
ROOT=$(pwd)
OUT=$ROOT/results/keras_tree_fix_cpu
EARLIER=$(mktemp -d)/kctx-007cb53
git worktree add --detach "$EARLIER" 007cb53 >/dev/null
trap 'git worktree remove --force "$EARLIER"' EXIT
for round in 1 2; do
    for form in released cycle shortcut; do
        fix=0; code=$ROOT  # python -m imports kctx from the working directory first
        [ $form = released ] && fix=tree
        [ $form = cycle ] && code=$EARLIER
        run() { (cd "$code" && KERAS_BACKEND=torch KCTX_NO_KERAS_FIXES=$fix \
                 "$ROOT/.venv/bin/python" "$@"); }
        # SegNeXt-T's eager call at batch 1: 64x64 (where the layers' Python is most of the
        # time, as at batch 1 on a GPU) and 512x512.
        for size in 64 512; do
            run -m kctx.bench.segnext_gpu --cell t float32 --size $size --batches 1 \
                --repeats 20 --warmup 3 --json $OUT/segnext_t_${size}_${form}_$round.json
        done
        # SegNeXt-T's training step, batch 2 of 128x128 crops.
        run -m segmentation.bench --train-step --config segnext_ade20k --batch-size 2 \
            --crop-size 128 --repeats 10 --warmup 2 --json $OUT/segnext_t_train_${form}_$round.json
    done
done
