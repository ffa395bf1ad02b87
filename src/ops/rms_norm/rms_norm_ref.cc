#include "ops/rms_norm/rms_norm.h"

#include <cmath>

#include "base/parallel.h"

namespace deepinfer {

float rms_inv(const float* x, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + eps));
}

void rms_norm_ref(const float* x, const float* weight, int64_t n_rows, int64_t n, int64_t stride,
                  float eps, float* y) {
  parallel_for(n_rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * stride;
      float* yr = y + r * stride;
      const float inv = rms_inv(xr, n, eps);
      if (weight != nullptr) {
        for (int64_t i = 0; i < n; ++i) yr[i] = weight[i] * (xr[i] * inv);
      } else {
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv;
      }
    }
  }, 8);
}

}  // namespace deepinfer
