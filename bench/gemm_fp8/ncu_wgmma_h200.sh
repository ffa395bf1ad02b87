#!/bin/bash
# ncu of the wgmma tiles (next to mma-split) at V4.1 wo_b (N 5120, K 8192): M 1 and 64 (decode
# tiles; wgmma-f16 with each decode loader: wgmma-f16-lean is the lean one) and 4096 (prefill tiles):
# launch stats, occupancy, warp states (stall reasons), scheduler and memory sections of the
# 4th call (the first ones pay the attribute set-up). Run from the repo root on the H200:
#   bash bench/gemm_fp8/ncu_wgmma_h200.sh      -> $OUT/ncu-<kernel>-M<m>.txt (~2-3 min)
set -uo pipefail
OUT=${OUT:-/tmp}
BIN=/tmp/wgmma_profile
nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -DDEEPINFER_CUDA -Isrc -o "$BIN" bench/gemm_fp8/wgmma_profile.cu \
  src/ops/gemm/gemm_fp8_wgmma.cu src/ops/gemm/gemm_fp8_wgmma_f16.cu src/ops/gemm/gemm_fp8_mma.cu \
  src/base/error.cc src/cuda/cuda_check.cc -lcublasLt > "$OUT/wgmma_profile_build.txt" 2>&1 ||
  { tail -20 "$OUT/wgmma_profile_build.txt"; exit 3; }
for impl in wgmma-f16 wgmma-f16-lean wgmma mma-split; do
  for m in 1 64 4096; do
    [ $impl = mma-split ] && [ $m = 4096 ] && continue
    [ $impl = wgmma-f16-lean ] && [ $m = 4096 ] && continue
    "$BIN" $impl $m 5120 8192 5 | tail -1
    timeout 100 ncu --launch-skip 3 --launch-count 1 --section LaunchStats --section Occupancy \
      --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
      --section SpeedOfLight "$BIN" $impl $m 5120 8192 5 > "$OUT/ncu-$impl-M$m.txt" 2>&1
    grep -E "Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Stall|No Eligible|Block Limit" \
      "$OUT/ncu-$impl-M$m.txt" | head -20
  done
done
