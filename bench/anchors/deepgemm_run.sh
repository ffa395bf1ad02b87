#!/usr/bin/env bash
# Issue 22: builds DeepGEMM (PyPI deepinfer-gemm 2.8.2) on the GPU machine so that its JIT runtime
# works, then runs ../shared/anchors/anchor_deepgemm.py (ANCHOR_ONLY / ANCHOR_BUDGET_S pass through).
# From the repository root, with .carry/dg holding deepgemm.txz (the sdist, xz-packed) and
# anchor_deepgemm.py:   ANCHOR_ONLY='contig|mqa' bash bench/anchors/deepgemm_run.sh
#
# Why the link flag: the first JIT call segfaulted inside std::regex compilation (std::__detail::
# _Compiler::_M_alternative, compiling "release (\d+)\.(\d+)" in deep_jit's CUDA::get_compiler_info;
# bench/anchors/deepgemm_backtrace.sh prints the backtrace). The extension's std::regex template
# instantiations are weak symbols that the dynamic linker may bind to copies exported by
# libraries loaded earlier into the process (libtorch and friends, built by another compiler),
# the known pytorch/pytorch#50779 / #49460 family. -Wl,-Bsymbolic binds the extension's own
# references to its own definitions. Output: $OUT/deepgemm-run.log and the anchor's report.
set -uo pipefail
OUT=${OUT:-/tmp}
exec > >(tee "$OUT/deepgemm-run.log") 2>&1
mkdir -p /tmp/dg && tar -xJf .carry/dg/deepgemm.txz -C /tmp/dg
SRC=$(dirname "$(ls /tmp/dg/*/setup.py | head -1)")
export DG_SRC=$SRC DG_JIT_CACHE_DIR=/tmp/dg_jit_cache HOME=${HOME:-/root}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} TORCH_CUDA_ARCH_LIST=9.0
export LDFLAGS="${LDFLAGS:-} -Wl,-Bsymbolic"
cat > /tmp/dg_first_call.py <<PY
import os, sys
sys.path.insert(0, os.environ['DG_SRC'])
import torch
torch.cuda.init(); torch.zeros(1, device='cuda').sum().item()
import deep_gemm
print('get_num_sms', deep_gemm.get_num_sms(), flush=True)
PY
cd .carry/dg
timeout 240 python3 -c "import anchor_deepgemm as a; a.build_deepgemm()"
echo "=== first JIT call"
if ! timeout 120 python3 /tmp/dg_first_call.py; then
  echo "first call failed (rc $?); backtrace:"
  timeout 150 cuda-gdb -batch -ex run -ex "bt 30" --args python3 /tmp/dg_first_call.py 2>&1 | grep -E "^#|signal" | head -40
  exit 1
fi
echo "=== anchor"
OUT=$OUT python3 anchor_deepgemm.py
