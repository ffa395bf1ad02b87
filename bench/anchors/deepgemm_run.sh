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
# With -Bsymbolic alone it still crashed (2026-12-02): frame 0 was a wrong virtual call from
# std::collate<char>::transform (regex_traits::transform_primary), i.e. a locale facet that is
# not the one this library's code expects. Two more things are tried, in this order:
#  (1) triton not imported (deep_gemm imports its legacy Triton kernels inside a try: blocking
#      the module skips them), in case libtriton's copy of the C++ runtime is what gets bound;
#  (2) deep_jit's NVCC version parse without std::regex (a plain string search), rebuilt.
BLOCK_TRITON="import sys; sys.modules['triton'] = None"
cd .carry/dg
timeout 240 python3 -c "import anchor_deepgemm as a; a.build_deepgemm()"
PRE=""
echo "=== first JIT call"
if ! timeout 120 python3 /tmp/dg_first_call.py; then
  echo "=== first JIT call, triton blocked"
  if timeout 120 python3 -c "$BLOCK_TRITON; exec(open('/tmp/dg_first_call.py').read())"; then
    PRE="$BLOCK_TRITON"
  else
    echo "=== first JIT call, NVCC version parsed without std::regex (rebuilt)"
    python3 - "$SRC" <<'PY'
import sys, glob
p = sys.argv[1] + '/third-party/deep_jit/include/deep_jit/backend/cuda/backend.hpp'
s = open(p).read()
a = s.index('std::smatch match;')
b = s.index('const int minor', a)
b = s.index('\n', b) + 1
s = s[:a] + ('const auto at = version.find("release ");\n'
             '        DJ_HOST_ASSERT(at != std::string::npos, "failed to parse NVCC version from:\\n{}", version);\n'
             '        const int major = std::stoi(version.substr(at + 8));\n'
             '        const int minor = std::stoi(version.substr(version.find(\'.\', at + 8) + 1));\n') + s[b:]
open(p, 'w').write(s)
print('patched', p)
PY
    rm -f "$SRC"/deep_gemm/_C*.so; rm -rf "$SRC"/build
    timeout 240 python3 -c "import anchor_deepgemm as a; a.build_deepgemm()"
    if ! timeout 120 python3 /tmp/dg_first_call.py; then
      echo "first call failed (rc $?); backtrace:"
      timeout 150 cuda-gdb -batch -ex run -ex "bt 14" --args python3 /tmp/dg_first_call.py 2>&1 | grep -E "^#|signal" | head -20
      exit 1
    fi
  fi
fi
echo "=== working variant: ${PRE:-as built}"
echo "=== anchor"
if [ -n "$PRE" ]; then
  OUT=$OUT python3 -c "$PRE; import sys; sys.argv = ['anchor_deepgemm.py']; exec(open('anchor_deepgemm.py').read())"
else
  OUT=$OUT python3 anchor_deepgemm.py
fi
