# One device call: build, correctness (fast vs plain vs CPU recipe), the table, ncu of the GEMMs.
set -x
bench/moe_decode/build.sh /tmp/b 2>&1 | grep -iv warn | tail -5
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
/tmp/b check > $OUT/check.txt 2>&1; grep -E "check|copy" $OUT/check.txt
/tmp/b > $OUT/bench.txt 2>&1; cat $OUT/bench.txt
/tmp/b paths=plain,fast ts=1,4,64 split=2,2 > $OUT/bench_split22.txt 2>&1; cat $OUT/bench_split22.txt
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section WarpStateStats"
for T in 1 64; do
timeout 40 ncu $S -k regex:gemm_kernel -c 2 /tmp/b nocopy shapes=v4 ts=$T paths=fast reps=1 > $OUT/ncu_fast_t$T.txt 2>&1
done
grep -E "w4a8_gemm|Duration|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Issued Instruction" $OUT/ncu_*.txt | head -40
