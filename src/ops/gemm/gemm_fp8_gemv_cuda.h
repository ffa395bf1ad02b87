// Decode-sized block-scaled FP8 GEMM (ops/gemm/gemm_fp8_gemv.cu): y[M, N] = x[M, K] · w[N, K]^T
// for 1 <= M <= kFp8GemvMaxM, bandwidth-bound (every weight byte read once per call).
// Contract, inputs and layouts are gemm.h's gemm_fp8_block_cuda: xq [M, K] e4m3, sx [n_kb, M]
// (block-major), wq [N, K] e4m3, sw [n_nb, fp8_weight_scale_ld(K, block)], block 128 or 32,
// K % 16 == 0 (a last partial K block is allowed), xq and wq 16-byte aligned, y [M, N] BF16 or
// F32. Runs on `stream`, never allocates or synchronises (CUDA-graph capturable).
//
// Arithmetic: per K block an fp32 partial sum (tensor cores, e4m3 products exact), then
// acc += part * sx[m, kb] * sw[n / b, kb] in K-block order, as gemm_fp8_block_ref; for small N
// the K range is split over the CTAs of one thread-block cluster (split count from N and K only)
// and the split sums are added in rank order. Deterministic, and a row's result does not depend
// on M or on the other rows (batch invariant).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "base/dtype.h"

namespace deepinfer {

constexpr int64_t kFp8GemvMaxM = 64;

void gemm_fp8_gemv_cuda(cudaStream_t stream, const void* xq, const float* sx_block_major,
                        const void* wq, const float* sw_padded, int64_t m, int64_t n, int64_t k,
                        void* y, DType y_dtype, int64_t block);

// The number of CTAs the K range is split over (1..8) for this weight; depends on N, K only.
int fp8_gemv_split(int64_t n, int64_t k);

}  // namespace deepinfer
