#!/bin/bash
# Standalone decode FP8 GEMM (gemv) check + timing on the H200 (run from the repo root; no CMake):
#   bench/gemm_fp8/gemv_run_h200.sh [check]   -> $OUT/gemm_fp8_gemv.txt (or /tmp if $OUT is unset)
# One nvcc command, then the checks (PASS/FAIL, exit 1 on a failure) and the table: gemv vs SIMT
# GB/s and % of copy bandwidth at V4.1-Flash / V4-Flash decode shapes, M = 1, 4, 16, 64.
set -e -o pipefail
OUT=${OUT:-/tmp}
BIN=/tmp/gemm_fp8_gemv_check_and_time
rm -f "$BIN"
SECONDS=0
nvcc -std=c++20 -O3 -arch=sm_90a -DDEEPINFER_CUDA -Isrc -o "$BIN" \
  bench/gemm_fp8/gemv_check_and_time.cu src/ops/gemm/gemm_fp8_gemv.cu \
  src/ops/gemm/gemm_fp8_simt.cu src/base/error.cc src/base/dtype.cc src/cuda/cuda_check.cc -lcublasLt \
  > "$OUT/gemm_fp8_gemv_build.txt" 2>&1 || { cat "$OUT/gemm_fp8_gemv_build.txt"; exit 3; }
echo "built in ${SECONDS}s"
{ nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader; git log --oneline -1; } \
  > "$OUT/gemm_fp8_gemv.txt" 2>/dev/null || true
timeout 240 "$BIN" "$@" 2>&1 | tee -a "$OUT/gemm_fp8_gemv.txt"
