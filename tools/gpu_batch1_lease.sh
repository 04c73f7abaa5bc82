#!/bin/bash
# The next GPU lease's measurements for issue 39 (prepared after lease 4, not yet run):
# why kctx's JAX SegNeXt at batch 1 is 0.75-1.25x the official model replayed as a CUDA
# graph while batch 16 is 0.45-0.54x (docs/performance.md, "Now (lease 4)").
#   1. SegNeXt-T float32 as kctx runs it, profiled (jax_profile: busy time by kernel);
#   2. the same with XLA's command buffers (CUDA graphs) for every kind of command, from one
#      command up: whether launch overhead is the batch-1 gap (the flags are XLA's of 2025-26;
#      an XLA that refuses them fails this process only);
#   3. the square kernels as taps again at batch 1 with more repeats (lease 4's were noisy);
#   4. SegNeXt-T's JAX training step with the gathered resize (the default; its gradient is
#      a scatter-add) and with jax.image.resize's matrices;
#   5. issue 41's generation benchmark (kctx.bench generation --compiled, jax.jit);
#   6. the official model, eager and as a CUDA graph, on the same machine.
# Run from the repository's root on the device machine with .whl carried (see
# results/gpu_h200/lease4/run.sh for the wheels); writes to $OUT (at most 8 files back).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=2
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
mkdir -p "$OUT/b1"
cell() {  # cell NAME [FLAGS...]: SegNeXt-T float32 on JAX in one process
    local name=$1; shift
    local start=$SECONDS
    KERAS_BACKEND=jax timeout 170 python3 -m kctx.bench.segnext_gpu --cell t float32 \
        --batches 1 16 --repeats 100 --warmup 10 --batch-repeats 6 --batch-warmup 2 "$@" \
        --json "$OUT/b1/$name.json" >> "$OUT/b1/cells.log" 2>&1
    echo "$name: rc $? in $((SECONDS - start)) s"
}
cell default --profile
XLA_FLAGS="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUDNN,CUSTOM_CALL \
--xla_gpu_graph_min_graph_size=1" cell command_buffers
cell square_taps --square-taps
train() {  # train NAME PYTHON-PRELUDE: SegNeXt-T's training step on JAX, batch 16 of 512²
    local start=$SECONDS
    KERAS_BACKEND=jax timeout 200 python3 -c "$2
import sys, segmentation.bench as b
sys.exit(b.main(sys.argv[1:]))" --train-step --config segnext_ade20k --batch-size 16 \
        --repeats 10 --warmup 3 --json "$OUT/b1/train_$1.json" >> "$OUT/b1/cells.log" 2>&1
    echo "train $1: rc $? in $((SECONDS - start)) s"
}
train gathered ""
train matrix "import kctx.ops.resize as r; r.GATHER_PLATFORMS = ()"
# Issue 41's generation benchmark on the GPU: tokens/s and state against the length, every
# mixer, the Hamburger blocked (L = 64), each token's step one jax.jit program.
start=$SECONDS
KERAS_BACKEND=jax timeout 150 python3 -m kctx.bench generation --compiled --ham-block-size 64 \
    --lengths 1024 2048 4096 8192 16384 --json "$OUT/b1/generation.json" >> "$OUT/b1/cells.log" 2>&1
echo "generation: rc $? in $((SECONDS - start)) s"
timeout $((590 - SECONDS)) python3 tools/segnext_official_latency.py --variant t \
    --device cuda --dtype float32 --batches 1 16 --repeats 100 --warmup 10 \
    --batch-repeats 6 --batch-warmup 2 --no-macs --cuda-graph --json "$OUT/b1/official.json"
echo "done in $SECONDS s"
