// linear: y[m, n] = sum_k x[m, k] * w[n, k]   (x row-major [M, K], w row-major [N, K] like a
// PyTorch Linear weight, y row-major [M, N]; all fp32).
//
// Two CPU implementations:
//  * kBlas: OpenBLAS sgemm (fast; its reduction order may depend on M).
//  * kFixedOrder: every output is reduced in an order fixed by K alone (8 interleaved
//    partial sums, combined pairwise), so a row's result is bitwise identical whatever
//    the batch around it. Used in batch-invariant mode.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace deepinfer {

enum class GemmMode { kBlas, kFixedOrder };

void linear_ref(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                GemmMode mode = GemmMode::kBlas);

// Tensor entry: x [M, K] F32, w [N, K] F32 -> returns [M, N] F32.
Tensor linear(const Tensor& x, const Tensor& w, GemmMode mode = GemmMode::kBlas);

}  // namespace deepinfer
