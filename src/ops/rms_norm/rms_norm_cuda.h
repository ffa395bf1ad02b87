// CUDA entry of rms_norm (contract in rms_norm.h: per row of width n, rows `stride` floats
// apart, y = w * x / sqrt(mean(x^2) + eps), fp32; null weight = unweighted; x may alias y).
// Device pointers; runs on `stream`; never allocates or synchronises; graph capturable.
// Sums of squares are fp32 tree reductions (the reference accumulates in double).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

void rms_norm_cuda(cudaStream_t stream, const float* x, const float* weight, int64_t n_rows,
                   int64_t n, int64_t stride, float eps, float* y);

}  // namespace deepinfer
