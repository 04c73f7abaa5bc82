#!/bin/bash
# Lease 4 (issue 39, item 4): what ran on the lent GPU, from the repository's root, with
# the wheels of .whl (keras, mmsegmentation 1.2.2, mmengine, mmcv-lite 2.1.0 and their
# pure-Python needs) installed to /tmp/site. Writes to $OUT (the device tool's folder).
#   1. SegNeXt-T float32 on JAX three ways: sum of taps (the default), + the two-tap
#      gather resize, + the square kernels back on XLA's convolution (strip taps only);
#   2. the fastest of the three at batch 16 becomes the JAX setting of the rest:
#      tools/gpu_measurements.py --sequential for the official T graph column, S / L / B
#      float32, T bfloat16, Table 3's blocks on PyTorch, SegNeXt-T's PyTorch train step.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=2
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
mkdir -p "$OUT/t" "$OUT/rest"
cell() {  # cell NAME FLAGS...: SegNeXt-T float32 on JAX, one process
    local name=$1; shift
    local start=$SECONDS
    KERAS_BACKEND=jax timeout 170 python3 -m kctx.bench.segnext_gpu --cell t float32 \
        --batches 1 16 --repeats 30 --warmup 5 --batch-repeats 6 --batch-warmup 2 "$@" \
        --json "$OUT/t/$name.json" >> "$OUT/t/cells.log" 2>&1
    echo "$name: rc $? in $((SECONDS - start)) s"
}
cell taps
cell taps_gather --gather-resize
cell strips_gather --gather-resize --strip-taps
OPTIONS=$(python3 - "$OUT/t" <<'PY'
import json, pathlib, sys
flags = {"taps": "", "taps_gather": "gather-resize",
         "strips_gather": "gather-resize strip-taps"}
times = {}
for name in flags:
    path = pathlib.Path(sys.argv[1]) / f"{name}.json"
    if path.exists():
        cells = json.loads(path.read_text())["cells"]
        times[name] = cells["16"]["median_ms"]
        print(name, {b: c["median_ms"] for b, c in cells.items()}, file=sys.stderr)
best = min(times, key=times.get) if times else "taps"
print(f"--jax-options {flags[best]}" if flags[best] else "")
PY
)
echo "rest with: $OPTIONS"
timeout $((585 - SECONDS)) python3 tools/gpu_measurements.py --sequential --out "$OUT/rest" --profile none \
    --prepare-timeout 200 --run-timeout 90 $OPTIONS --select official/t/float32 \
    jax/l/float32 official/l/float32 jax/s/float32 official/s/float32 jax/t/bfloat16 \
    official/t/bfloat16 blocks/torch segmentation/torch jax/b/float32 official/b/float32
echo "done in $SECONDS s"
