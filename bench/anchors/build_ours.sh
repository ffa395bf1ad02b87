#!/usr/bin/env bash
# Builds bench/anchors/ours_at_anchor_shapes standalone with nvcc (sm_90a) from the few src/
# files its kernels need. Usage: bench/anchors/build_ours.sh OUT_BINARY [JOBS]
set -euo pipefail
out=$1
jobs=${2:-8}
flags="-std=c++20 -O3 -arch=sm_90a -DDEEPINFER_CUDA -Isrc"
cus="bench/anchors/ours_at_anchor_shapes.cu src/ops/gemm/gemm.cu src/ops/gemm/gemm_fp8_mma.cu
     src/ops/gemm/gemm_fp8_simt.cu src/ops/gemm/gemm_fp8_gemv.cu src/ops/moe/grouped_gemm_fp8.cu src/ops/moe/moe_align.cu
     src/ops/moe/moe_experts_fp8.cu src/ops/quant/act_quant.cu src/ops/kv_cache/index_cache.cu
     src/ops/kv_cache/index_cache_mma.cu"
ccs="src/ops/kv_cache/index_cache_ref.cc src/ops/quant/qat_ref.cc src/base/dtype.cc src/base/error.cc
     src/base/logging.cc src/base/parallel.cc src/tensor/tensor.cc src/cuda/cuda_check.cc
     src/cuda/cublaslt_handle.cc src/cuda/device_arena.cc src/cuda/device_buffer.cc
     src/cuda/device_context.cc src/cuda/device_tensor.cc src/cuda/stream.cc"
mkdir -p "$out.objs"
objs=""
for s in $cus $ccs; do
  o="$out.objs/$(echo "$s" | tr '/.' '__').o"
  objs="$objs $o"
  [ -f "$o" ] && [ "$o" -nt "$s" ] && continue
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  if [[ $s == *.cu ]]; then
    nvcc $flags -c "$s" -o "$o" &
  else
    g++ -std=c++20 -O2 -fopenmp -DDEEPINFER_CUDA -Isrc -I/usr/local/cuda/include -c "$s" -o "$o" &
  fi
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || exit 1; done
nvcc -arch=sm_90a $objs -o "$out" -Xcompiler -fopenmp -lcublasLt -lcublas
echo "built $out"
