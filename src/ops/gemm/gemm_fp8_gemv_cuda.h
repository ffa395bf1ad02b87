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
constexpr int kFp8GemvMaxGroups = 16;  // gemm_fp8_gemv_grouped_cuda

void gemm_fp8_gemv_cuda(cudaStream_t stream, const void* xq, const float* sx_block_major,
                        const void* wq, const float* sw_padded, int64_t m, int64_t n, int64_t k,
                        void* y, DType y_dtype, int64_t block);

// G GEMMs of one shape in one launch, as a grouped projection needs (V4 / V4.1's wo_a: group g
// maps its slice of the attention output to its o_lora_rank values): xq [M, G K] with group g
// in columns [g K, (g + 1) K) and sx [G * n_kb, M] (block-major over the whole row: group g's
// K blocks are the run starting at g n_kb M; K must be whole blocks), wq[g] [N, K] with
// sw_padded[g], y [M, G N] with group g in columns [g N, (g + 1) N). 1 <= G <=
// kFp8GemvMaxGroups. Group g's columns are gemm_fp8_gemv_cuda's arithmetic on its operands,
// except that the K split comes from (G N, K): the same products, possibly another order of
// the split sums. A row's result does not depend on M.
void gemm_fp8_gemv_grouped_cuda(cudaStream_t stream, const void* xq, const float* sx_block_major,
                                int groups, const void* const* wq, const float* const* sw_padded,
                                int64_t m, int64_t n, int64_t k, void* y, DType y_dtype,
                                int64_t block);

// The number of CTAs the K range is split over (1..8) for this weight; depends on N, K only.
int fp8_gemv_split(int64_t n, int64_t k);

}  // namespace deepinfer
