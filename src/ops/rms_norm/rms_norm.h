// rms_norm: per row of width n, y = w * x / sqrt(mean(x^2) + eps)   (fp32 in, fp32 out).
// A null weight means the unweighted variant (V4's per-head q norm and the mHC mix
// normaliser). x and y may alias. Rows are `stride` floats apart.
#pragma once

#include <cstdint>

namespace deepinfer {

void rms_norm_ref(const float* x, const float* weight, int64_t n_rows, int64_t n, int64_t stride,
                  float eps, float* y);

// 1 / sqrt(mean(x^2) + eps) of one row, accumulated in double.
float rms_inv(const float* x, int64_t n, float eps);

}  // namespace deepinfer
