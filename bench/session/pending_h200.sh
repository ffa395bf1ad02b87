#!/usr/bin/env bash
# What is written for the H200 and not yet run, one device call each (every call <= 10 min),
# carry [".carry/debs"] after scripts/prepare-device-carry here. Session 14 (2026-12-04) ran
# w4a8, bench and narrow (bench/results/*-2026-12-04-*); left for the next session:
#
#   (session 15 ran wo_a: grouped is the default now, bench/results/gpu-v41-wo-a-grouped-h200-2026-12-04-7bd3a57.md)
#   (session 15 also ran wgmma and wgmma16: bench/results/gemm-fp8-wgmma-*-2026-12-04-*.md)
#   (session 16 ran bench: gpu-v41-wgmma-f16-lean-h200-2026-12-04-0eac4af.md; the refactor into
#   sm90_wgmma.cuh passes, the lean loader is the default since: DEEPINFER_WGMMA_F16=measured opts out)
#   bash bench/gemm_fp8/ncu_wgmma_h200.sh        # why the wgmma decode tiles are latency-bound
#
# wgmma16: the V4.1 FP8 GPU golden with DEEPINFER_FP8_GEMM=wgmma-f16 first (the question:
#        does f16 wgmma sum in fp32, so the official golden passes where FP8 wgmma failed?),
#        then test_gemm_fp8_mma_cuda's Wgmma* / refusal tests (kWgmmaF16 at the 1e-9 bound),
#        then its decode and prefill tables. Short (a ~3 min call); then, if it passes,
#        bench_gpu_forward --model v41 --quick with DEEPINFER_FP8_GEMM=auto / wgmma-f16.
#
# wgmma: test_gemm_fp8_mma_cuda (Wgmma*: vs the reference at awkward sizes in both
#        configurations, V4.1 shapes vs SIMT at M 64 / 4096, rows independent of M; the
#        decode table gains a wgmma column, PrefillShapesBenchmark: M 4096 mma / cuBLASLt /
#        wgmma), the V4.1 FP8 GPU golden with DEEPINFER_FP8_GEMM=wgmma (every block-32 kAuto
#        GEMM on wgmma), then bench_gpu_forward --model v41 --quick without and with it.
#
# wo_a:  test_gemm_fp8_gemv_cuda (GroupedMatchesReferencePerGroup: every group vs
#        gemm_fp8_block_ref, row 0 alone bitwise; and the ungrouped tests, whose kernel gained
#        row strides and a group index), the V4.1 and V4 FP8 GPU goldens with
#        DEEPINFER_WO_A=grouped, then bench_gpu_forward --model v41 --quick without and with it
#        (compare gpu-v41-decode-h200-2026-12-04-6dc2348.md: B=64 32K 24.86 ms, attention 7.87 ms;
#        the 8 wo_a groups at M 64 were 8 x 28.7 us + 16 copies). If it wins and the goldens
#        pass, make it the default (gpu_attention.cc grouped_wo_a_enabled) and drop the switch.
# The modes run in session 14, kept for re-runs:
# w4a8:  the W4A8 CUDA tests + bench/moe_decode check and paths plain,fast; kMmaSplit's tests.
# bench: test_gemm_fp8_mma_cuda + bench_gpu_forward --model v41 --quick.
# narrow: bench/moe_decode check pass=8, then the plain table at pass 16 and 8.
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
    # Session 15's leftovers in one call (~5 min): test_gemm_fp8_mma_cuda (both wgmma kernels,
    # the lean loader, the kAuto policy with kWgmmaF16) and the V4.1 FP8 golden as built; the
    # golden again with every block-32 GEMM on kWgmmaF16 and its lean loader; then the V4.1
    # decode step with kAuto as committed and with the lean loader (compare
    # gpu-v41-wo-a-grouped-h200-2026-12-04-7bd3a57.md: B=64 32K 23.42 ms).
    TARGETS="bench_gpu_forward test_gemm_fp8_mma_cuda test_golden_v41_fp8_cuda" QUICK=1 \
      CTEST_ARGS="-R ^(test_gemm_fp8_mma_cuda|test_golden_v41_fp8_cuda)$" timeout 300 scripts/gpu-check >/dev/null 2>&1
    echo "gpu-check rc $?"
    grep -E "tests passed|\*\*\*Failed|Passed|\[  FAILED" "${OUT:-gpu-check-out}/ctest.log" | head -20
    grep -E "^[0-9]+: \| (wq_|wkv|wo_|shared|shape)" "${OUT:-gpu-check-out}/ctest.log" | sed 's/^[0-9]*: //'
    (cd build-gpu && DEEPINFER_FP8_GEMM=wgmma-f16 DEEPINFER_WGMMA_F16=lean timeout 60 ctest -R "^test_golden_v41_fp8_cuda$" 2>&1 | grep -E "Test +#|tests passed")
    lib=/tmp/deepinfer-carry/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    for mode in measured lean; do
      DEEPINFER_WGMMA_F16=$mode timeout 110 build-gpu/bench/gpu_forward/bench_gpu_forward --model v41 --quick --no-verify \
        --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" --out "${OUT:-.}/gpu-forward-v41-$mode.md" >/dev/null 2>&1
      echo "loader $mode rc $?"; grep -E "^\| (decode|prefill)" "${OUT:-.}/gpu-forward-v41-$mode.md" | grep -v graph | cut -d'|' -f2,3,11,12 | head -16
    done
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
  wo_a)
    TARGETS="bench_gpu_forward test_gemm_fp8_gemv_cuda test_golden_v41_fp8_cuda test_golden_cuda" \
      QUICK=1 CTEST_ARGS="-R ^test_gemm_fp8_gemv_cuda$" timeout 300 scripts/gpu-check >/dev/null 2>&1
    echo "gpu-check rc $?"
    grep -E "tests passed|\*\*\*Failed|Passed|\[  FAILED" "${OUT:-gpu-check-out}/ctest.log" | head -20
    (cd build-gpu && DEEPINFER_WO_A=grouped timeout 120 ctest -R "^(test_golden_v41_fp8_cuda|test_golden_cuda)$" 2>&1 | grep -E "Test +#|tests passed")
    lib=/tmp/deepinfer-carry/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    for mode in loop grouped; do
      DEEPINFER_WO_A=$mode timeout 100 build-gpu/bench/gpu_forward/bench_gpu_forward --model v41 --quick --no-verify \
        --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" --out "${OUT:-.}/gpu-forward-v41-$mode.md" >/dev/null 2>&1
      echo "wo_a $mode rc $?"; grep -E "^\| decode" "${OUT:-.}/gpu-forward-v41-$mode.md" | grep -v graph | head -12
    done
    rm -f "${OUT:-gpu-check-out}"/cmake.log "${OUT:-gpu-check-out}"/gpu-check.log "${OUT:-gpu-check-out}"/bench.md
    ;;
  wgmma)
    TARGETS="bench_gpu_forward test_gemm_fp8_mma_cuda test_golden_v41_fp8_cuda" \
      QUICK=1 CTEST_ARGS="-R ^test_gemm_fp8_mma_cuda$" timeout 330 scripts/gpu-check >/dev/null 2>&1
    echo "gpu-check rc $?"
    grep -E "tests passed|\*\*\*Failed|Passed|\[  FAILED|Failure|error:" "${OUT:-gpu-check-out}/ctest.log" | head -20
    grep -E "^[0-9]+: \| (wq_|wkv|wo_|shared|shape)" "${OUT:-gpu-check-out}/ctest.log" | sed 's/^[0-9]*: //'
    grep -E "wgmma .*nmse" "${OUT:-gpu-check-out}/ctest.log" | sed 's/^[0-9]*: //' | sort -t' ' -k2 | awk '{print}' | tail -8
    (cd build-gpu && DEEPINFER_FP8_GEMM=wgmma timeout 60 ctest -R "^test_golden_v41_fp8_cuda$" 2>&1 | grep -E "Test +#|tests passed")
    lib=/tmp/deepinfer-carry/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    for mode in auto wgmma; do
      DEEPINFER_FP8_GEMM=$mode timeout 110 build-gpu/bench/gpu_forward/bench_gpu_forward --model v41 --quick --no-verify \
        --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" --out "${OUT:-.}/gpu-forward-v41-$mode.md" >/dev/null 2>&1
      echo "fp8 $mode rc $?"; grep -E "^\| (decode|prefill)" "${OUT:-.}/gpu-forward-v41-$mode.md" | grep -v graph | cut -d'|' -f2,3,11,12 | head -16
    done
    rm -f "${OUT:-gpu-check-out}"/cmake.log "${OUT:-gpu-check-out}"/gpu-check.log "${OUT:-gpu-check-out}"/bench.md
    ;;
  wgmma16)
    TARGETS="test_gemm_fp8_mma_cuda test_golden_v41_fp8_cuda" QUICK=1 CTEST_ARGS="-R ^none$" \
      timeout 150 scripts/gpu-check >/dev/null 2>&1
    echo "build rc $?"; grep -E "error" "${OUT:-gpu-check-out}/build.log" | head -5
    T=$(find build-gpu -name test_gemm_fp8_mma_cuda -type f | head -1)
    G=$(find build-gpu -name test_golden_v41_fp8_cuda -type f | head -1)
    lib=/tmp/deepinfer-carry/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    DEEPINFER_FP8_GEMM=wgmma-f16 timeout 40 ./$G 2>&1 | grep -E "argmax|FAILED|OK \]|PASSED" | head -24
    timeout 60 ./$T --gtest_filter='*Wgmma*:*Refuses*' 2>&1 | grep -E "Failure|FAILED|OK \]|wgmma-f16 V4.1" | head -30
    timeout 40 ./$T --gtest_filter='*ShapesBenchmark*' 2>&1 | grep -E "^\| "
    rm -f "${OUT:-gpu-check-out}"/cmake.log "${OUT:-gpu-check-out}"/gpu-check.log "${OUT:-gpu-check-out}"/bench.md
    ;;
  *) echo "pending_h200.sh: w4a8, bench, narrow, wo_a, wgmma or wgmma16, not $what" >&2; exit 2 ;;
esac
