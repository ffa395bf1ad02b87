#!/bin/bash
# Builds bench/attention_decode/sparse_decode_bench standalone with nvcc (sm_90a). Usage:
#   bench/attention_decode/build.sh OUT_BINARY [SRC_ROOT] [OLD_KERNEL.cu]
# SRC_ROOT (default src): where the headers and the host sources come from (a snapshot of a
# commit keeps the build independent of uncommitted edits); the kernel is always this tree's
# src/ops/kv_cache/sm90_paged_decode.cu. OLD_KERNEL.cu: an older sm90_paged_decode.cu with its
# entry points renamed old_sm90_paged_decode_* (then the bench times both).
set -euo pipefail
out=$1
root=${2:-src}
old=${3:-}
flags="-std=c++20 -O2 -arch=sm_90a -DDEEPINFER_CUDA -I$root"
srcs="bench/attention_decode/sparse_decode_bench.cu src/ops/kv_cache/sm90_paged_decode.cu"
for f in ops/kv_cache/kv_cache_ref.cc ops/attention/sparse_attention_ref.cc ops/quant/qat_ref.cc base/dtype.cc \
         base/error.cc base/logging.cc base/parallel.cc cuda/cuda_check.cc; do
  srcs="$srcs $root/$f"
done
if [ -n "$old" ]; then
  srcs="$srcs $old"
  flags="$flags -DDEEPINFER_OLD_DECODE"
fi
objs=""
mkdir -p "$out.objs"
pids=""
for s in $srcs; do
  o="$out.objs/$(echo "$s" | tr '/.' '__').o"
  if [[ $s == *.cu ]]; then
    nvcc $flags -c "$s" -o "$o" &
  else
    g++ -std=c++20 -O2 -fopenmp -DDEEPINFER_CUDA -I"$root" -I/usr/local/cuda/include -c "$s" -o "$o" &
  fi
  pids="$pids $!"
  objs="$objs $o"
done
for p in $pids; do wait $p; done
nvcc -arch=sm_90a $objs -o "$out" -Xcompiler -fopenmp -lcublasLt -lcublas
