#!/usr/bin/env bash
# Runs the prebuilt bench_gpu_forward on the device machine from the repository root:
#   COMMIT=<sha> bash bench/gpu_forward/run.sh
# The binary is built here (cmake -DDEEPINFER_CUDA=ON, target bench_gpu_forward, in
# build-gpubench) and carried with .carry (Debian OpenBLAS / gfortran packages, unpacked into
# a private prefix, never into /). Output: $OUT/gpu-bench.md (the table last) and the log.
cd "$(dirname "$0")/../.."
P=/tmp/carry; L=$P/usr/lib/x86_64-linux-gnu
for f in .carry/debs/*.deb; do dpkg -x "$f" "$P"; done
export LD_LIBRARY_PATH=$L:$L/openblas-pthread:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
B=${BIN:-build-gpubench/bench/gpu_forward/bench_gpu_forward}
timeout "${LIMIT:-230}" "$B" --commit "${COMMIT:-unknown}" --out "${OUT:-.}/gpu-bench.md" ${ARGS:-}
echo "rc=$?"
