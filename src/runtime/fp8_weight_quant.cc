// Host FP8 block quantisation of dense weights (contract in fp8_weight_quant.h).
#include "runtime/fp8_weight_quant.h"

#include <algorithm>
#include <cmath>

#include "base/dtype.h"
#include "base/error.h"
#include "ops/gemm/gemm.h"
#include "ops/quant/qat.h"

namespace deepinfer {

void quantize_fp8_blocks(float* w, int64_t n, int64_t k, uint8_t* codes, float* grid,
                         bool round_trip, int64_t block) {
  ICHECK(block > 0) << "quantize_fp8_blocks: block " << block;
  const int64_t n_nb = ceil_div64(n, block), n_kb = ceil_div64(k, block);
  for (int64_t bn = 0; bn < n_nb; ++bn) {
    for (int64_t bk = 0; bk < n_kb; ++bk) {
      const int64_t r0 = bn * block, r1 = std::min(n, r0 + block);
      const int64_t c0 = bk * block, c1 = std::min(k, c0 + block);
      float amax = 0.0f;
      bool finite = true;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          finite = finite && std::isfinite(w[r * k + c]);
          amax = std::max(amax, std::fabs(w[r * k + c]));
        }
      }
      CHECK(finite) << "quantize_fp8_blocks: a non-finite weight in the " << block << "x"
                                 << block << " block (" << bn << ", " << bk << ") of a [" << n << ", " << k
                                 << "] matrix";
      const float sc = amax > 0.0f ? pow2_scale(amax, kE4M3Max) : 1.0f;
      grid[bn * n_kb + bk] = sc;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const uint8_t code = f32_to_e4m3(w[r * k + c] / sc);
          codes[r * k + c] = code;
          if (round_trip) w[r * k + c] = e4m3_to_f32(code) * sc;
        }
      }
    }
  }
}

}  // namespace deepinfer
