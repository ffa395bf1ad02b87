#!/bin/sh
# Packs tests/tools/model_logits with the shared libraries a bare GPU machine may lack (OpenBLAS
# and its Fortran runtime) into .carry/train_tiny/ (git-ignored), for a device run of
# tools/train_tiny.py --check-engine-after --engine-bin .carry/train_tiny/model_logits
# (the script puts <bin dir>/lib on LD_LIBRARY_PATH). Usage: tools/pack_model_logits.sh [BUILD_DIR]
set -eu
build=${1:-build-g}
out=.carry/train_tiny
mkdir -p "$out/lib"
cp "$build/tests/tools/model_logits" "$out/"
for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
  path=$(ldd "$out/model_logits" | awk -v l="$lib" '$1 == l { print $3 }')
  [ -n "$path" ] && cp -L "$path" "$out/lib/$lib"
done
ls -la "$out" "$out/lib"
