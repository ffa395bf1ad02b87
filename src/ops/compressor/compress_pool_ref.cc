#include <cmath>

#include "ops/compressor/compress_pool.h"

namespace deepinfer {

void compress_pool_ref(const float* const* a, const float* const* z, int64_t n_slots,
                       int64_t width, float* out) {
  for (int64_t ch = 0; ch < width; ++ch) {
    float mx = -INFINITY;
    for (int64_t s = 0; s < n_slots; ++s) mx = std::max(mx, z[s][ch]);
    float denom = 0.0f, acc = 0.0f;
    for (int64_t s = 0; s < n_slots; ++s) {
      const float w = std::exp(z[s][ch] - mx);  // exp(-inf) = 0 for empty slots
      denom += w;
      if (w != 0.0f) acc += w * a[s][ch];
    }
    out[ch] = acc / denom;
  }
}

}  // namespace deepinfer
