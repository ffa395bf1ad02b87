#!/usr/bin/env bash
# Engine benchmarks on the GPU machine, from the repository root, with a deepinfer binary
# built with -DDEEPINFER_CUDA=ON (BIN, default build-cuda/deepinfer):
#   COMMIT=<sha> bash bench/engine/run_gpu.sh
# 1. `deepinfer bench` concurrency sweep on V4-Flash shapes truncated to 4 layers
#    (bench/configs/v4-flash-4l, FP8 dummy weights generated on the device), with the
#    overlap on/off idle-time table at the largest concurrency; writes
#    $OUT/engine-v4flash4l.{md,csv,png} (the PNG needs matplotlib; else plot the CSV with
#    tools/plot_bench.py afterwards).
# 2. The same idle-time table for the built-in tiny model on the GPU (fp32), where the
#    forward is short and host-side scheduling matters most: $OUT/engine-tiny-cuda.md.
cd "$(dirname "$0")/../.."
B=${BIN:-build-cuda/deepinfer}
OUT=${OUT:-.}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "commit ${COMMIT:-unknown}"
timeout "${LIMIT1:-400}" "$B" bench --device cuda --dummy-weights --model bench/configs/v4-flash-4l \
  --weight-format fp8 --max-model-len 2048 --input-len 512 --output-len 64 --num-prompts 64 \
  --concurrency ${CONCURRENCY:-1,8,32,64} --out "$OUT/engine-v4flash4l" ${ARGS:-}
echo "rc=$?"
timeout "${LIMIT2:-150}" "$B" bench --device cuda --max-model-len 1024 --input-len 64 --output-len 64 \
  --num-prompts 32 --concurrency 32 --out "$OUT/engine-tiny-cuda"
echo "rc=$?"
# 3. (GRAPHS=1) the V4-Flash idle table again with decode steps replayed as CUDA graphs.
if [ -n "${GRAPHS:-}" ]; then
  timeout "${LIMIT3:-300}" "$B" bench --device cuda --dummy-weights --model bench/configs/v4-flash-4l \
    --weight-format fp8 --cuda-graphs --max-model-len 2048 --input-len 512 --output-len 64 \
    --num-prompts 64 --concurrency 64 --out "$OUT/engine-v4flash4l-graphs"
  echo "rc=$?"
fi
