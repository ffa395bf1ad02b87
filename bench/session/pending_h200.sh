#!/usr/bin/env bash
# What session 13 (2026-12-03) wrote for the H200 and could not run (its 30 device minutes
# went to the calls in bench/results/*-2026-12-03-{1222257,32d635b,a9207b1}*), in the order
# it matters; one device call each (every call <= 10 min), carry [".carry/debs"] after
# scripts/prepare-device-carry here:
#
#   bash bench/session/pending_h200.sh w4a8     # the row-group-tiled W4A8 layout (d7339a3)
#   bash bench/session/pending_h200.sh bench    # the V4.1 decode step with it
#   LIMIT=... bash bench/session/drafter_self_h200.sh   # see the note there: LIMIT < the call's limit_s
#
# w4a8:  the CUDA tests that read the device layout (test_moe_w4a8_cuda: kernel vs the CPU
#        recipe and the fp32 reference; test_gpu_w4a8_experts_cuda: device bytes = w4a8_pack,
#        V4 logits bitwise vs FP8 experts; test_gpu_stream_rss_cuda: the streamed pack in row
#        groups; test_golden_v41_fp8_cuda), then bench/moe_decode `check` and the table with
#        paths plain,fast (compare bench/results/moe-w4a8-ncu-h200-2026-12-03-32d635b.md: V4.1
#        T=64 1756 us, 61 % of copy). Also test_gemm_fp8_mma_cuda: the new kMmaSplit decode
#        GEMM (correctness, batch independence) and its report-only DecodeShapesBenchmark
#        (gemv / mma / mma-split at V4.1 shapes, M 1..64; gemm-fp8-h200-2026-12-03-c4618d7.md
#        has M = 64 wo_b at 183 us gemv / 203 us mma). If it wins, route 2 <= M <= 64 block 32
#        to it in fp8_auto_impl (and its test), then re-run the bench call. test_gemm_fp8_gemv_cuda
#        (its launch moved to cuda/launch_clustered) and test_gpu_dspark_cuda (fp8_round_trip now
#        rounds the drafter; the test's own copy is gone) changed without a run too.
# bench: bench_gpu_forward --model v41 --quick (compare gpu-v41-decode-sm90-h200-2026-12-03-
#        1222257.md: B=64 32K 29.4 ms, MoE 18.95 ms of it).
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-w4a8}
case "$what" in
  w4a8)
    T="test_moe_w4a8_cuda test_gpu_w4a8_experts_cuda test_gpu_stream_rss_cuda test_golden_v41_fp8_cuda test_gemm_fp8_mma_cuda test_gemm_fp8_gemv_cuda test_gpu_dspark_cuda"
    R=$(echo $T | sed 's/ /|/g')
    TARGETS="$T" CTEST_ARGS="-R ^($R)$" QUICK=1 timeout 380 scripts/gpu-check >/dev/null 2>&1
    echo "gpu-check rc $?"
    grep -E "tests passed|\*\*\*Failed|Passed|\[  FAILED" "${OUT:-gpu-check-out}/ctest.log" | head -20
    grep -E "^[0-9]+: \| (wq_|wkv|wo_|shared|shape)" "${OUT:-gpu-check-out}/ctest.log" | sed 's/^[0-9]*: //'
    bench/moe_decode/build.sh /tmp/bmoe 2>&1 | grep -iv warn | tail -3
    timeout 60 /tmp/bmoe check > "${OUT:-/tmp}/moe-check.txt" 2>&1; echo "check rc $?"; grep check "${OUT:-/tmp}/moe-check.txt"
    timeout 100 /tmp/bmoe paths=plain,fast | tee "${OUT:-/tmp}/moe-bench.txt"
    rm -f "${OUT:-gpu-check-out}"/cmake.log "${OUT:-gpu-check-out}"/gpu-check.log "${OUT:-gpu-check-out}"/bench.md
    ;;
  bench)
    # Also test_gemm_fp8_mma_cuda: kAuto now routes block-32 M 33..64 with K >= 4096 to
    # kMmaSplit (its policy test and DecodeShapesBenchmark, now with M 32 and 48).
    TARGETS="bench_gpu_forward test_gemm_fp8_mma_cuda" QUICK=1 CTEST_ARGS="-R ^test_gemm_fp8_mma_cuda$" timeout 300 scripts/gpu-check >/dev/null 2>&1
    echo "gpu-check rc $?"
    grep -E "tests passed|\*\*\*Failed|Passed|\[  FAILED" "${OUT:-gpu-check-out}/ctest.log" | head -20
    grep -E "^[0-9]+: \| (wq_|wkv|wo_|shared|shape)" "${OUT:-gpu-check-out}/ctest.log" | sed 's/^[0-9]*: //'
    lib=/tmp/deepinfer-carry/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    timeout 240 build-gpu/bench/gpu_forward/bench_gpu_forward --model v41 --quick --no-verify \
      --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" --out "${OUT:-.}/gpu-forward-v41.md" >/dev/null 2>&1
    echo "rc $?"; grep -E "^\| decode|^\| prefill" "${OUT:-.}/gpu-forward-v41.md" | head -30
    rm -f "${OUT:-gpu-check-out}"/cmake.log "${OUT:-gpu-check-out}"/gpu-check.log "${OUT:-gpu-check-out}"/bench.md
    ;;
  narrow)
    # Session 14: the narrow plain kernels (moe_w4a8_set_pass_max(8): one n8 tile, up kernel
    # in 126 registers, 2 CTAs per SM) against the default (pass 16, 1 CTA per SM for up):
    # check (both paths vs the CPU recipe) with pass=8, then the plain table both ways.
    bench/moe_decode/build.sh /tmp/bmoe 2>&1 | grep -iv warn | tail -3
    timeout 60 /tmp/bmoe check pass=8 > "${OUT:-/tmp}/moe-check-pass8.txt" 2>&1; echo "check rc $?"; grep check "${OUT:-/tmp}/moe-check-pass8.txt"
    timeout 60 /tmp/bmoe paths=plain 2>&1 | tee "${OUT:-/tmp}/moe-plain-pass16.txt"
    timeout 60 /tmp/bmoe paths=plain pass=8 2>&1 | tee "${OUT:-/tmp}/moe-plain-pass8.txt"
    ;;
  *) echo "pending_h200.sh: w4a8, bench or narrow, not $what" >&2; exit 2 ;;
esac
