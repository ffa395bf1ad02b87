// Internal to ops/gemm: the block-scaled FP8 kernels' launchers on raw device pointers, shared
// by gemm.cu (dispatch) and bench/gemm_fp8 (standalone check + timing). The contract is
// gemm.h's gemm_fp8_block_cuda (xq [M, K] e4m3, sx [n_kb, M], wq [N, K] e4m3, sw [n_nb, ld],
// ld = fp8_weight_scale_ld(K, block), K % 16 == 0, block 128 or 32); the caller validated it.
// They run on `stream`, never allocate or synchronise (graph capturable).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::gemm_detail {

// SIMT kernel (gemm_fp8_simt.cu): one warp per output column, any M; a row's arithmetic is
// independent of M (batch invariant).
void fp8_block_simt(cudaStream_t stream, const void* xq, const float* sx, const void* wq,
                    const float* sw, int64_t m, int64_t n, int64_t k, void* y, bool y_bf16,
                    int64_t block);

// Tensor-core kernel (gemm_fp8_mma.cu): mma.sync m16n8k32 e4m3 (sm_89+), CTA tiles of
// 128 x 128 (or 64 x 256 for M <= 64), per-K-block promotion into fp32 accumulators (exactly the
// reference's per-block sums up to fp32 order inside a block). Any M, N; for prefill-sized M.
// Needs 16-byte aligned xq, wq.
void fp8_block_mma(cudaStream_t stream, const void* xq, const float* sx, const void* wq,
                   const float* sw, int64_t m, int64_t n, int64_t k, void* y, bool y_bf16,
                   int64_t block);

// Decode variant of the tensor-core kernel (gemm_fp8_mma.cu): block 32, M <= kFp8MmaDecodeMaxM
// (gemm.h), 64 x 64 CTAs whose warps split each stage's K blocks, and a cluster split of K
// chosen from N and K (never M); the partial sums are added in one fixed order
// (deterministic, a row's result independent of M). Needs 16-byte aligned xq, wq.
void fp8_block_mma_decode(cudaStream_t stream, const void* xq, const float* sx, const void* wq,
                          const float* sw, int64_t m, int64_t n, int64_t k, void* y, bool y_bf16);

// Native FP8 tensor-core kernel (gemm_fp8_wgmma.cu, sm_90a wgmma): block 32 or 128, any M;
// M <= kFp8MmaDecodeMaxM at block 32 runs the decode configuration (64 x 64 CTAs, K split over
// warpgroups and a cluster, chosen from N and K). Needs 16-byte aligned xq, wq.
void fp8_block_wgmma(cudaStream_t stream, const void* xq, const float* sx, const void* wq,
                     const float* sw, int64_t m, int64_t n, int64_t k, void* y, bool y_bf16,
                     int64_t block);

// The same tiles on f16 wgmma (gemm_fp8_wgmma_f16.cu): e4m3 codes converted to f16 on chip,
// fp32 sums (the mma.sync kernels' arithmetic); block 32 only. Needs 16-byte aligned xq, wq.
void fp8_block_wgmma_f16(cudaStream_t stream, const void* xq, const float* sx, const void* wq,
                         const float* sw, int64_t m, int64_t n, int64_t k, void* y, bool y_bf16);
// Its tiles' loader: true (default; DEEPINFER_WGMMA_F16=measured sets false) the lean one
// (per-thread sources computed once, rows past M / N never loaded nor converted), false the
// first (measured) one. Same bits either way; process-wide, for tests and A/B runs.
void fp8_wgmma_f16_set_lean(bool on);

}  // namespace deepinfer::gemm_detail
