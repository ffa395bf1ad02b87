#!/usr/bin/env bash
# ncu of the W4A8 decode kernels (issue 14: W4A8 reads experts at 50-61 % of copy; the
# kernel's bound was not known). Builds bench/moe_decode standalone, prints its plain table
# (V4.1 shapes) and then ncu's per-kernel sections for the up and down kernels at T = 1, 16,
# 64 and 256 (--clock-control none, H200.md). Run from the repo root on the device:
#   bash bench/session/w4a8_ncu.sh          # writes $OUT/w4a8-ncu.txt
set -uo pipefail
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp}
bench/moe_decode/build.sh /tmp/bmoe 2>&1 | grep -iv warn | tail -3
/tmp/bmoe shapes=v41 paths=plain > "$O/w4a8-ncu.txt" 2>&1; cat "$O/w4a8-ncu.txt"
for T in ${NCU_TS:-1 64 256}; do
  timeout 55 ncu --clock-control none -k regex:w4a8_gemm_kernel --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    --section ComputeWorkloadAnalysis --section InstructionStats \
    /tmp/bmoe nocopy shapes=v41 paths=plain ts=$T reps=1 > /tmp/ncu-T$T.txt 2>&1
  echo "ncu T=$T rc $?" | tee -a "$O/w4a8-ncu.txt"; cat /tmp/ncu-T$T.txt >> "$O/w4a8-ncu.txt"
  grep -E "w4a8_gemm_kernel|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Stall|Issued Ipc|No Eligible|Eligible Warps|Grid Size|Waves" /tmp/ncu-T$T.txt | head -60
done
