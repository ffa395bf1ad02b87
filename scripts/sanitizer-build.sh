# Sourced by scripts/fuzz and scripts/sanitize: configures one clang build dir in which every
# library and test is compiled with AddressSanitizer + UndefinedBehaviorSanitizer and with
# libFuzzer's coverage instrumentation (-fsanitize=fuzzer-no-link; outside a fuzzer the
# sanitizer runtime's default coverage hooks do nothing). The unit tests link it with the
# sanitizers alone, the harnesses of fuzz/ add -fsanitize=fuzzer, so both share one compile.
# UBSan does not recover: every report is fatal (a crash to the fuzzer, a failure to ctest).
SAN_BUILD=${SAN_BUILD:-build-san}
SAN_JOBS=${JOBS:-$(nproc)}

san_configure() {
  local flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -fsanitize=fuzzer-no-link"
  cmake -S . -B "$SAN_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="${CC:-clang}" -DCMAKE_CXX_COMPILER="${CXX:-clang++}" \
    -DDEEPINFER_PYTHON=OFF -DDEEPINFER_CUDA=OFF -DDEEPINFER_TESTS=ON -DDEEPINFER_FUZZ=ON \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
}
