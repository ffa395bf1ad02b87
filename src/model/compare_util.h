// Helpers of the tests and benchmarks that compare two backends' logits (GPU vs CPU Model):
// reproducible random prompt tokens and the cosine of two logit rows. Header-only; pure
// functions, thread-safe.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace deepinfer {

// n tokens in [2, vocab) (ids 0 and 1 left out), from std::mt19937(seed): the same sequence
// on every platform for a seed. vocab > 2.
inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> t(n);
  for (auto& v : t) v = static_cast<int32_t>(2 + gen() % static_cast<uint32_t>(vocab - 2));
  return t;
}

// a . b / (|a| |b|) over n floats, accumulated in double in index order (1e-300 keeps two zero
// rows finite).
inline double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb + 1e-300);
}

}  // namespace deepinfer
