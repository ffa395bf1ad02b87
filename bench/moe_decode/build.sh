#!/bin/bash
# Standalone build of the MoE decode bench (run from the repo root, on the GPU machine):
#   bench/moe_decode/build.sh [binary=/tmp/bench_moe_decode]
# Compiles the few sources it needs in parallel (no CMake), then links.
set -e
BIN=${1:-/tmp/bench_moe_decode}
OBJ=$(mktemp -d)
SRCS="bench/moe_decode/bench_moe_decode.cc src/ops/moe/sm90_moe_w4a8_decode.cu
  src/ops/moe/moe_align.cu src/ops/moe/moe_experts_fp8.cu src/ops/moe/grouped_gemm_fp8.cu
  src/ops/moe/moe_w4a8_ref.cc src/ops/quant/act_quant.cu src/ops/quant/act_quant_ref.cc
  src/ops/quant/qat_ref.cc src/base/error.cc src/base/dtype.cc src/base/logging.cc
  src/base/parallel.cc src/cuda/cuda_check.cc"
pids=()
for f in $SRCS; do
  nvcc -O3 -std=c++20 -arch=sm_90a -DDEEPINFER_CUDA -Isrc -Xcompiler -fopenmp -c "$f" \
    -o "$OBJ/$(echo "$f" | tr / _).o" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
nvcc -arch=sm_90a -Xcompiler -fopenmp -o "$BIN" "$OBJ"/*.o -lcublasLt
