#!/usr/bin/env bash
# Session 13, device call A: the model-level CUDA tests with the window pool's new default
# (blocks of 8), then the W4A8 ncu (bench/session/w4a8_ncu.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
T="test_golden_cuda test_golden_v41_cuda test_golden_v41_fp8_cuda test_gpu_model_cuda test_engine_cuda test_graph_cuda test_engine_prefix_cuda test_engine_speculative_cuda test_gpu_prefix_state_cuda test_gpu_mtp_cuda test_gpu_dspark_cuda test_gpu_engram_cuda test_kv_block_pool_cuda test_paged_decode_cuda"
R=$(echo $T | sed 's/ /|/g')
TARGETS="$T" CTEST_ARGS="-R ^($R)$" QUICK=1 timeout 360 scripts/gpu-check > /dev/null 2>&1
echo "gpu-check rc $?"
grep -E "tests passed|\[  FAILED|\*\*\*Failed|Passed|window blocks of 8" "${OUT:-gpu-check-out}/ctest.log" | head -40
timeout 210 bash bench/session/w4a8_ncu.sh
rm -f "${OUT:-gpu-check-out}"/cmake.log "${OUT:-gpu-check-out}"/gpu-check.log "${OUT:-gpu-check-out}"/bench.md
