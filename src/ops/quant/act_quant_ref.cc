#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "ops/quant/act_quant.h"
#include "ops/quant/qat.h"

namespace deepinfer {
namespace {

template <typename Load>
void act_quant_impl(Load load, int64_t m, int64_t k, int64_t block, uint8_t* q, float* scale,
                    ScaleLayout layout) {
  CHECK(block > 0) << "act_quant: block " << block;
  const int64_t n_kb = (k + block - 1) / block;
  for (int64_t row = 0; row < m; ++row) {
    for (int64_t kb = 0; kb < n_kb; ++kb) {
      const int64_t k0 = kb * block, k1 = std::min(k, k0 + block);
      float amax = 1e-4f;
      for (int64_t i = k0; i < k1; ++i) amax = std::max(amax, std::fabs(load(row * k + i)));
      const float s = pow2_scale(amax, kE4M3Max);
      for (int64_t i = k0; i < k1; ++i) {
        const float v = std::min(kE4M3Max, std::max(-kE4M3Max, load(row * k + i) / s));
        q[row * k + i] = f32_to_e4m3(v);
      }
      scale[layout == ScaleLayout::kRowMajor ? row * n_kb + kb : kb * m + row] = s;
    }
  }
}

}  // namespace

void act_quant_ref(const float* x, int64_t m, int64_t k, int64_t block, uint8_t* q, float* scale,
                   ScaleLayout layout) {
  act_quant_impl([x](int64_t i) { return x[i]; }, m, k, block, q, scale, layout);
}

void act_quant_bf16_ref(const uint16_t* x, int64_t m, int64_t k, int64_t block, uint8_t* q,
                        float* scale, ScaleLayout layout) {
  act_quant_impl([x](int64_t i) { return bf16_to_f32(x[i]); }, m, k, block, q, scale, layout);
}

}  // namespace deepinfer
