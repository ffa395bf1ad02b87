#!/bin/bash
# Standalone FP8 block-scaled GEMM check + timing on the H200 (run from the repo root; no CMake):
#   bench/gemm_fp8/run_h200.sh [check]   -> $OUT/gemm_fp8.txt (or /tmp if $OUT is unset)
# One nvcc command (~30 s), then the checks (PASS/FAIL, exit 1 on a failure) and the table:
# block 32 SIMT vs mma, block 128 cuBLASLt vs mma, at V4.1-Flash shapes, M = 4096 and 64.
set -e -o pipefail
OUT=${OUT:-/tmp}
BIN=/tmp/gemm_fp8_check_and_time
rm -f "$BIN"
SECONDS=0
nvcc -std=c++20 -O3 -arch=sm_90a -DDEEPINFER_CUDA -Isrc -o "$BIN" \
  bench/gemm_fp8/check_and_time.cu src/ops/gemm/gemm_fp8_mma.cu src/ops/gemm/gemm_fp8_simt.cu \
  src/base/error.cc src/cuda/cuda_check.cc -lcublasLt > "$OUT/gemm_fp8_build.txt" 2>&1 ||
  { cat "$OUT/gemm_fp8_build.txt"; exit 3; }
echo "built in ${SECONDS}s"
{ nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader; git log --oneline -1; } \
  > "$OUT/gemm_fp8.txt" 2>/dev/null || true
timeout 300 "$BIN" "$@" 2>&1 | tee -a "$OUT/gemm_fp8.txt"
