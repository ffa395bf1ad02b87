#!/bin/bash
# One device call (repository root of the GPU machine, .carry/ carried): builds the bench
# standalone against the snapshot .carry/snap/src (git archive of the commit) with the old
# kernel .carry/old_sm90_paged_decode.cu, runs it (correctness, then timings), runs the FlashMLA
# anchor (.carry/anchors) at the same problem, and, with PROFILE=1, ncu of both kernels at B=256.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
t0=$(date +%s)
bench/attention_decode/build.sh /tmp/sdb .carry/snap/src .carry/old_sm90_paged_decode.cu > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
/tmp/sdb 2>&1 | tee "$OUT/bench.txt"
echo "bench done $(( $(date +%s) - t0 )) s"
mkdir -p /tmp/fmla && tar -xzf .carry/anchors/flashmla-sm90-trimmed.tgz -C /tmp/fmla && \
  FLASHMLA_SRC=/tmp/fmla ANCHOR_CTX=4096 ANCHOR_LISTS=2 ANCHOR_BUDGET_S=${ANCHOR_BUDGET_S:-90} \
  timeout 150 python3 .carry/anchors/anchor_flashmla.py > "$OUT/anchor.txt" 2>&1
tail -25 "$OUT/anchor.txt"
echo "anchor done $(( $(date +%s) - t0 )) s"
if [ "${PROFILE:-0}" = 1 ] && command -v ncu > /dev/null; then
  for skip in 198 231; do  # B=256: the new kernel's first launch, then the old one's
    timeout 45 ncu -k regex:sm90_paged_decode_kernel --launch-skip $skip --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
      /tmp/sdb --time > "$OUT/ncu_$skip.txt" 2>&1
    grep -E "sm90_paged|Throughput|Duration|Stall|Warp Cycles|Achieved|Registers|L1/TEX Hit|L2 Hit|DRAM" "$OUT/ncu_$skip.txt" | head -40
  done
fi
echo "all done $(( $(date +%s) - t0 )) s"
