// Helpers shared by the op tests: fresh random inputs (the seed is printed so a failure
// can be replayed with DEEPINFER_TEST_SEED), error norms, block-FP8 weight generation.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "ops/quant/qat.h"

namespace deepinfer::test {

inline std::mt19937_64 fresh_rng() {
  uint64_t seed = std::random_device{}();
  if (const char* env = std::getenv("DEEPINFER_TEST_SEED")) seed = std::strtoull(env, nullptr, 10);
  std::printf("[seed %llu]\n", static_cast<unsigned long long>(seed));
  return std::mt19937_64(seed);
}

inline std::vector<float> randn(std::mt19937_64& rng, int64_t n, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

// ||out - ref||^2 / ||ref||^2 in double; NaN/inf anywhere in out gives +inf.
inline double nmse(const float* out, const float* ref, int64_t n) {
  double err = 0.0, norm = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    const double d = static_cast<double>(out[i]) - ref[i];
    err += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return norm > 0 ? err / norm : err;
}

// Block-FP8 weight like the checkpoints' (MODEL_SPEC §B.1): per 128x128 block a power-of-two
// scale from the block's amax, codes e4m3(w / s). q [n, k], s [ceil(n/128), ceil(k/128)].
inline void quantize_weight_blocks(const std::vector<float>& w, int64_t n, int64_t k,
                                   std::vector<uint8_t>* q, std::vector<float>* s) {
  const int64_t b = 128, n_nb = (n + b - 1) / b, n_kb = (k + b - 1) / b;
  q->assign(n * k, 0);
  s->assign(n_nb * n_kb, 0.0f);
  for (int64_t nb = 0; nb < n_nb; ++nb) {
    for (int64_t kb = 0; kb < n_kb; ++kb) {
      float amax = 1e-4f;
      for (int64_t i = nb * b; i < std::min(n, nb * b + b); ++i)
        for (int64_t j = kb * b; j < std::min(k, kb * b + b); ++j)
          amax = std::max(amax, std::fabs(w[i * k + j]));
      const float scale = pow2_scale(amax, kE4M3Max);
      (*s)[nb * n_kb + kb] = scale;
      for (int64_t i = nb * b; i < std::min(n, nb * b + b); ++i)
        for (int64_t j = kb * b; j < std::min(k, kb * b + b); ++j)
          (*q)[i * k + j] = f32_to_e4m3(w[i * k + j] / scale);
    }
  }
}

}  // namespace deepinfer::test
