#!/usr/bin/env bash
# What session 12 (2026-12-03, no device time) wrote for the H200 and could not run, in the
# order it matters; one device call each (every call <= 10 min):
#
#   scripts/prepare-device-carry            # here, first: .carry/debs (PCRE2, OpenBLAS)
#   device run, carry [".carry/debs"]:  bash bench/session/pending_h200.sh tests
#   device run, carry [".carry/debs"]:  bash bench/session/pending_h200.sh bench
#
# tests: the CUDA tests of the unrun code: sm90 decode for V4.1's formats (test_paged_decode_cuda;
#        the tiny goldens have head_dim 64, so only this op test and the V4.1-shape bench reach
#        the kernel), the window pool's own block size (test_golden_v41_cuda, window 8 beside
#        blocks of 16), the DSpark FP8 test edited in session 11, and the V4 goldens (their
#        decode shares the kernel's file). Prints the failures and the accuracy rows.
# bench: bench_gpu_forward --model v41 --quick (the V4.1 decode step with the new kernel:
#        compare with bench/results/gpu-forward-v41-shapes-h200-2026-12-03-7ed80ca.md, B=64 32K
#        35.7 ms, attention core 6.92 ms), then test_paged_decode_cuda's AnchorBenchmark (V4
#        and V4.1 formats, sm90 vs SIMT vs mma).
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-tests}
case "$what" in
  tests)
    TARGETS="test_paged_decode_cuda test_golden_v41_cuda test_golden_cuda test_gpu_dspark_cuda" \
    CTEST_ARGS="-R ^(test_paged_decode_cuda|test_golden_v41_cuda|test_gpu_dspark_cuda|test_golden_cuda)$" \
    QUICK=1 scripts/gpu-check
    grep -E "\[  FAILED|nmse .*bound|window blocks of 8|min cos" "${OUT:-gpu-check-out}/ctest.log" | head -80
    ;;
  bench)
    TARGETS="bench_gpu_forward test_paged_decode_cuda" CTEST_ARGS="-R ^test_paged_decode_cuda$" \
    QUICK=1 scripts/gpu-check >/dev/null 2>&1
    grep -E "tests passed|\[  FAILED" "${OUT:-gpu-check-out}/ctest.log"
    lib=/tmp/deepinfer-carry/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    c=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    # The window pool's own block size: the default (= the KV block size, 64) and 8.
    for wb in ${WINDOW_BLOCKS:-0 8}; do
      timeout 200 build-gpu/bench/gpu_forward/bench_gpu_forward --model v41 --quick --no-verify \
        --kv-window-block "$wb" --commit "$c" --out "${OUT:-.}/gpu-forward-v41-wb$wb.md" >/dev/null 2>&1
      echo "rc $? window block $wb"; grep -E "^\| *(1|16|64|256) *\||Window pool|decode" "${OUT:-.}/gpu-forward-v41-wb$wb.md" | head -30
    done
    grep -A 12 "^V4\|^| ctx" "${OUT:-gpu-check-out}/ctest.log" | sed 's/^[0-9]*: //' | head -40
    ;;
  *) echo "pending_h200.sh: tests or bench, not $what" >&2; exit 2 ;;
esac
