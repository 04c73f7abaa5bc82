#!/bin/bash
# The next GPU lease's measurements for issue 39 (prepared after lease 4, not yet run):
# why kctx's JAX SegNeXt at batch 1 is 0.75-1.25x the official model replayed as a CUDA
# graph while batch 16 is 0.45-0.54x (docs/performance.md, "Now (lease 4)"). In order of
# importance, each step in its own process, within one 10-minute device call:
#   1. SegNeXt-T float32 as kctx runs it, profiled (jax_profile: busy time by kernel);
#   2. the official model on the same machine, eager and as a CUDA graph, profiled
#      (torch.profiler: its kernels' busy time beside kctx's, so the gap splits into
#      the GPU's work and the launches between kernels);
#   3. kctx on PyTorch through kctx.export.inference_function: the exported program compiled
#      by torch.compile (Inductor), timed as it is and replayed as a CUDA graph, profiled,
#      at batch 1 (batch 16 after step 6: each shape is another Inductor compile); then the
#      exported program as it is (Keras' convolutions without their two copies of each
#      input since import kctx fixes them, kctx._keras_fixes) and with what it computes
#      from the weights alone folded in (kctx.export._fold_weights), at batch 1 and 16,
#      also as a CUDA graph (on 2 CPU cores, SegNeXt-T at 512x512: Keras' eager call
#      344 ms, the exported program 264 ms, compiled 231 ms, the official model 444 ms:
#      bash results/segnext_torch_cpu/run.sh). Every
#      PyTorch cell, the official model's too, records the kernels of its call
#      (torch_census; inductor_census of the compiled program's code);
#   4. kctx with XLA's command buffers (CUDA graphs) for every kind of command, from one
#      command up: whether launch overhead is the batch-1 gap (the flags are XLA's of
#      2025-26; an XLA that refuses them fails this process only);
#   5. kctx with cuDNN's float32 convolutions in NHWC (--xla_gpu_force_conv_nhwc): older
#      XLA gives float32 convolutions NCHW (newer XLA gives every 2-D one NHWC on Hopper),
#      so lease 4's 99 transposes beside the 99 convolutions are the images' layout
#      changes or the filters' (hlo_census now counts the kernels that read the weights
#      alone, and the profile names them);
#   6. kctx with the weights as constants of the program (--inference-function: JAX's
#      kctx.export.inference_function): XLA folds
#      the filters' layout changes at compile time, and a call dispatches the image alone
#      (each cell's dispatch_us: 545 weight arrays cost 223 us a call on a 2-core EPYC);
#      then 4, 5 and 6 together;
#   7. the square kernels as taps again, batch 1 with 200 repeats (lease 4's were noisy);
#   8. SegNeXt-T's JAX training step with the gathered resize (the default; its gradient is
#      a scatter-add) and with jax.image.resize's matrices;
#   9. issue 41's generation benchmark (kctx.bench generation --compiled, jax.jit);
#  10. kctx.profile.profile_layer on the GPU, JAX and PyTorch: the Hamburger (NMF) at
#      1x128x128x512, its latency, MACs and device peak memory (the CUDA allocator's, JAX's
#      memory_stats), the profiler's GPU paths, which no lease has run yet;
#  11. Keras' eager call on PyTorch, batch 1 and 16, eager and replayed as a CUDA graph, with
#      Keras' convolution as kctx fixes it at import and as released
#      (KCTX_NO_KERAS_FIXES=conv: two copies of each convolution's input; lease 3's graph
#      at batch 16 took 65.5 ms, 2.4x the official model, with them).
#  12. SegNeXt-T's training step on PyTorch (Keras eager, batch 16 of 512x512: lease 4's 663 ms
#      was before ParamwiseAdamW's grouped update and kctx's fixes of Keras' convolution and
#      tree walk) beside mmseg's on the same GPU (lease 3: 202 ms).
# Each step gets at most what is left of 585 s, so the call ends inside its limit and the
# later steps are the ones a slow machine drops.
# On this machine, first: bash tools/gpu_wheels.sh (the wheels, into .whl/), and the dry
# run: DRY_RUN=1 bash tools/gpu_batch1_lease.sh (every step once, small, on the CPU with
# .venv's Python and `import tensorflow` failing as it does on the device; its output goes
# to /tmp/gpu-lease-dry unless OUT says where). Then, from the repository's root on the
# device: run(command="bash tools/gpu_batch1_lease.sh", carry=[".whl"], timeout_s=600).
# Writes to $OUT/b1 (at most 8 files come back, so the JSON of steps 3-7 and of step 8 are
# gathered into one file each at the end) and prints the table of it all (report.txt).
if [ -n "${DRY_RUN:-}" ]; then
    PY=$PWD/.venv/bin/python OUT=${OUT:-/tmp/gpu-lease-dry} TOTAL=3600 CAP_SCALE=4
    DEVICE=cpu SIZE=64 GEN_LENGTHS="128 256" PROFILE_SHAPE="(1, 16, 16, 64)"
    REPEATS="--repeats 2 --warmup 1 --batch-repeats 1 --batch-warmup 1"
    TRAIN="--batch-size 1 --repeats 1 --warmup 1"
    OFFICIAL_TRAIN="--batches 1 --repeats 1 --warmup 1"
    SITE=/tmp/gpu-lease-dry-site
    rm -rf "$SITE" && mkdir -p "$SITE/blocked" && echo 'raise ImportError("no TensorFlow on the device machine")' > "$SITE/blocked/tensorflow.py"
    # The wheels but optree (its wheel is Python 3.12's; .venv has its own), and OpenCV,
    # which the device has.
    "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$SITE/opencv" \
        opencv-python-headless || exit 1
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE/packages" \
        $(ls .whl/*.whl | grep -v optree) "$SITE"/opencv/*.whl || exit 1
    export PYTHONPATH=$SITE/blocked:$SITE/packages:$PWD
else
    PY=python3 TOTAL=585 CAP_SCALE=1 DEVICE=cuda SIZE=512
    GEN_LENGTHS="1024 2048 4096 8192 16384" PROFILE_SHAPE="(1, 128, 128, 512)"
    REPEATS="--repeats 200 --warmup 10 --batch-repeats 6 --batch-warmup 2"
    TRAIN="--batch-size 16 --repeats 10 --warmup 3"
    OFFICIAL_TRAIN="--batches 16 --repeats 10 --warmup 3"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
fi
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=2
mkdir -p "$OUT/b1"
LOG="$OUT/b1/steps.log"
step() {  # step NAME CAP COMMAND...: one process, its output appended to the log, at most
          # CAP seconds (times CAP_SCALE) and what is left of TOTAL
    local name=$1 limit=$(($2 * CAP_SCALE)) start=$SECONDS; shift 2
    local left=$((TOTAL - SECONDS))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 30 ]; then echo "$name: skipped, $limit s left"; return; fi
    echo "=== $name (limit $limit s)" >> "$LOG"
    timeout "$limit" "$@" >> "$LOG" 2>&1
    echo "$name: rc $? in $((SECONDS - start)) s"
}
segnext_on() {  # segnext_on BACKEND CAP NAME BATCHES FLAGS...: SegNeXt-T float32
    local backend=$1 cap=$2 name=$3 batches=$4; shift 4
    step "$name" $cap env KERAS_BACKEND=$backend "$PY" -m kctx.bench.segnext_gpu --cell t \
        float32 --size $SIZE --batches $batches $REPEATS "$@" --json "$OUT/b1/$name.json"
}
segnext() {  # segnext NAME BATCHES FLAGS...: on JAX
    segnext_on jax 150 "$@"
}
COMMAND_BUFFERS="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUDNN,CUSTOM_CALL \
--xla_gpu_graph_min_graph_size=1"
NHWC="--xla_gpu_force_conv_nhwc=true"
segnext default "1 16" --profile
step official 120 "$PY" tools/segnext_official_latency.py --variant t --device $DEVICE \
    --size $SIZE --dtype float32 --batches 1 16 $REPEATS --no-macs --cuda-graph --profile \
    --json "$OUT/b1/official.json"
segnext_on torch 200 torch_compile 1 --inference-function --profile
segnext_on torch 90 torch_export "1 16" --inference-function exported
XLA_FLAGS="$COMMAND_BUFFERS" segnext command_buffers 1
XLA_FLAGS="$NHWC" segnext nhwc "1 16" --profile
segnext constant_weights 1 --inference-function
XLA_FLAGS="$NHWC $COMMAND_BUFFERS" segnext all_three 1 --inference-function
segnext_on torch 200 torch_compile_16 16 --inference-function
segnext square_taps 1 --square-taps
train() {  # train NAME PYTHON-PRELUDE: SegNeXt-T's training step on JAX, batch 16 of 512²
    step "train_$1" 120 env KERAS_BACKEND=jax "$PY" -c "$2
import sys, segmentation.bench as b
sys.exit(b.main(sys.argv[1:]))" --train-step --config segnext_ade20k $TRAIN \
        --json "$OUT/b1/train_$1.json"
}
train gathered ""
train matrix "import kctx.ops.resize as r; r.GATHER_PLATFORMS = ()"
# Issue 41's generation benchmark on the GPU: tokens/s and state against the length, every
# mixer, the Hamburger blocked (L = 64), each token's step one jax.jit program.
step generation 120 env KERAS_BACKEND=jax "$PY" -m kctx.bench generation --compiled \
    --ham-block-size 64 --lengths $GEN_LENGTHS --json "$OUT/b1/generation.json"
# Step 10: profile_layer in this process's backend (isolate=False), the result as JSON.
for backend in jax torch; do
    step "profile_$backend" 60 env KERAS_BACKEND=$backend "$PY" -c "
import json, sys
from kctx.profile import profile_layer
result = profile_layer({'block': 'ham_nmf'}, $PROFILE_SHAPE, repeats=20, train_repeats=10,
                       warmup=3, isolate=False)
print(result)
with open(sys.argv[1], 'w') as file:
    json.dump(result, file, indent=1)" "$OUT/b1/profile_$backend.json"
done
segnext_on torch 90 torch_eager "1 16"
KCTX_NO_KERAS_FIXES=conv segnext_on torch 90 torch_eager_released "1 16"
# Step 12: the training step on PyTorch, kctx's (eager, as fit runs it) and mmseg's.
step train_torch 120 env KERAS_BACKEND=torch "$PY" -m segmentation.bench --train-step \
    --config segnext_ade20k $TRAIN --json "$OUT/b1/train_torch.json"
step train_official 120 "$PY" tools/segnext_official_latency.py --variant t --device $DEVICE \
    --train-step --size 512 $OFFICIAL_TRAIN --json "$OUT/b1/train_official.json"
# At most 8 files come back: the variants of steps 3-7 and 11, the training steps of steps 8
# and 12, and the two profiles, one file each.
"$PY" - "$OUT/b1" <<'PYTHON'
import json, os, sys
folder = sys.argv[1]
# PyTorch's batch-16 process into the batch-1 one's cells.
path = os.path.join(folder, "torch_compile_16.json")
if os.path.exists(path) and os.path.exists(os.path.join(folder, "torch_compile.json")):
    with open(path) as file:
        batch16 = json.load(file)
    with open(os.path.join(folder, "torch_compile.json")) as file:
        batch1 = json.load(file)
    for key in ("cells", "cells_graph"):
        batch1.setdefault(key, {}).update(batch16.get(key) or {})
    with open(os.path.join(folder, "torch_compile.json"), "w") as file:
        json.dump(batch1, file, indent=1)
for target, names in (("variants.json", ("torch_compile", "torch_compile_16", "torch_export",
                                         "command_buffers",
                                         "nhwc", "constant_weights",
                                         "all_three", "square_taps", "torch_eager",
                                         "torch_eager_released")),
                      ("train_steps.json", ("train_gathered", "train_matrix", "train_torch",
                                            "train_official")),
                      ("profiles.json", ("profile_jax", "profile_torch"))):
    gathered = {}
    for name in names:
        path = os.path.join(folder, name + ".json")
        if os.path.exists(path):
            with open(path) as file:
                gathered[name] = json.load(file)
            os.remove(path)
    with open(os.path.join(folder, target), "w") as file:
        json.dump(gathered, file, indent=1)
PYTHON
# The table of it all (tools/gpu_measurements.py --report reads such a folder), printed so
# that the device call's output shows it, and kept beside the JSON.
"$PY" tools/gpu_measurements.py --report "$OUT/b1" > "$OUT/b1/report.txt" 2>> "$LOG"
cat "$OUT/b1/report.txt"
ls "$OUT/b1"
echo "done in $SECONDS s"
