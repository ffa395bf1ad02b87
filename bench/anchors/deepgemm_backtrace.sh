#!/usr/bin/env bash
# Issue 22: why DeepGEMM (PyPI deepinfer-gemm 2.8.2) segfaults at its first JIT call on the H200.
# Run from the repository root on the GPU machine with .carry/dg holding
# deepgemm.txz (the sdist as pip downloads it, xz-packed) and anchor_deepgemm.py (../shared/anchors):
#   bash bench/anchors/deepgemm_backtrace.sh
# Builds the extension in place (the anchor script's build_deepgemm), then runs the first JIT call
# (get_num_sms) in a fresh python under cuda-gdb (the image has no gdb; cuda-gdb debugs host code
# too) and prints the native backtrace. Output: $OUT/deepgemm-backtrace.log.
set -uo pipefail
OUT=${OUT:-/tmp}
LOG=$OUT/deepgemm-backtrace.log
exec > >(tee "$LOG") 2>&1
mkdir -p /tmp/dg && tar -xJf .carry/dg/deepgemm.txz -C /tmp/dg
SRC=$(dirname "$(ls /tmp/dg/*/setup.py | head -1)")
export DG_SRC=$SRC DG_JIT_CACHE_DIR=/tmp/dg_jit_cache HOME=${HOME:-/root}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} TORCH_CUDA_ARCH_LIST=9.0
echo "HOME=$HOME CUDA_HOME=$CUDA_HOME nvcc=$(command -v nvcc) libdw: $(ls /usr/lib/x86_64-linux-gnu/libdw.so.1 2>&1)"
cd .carry/dg && timeout 300 python3 -c "
import anchor_deepgemm as a
a.build_deepgemm()
print('built; get_tc_util =', a.dg.get_tc_util())
" ; cd - >/dev/null
cat > /tmp/dg_first_call.py <<PY
import os, sys
sys.path.insert(0, os.environ['DG_SRC'])
import torch
torch.cuda.init(); torch.zeros(1, device='cuda').sum().item()
import deep_gemm
print('imported', deep_gemm.__file__, flush=True)
print('get_num_sms', deep_gemm.get_num_sms(), flush=True)
PY
echo "=== plain run"
timeout 120 python3 -X faulthandler /tmp/dg_first_call.py; echo "rc=$?"
echo "=== under cuda-gdb"
timeout 200 cuda-gdb -batch -ex run -ex bt -ex "info sharedlibrary" --args python3 /tmp/dg_first_call.py 2>&1 | tail -120
echo "=== with DG_JIT_DEBUG=1"
DG_JIT_DEBUG=1 timeout 120 python3 /tmp/dg_first_call.py; echo "rc=$?"
