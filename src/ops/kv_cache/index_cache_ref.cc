#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/dtype.h"
#include "base/error.h"
#include "ops/kv_cache/cache_ref_loops.h"
#include "ops/kv_cache/index_cache.h"
#include "ops/quant/qat.h"

namespace deepinfer {

void IndexCacheLayout::validate() const {
  CHECK(head_dim > 0 && head_dim % 32 == 0 && head_dim <= 256)
      << "index cache: head_dim " << head_dim << " must be a positive multiple of 32, at most 256";
  CHECK(block_size > 0) << "index cache: block_size " << block_size << " must be positive";
}

void index_store_ref(const IndexCacheLayout& layout, const float* keys, int64_t n,
                     int64_t row_stride, const int32_t* slots, uint8_t* cache, int64_t n_blocks) {
  layout.validate();
  const int64_t d = layout.head_dim;
  cache_ref::for_each_store("index cache", layout, slots, n, cache, n_blocks,
                            [&](int64_t i, uint8_t* data) {
    const float* k = keys + i * row_stride;
    if (layout.fp4()) {  // fp4_roundtrip's per-32 quantiser, keeping the codes
      uint8_t* scales = cache + layout.scale_offset(slots[i]);
      for (int64_t g = 0; g < d / 32; ++g) {
        const float* kg = k + g * 32;
        float amax = kE2M1Max * std::ldexp(1.0f, -126);
        for (int64_t c = 0; c < 32; ++c) amax = std::max(amax, std::fabs(kg[c]));
        const float s = pow2_scale(amax, kE2M1Max);
        uint32_t bits;
        std::memcpy(&bits, &s, 4);
        scales[g] = static_cast<uint8_t>((bits >> 23) & 0xff);
        for (int64_t c = 0; c < 32; c += 2) {
          const float q0 = std::min(kE2M1Max, std::max(-kE2M1Max, kg[c] / s));
          const float q1 = std::min(kE2M1Max, std::max(-kE2M1Max, kg[c + 1] / s));
          data[(g * 32 + c) / 2] = static_cast<uint8_t>(f32_to_e2m1(q0) | (f32_to_e2m1(q1) << 4));
        }
      }
      return;
    }
    float amax = 1e-4f;
    for (int64_t c = 0; c < d; ++c) amax = std::max(amax, std::fabs(k[c]));
    const float s = pow2_scale(amax, kE4M3Max);
    for (int64_t c = 0; c < d; ++c) data[c] = f32_to_e4m3(std::min(kE4M3Max, std::max(-kE4M3Max, k[c] / s)));
    std::memcpy(cache + layout.scale_offset(slots[i]), &s, 4);
  });
}

void index_load_ref(const IndexCacheLayout& layout, const uint8_t* cache, int64_t n_blocks,
                    const int32_t* slots, int64_t n, float* out) {
  layout.validate();
  const int64_t d = layout.head_dim;
  cache_ref::for_each_load("index cache", layout, cache, n_blocks, slots, n, out,
                           [&](float* y, int32_t slot, const uint8_t* data) {
                             if (layout.fp4()) {
                               const uint8_t* sc = cache + layout.scale_offset(slot);
                               for (int64_t c = 0; c < d; ++c) {
                                 const uint8_t code = (data[c / 2] >> (c % 2 * 4)) & 0xf;
                                 y[c] = e2m1_to_f32(code) * e8m0_to_f32(sc[c / 32]);
                               }
                               return;
                             }
                             float s;
                             std::memcpy(&s, cache + layout.scale_offset(slot), 4);
                             for (int64_t c = 0; c < d; ++c) y[c] = e4m3_to_f32(data[c]) * s;
                           });
}

}  // namespace deepinfer
