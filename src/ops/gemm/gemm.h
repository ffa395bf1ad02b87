// gemm: y[M, N] = x[M, K] · w[N, K]^T   (x row-major, w row-major like a PyTorch Linear
// weight, y row-major). Two formats:
//
//  * BF16 x BF16 -> BF16 or F32, fp32 accumulation.
//  * FP8 e4m3 block-scaled (MODEL_SPEC §B.4, DeepSeek's recipe) with block size b = 128
//    (V4) or 32 (V4.1): x quantised per 1 x b block along K (ops/quant/act_quant.h), w per
//    b x b block, fp32 scales:
//      y[m, n] = Σ_kb (Σ_{k ∈ kb} xq[m, k] · wq[n, k]) · sx[m, kb] · sw[n / b, kb]
//    fp32 accumulation, BF16 or F32 output. K must be a multiple of 16 (cuBLASLt's FP8
//    alignment, and the SIMT kernel's 16-byte chunks, which then never straddle a block);
//    M and N are free; a last partial K block is allowed. The block size is an argument
//    (default kFp8GemmBlock) of every entry and helper here, so one value describes a weight.
//
// Scale layouts (n_kb = ceil(K / b), n_nb = ceil(N / b)):
//  * CPU reference: sx [M, n_kb] row-major; sw [n_nb, n_kb] row-major (the checkpoint grid).
//  * CUDA (what cuBLASLt's VEC128_32F / BLK128x128_32F modes read):
//      sx [n_kb, M]      : the scales of one K block for all rows are contiguous
//                          (act_quant_cuda with ScaleLayout::kBlockMajor writes this);
//      sw [n_nb, ld]     : ld = fp8_weight_scale_ld(K, b) = round_up(n_kb, 4), padding unused
//                          (expand_weight_scales_* build it at load).
//
// CUDA entries run on ctx.stream() (cuBLASLt with ctx's workspace), never allocate or
// synchronise, and are CUDA-graph capturable. Plans (descriptors + chosen algorithm) are
// cached per host thread and shape. Shapes are validated at the Tensor entries; the raw
// entries ICHECK only what cuBLASLt needs. Empty problems (M, N or K == 0) return early
// (K == 0 writes zeros).
#pragma once

#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "tensor/tensor.h"

#ifdef DEEPINFER_CUDA
#include "cuda/device_context.h"
#endif

namespace deepinfer {

constexpr int64_t kFp8GemmBlock = 128;  // V4's b; V4.1's is 32 (kFp8GemmBlockV41)
constexpr int64_t kFp8GemmBlockV41 = 32;
inline bool fp8_gemm_block_ok(int64_t block) { return block == 128 || block == 32; }

inline int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }
// Leading dimension (in floats) of the CUDA weight-scale grid.
inline int64_t fp8_weight_scale_ld(int64_t k, int64_t block = kFp8GemmBlock) {
  return (ceil_div64(k, block) + 3) / 4 * 4;
}
// Floats of the CUDA weight-scale grid [ceil(n / block), fp8_weight_scale_ld(k, block)].
inline int64_t fp8_weight_scale_count(int64_t n, int64_t k, int64_t block = kFp8GemmBlock) {
  return ceil_div64(n, block) * fp8_weight_scale_ld(k, block);
}

// ---- CPU references (fp32 accumulation of exact products; bf16/e4m3 inputs as raw bits) ----

void gemm_bf16_ref(const uint16_t* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                   float* y);
// block: the b above (any positive value here; the CUDA entries take 128 or 32).
void gemm_fp8_block_ref(const uint8_t* xq, const float* sx, const uint8_t* wq, const float* sw,
                        int64_t m, int64_t n, int64_t k, float* y,
                        int64_t block = kFp8GemmBlock);

// Weight scales for the CUDA layout [n_nb, fp8_weight_scale_ld(K, block)] (padding 1.0f).
// From the checkpoint's UE8M0 grid [n_nb, n_kb] (exact: powers of two) or an fp32 grid.
std::vector<float> expand_weight_scales_ue8m0(const uint8_t* s, int64_t n, int64_t k,
                                              int64_t block = kFp8GemmBlock);
std::vector<float> expand_weight_scales_f32(const float* s, int64_t n, int64_t k,
                                            int64_t block = kFp8GemmBlock);

#ifdef DEEPINFER_CUDA

// FP8 implementations. cuBLASLt 13.1 on sm_90 has no block-scaled algorithm when M is not a
// multiple of 4 (seen on the H200: M = 1, 5 refused) and none for block 32. Our kernels
// (ops/gemm/gemm_fp8_kernels.h) need 16-byte aligned xq, wq and K % 16 == 0 (as cuBLASLt does):
//  * kSimt: one warp per output column, fp32 FMAs, weights read once per 8 rows; every M,
//    the fast one for decode-sized M; a row's arithmetic never depends on M (batch-invariant
//    mode uses it for every M: runtime/device_linear.cc).
//  * kMma: tensor cores (mma.sync m16n8k32 e4m3), per-K-block promotion in fp32 (the
//    reference's per-block sums up to summation order); every M, for prefill-sized M.
//  * kGemv: decode-sized M (1..kFp8GemvMaxM), every weight byte read once per call
//    (ops/gemm/gemm_fp8_gemv_cuda.h); a row's result does not depend on M either.
//  * kMmaSplit: the tensor-core kernel's decode variant (block 32, M <= kFp8MmaDecodeMaxM):
//    64 x 64 CTAs, K split over each CTA's warps and over a cluster (split from N and K, never
//    M; one fixed order of the partial sums), so narrow projections fill the SMs.
//  * kCublasLt: block 128 only (block 32 is refused: kUnsupported).
// kAuto (fp8_auto_impl; measured on the H200 2026-12-03, bench/results/gemm-fp8-h200-2026-12-03-*):
//  * block 128: cuBLASLt where it has an algorithm (M a multiple of 4); else kSimt for M = 1
//    (faster than kGemv on wo_b / wq_a, slower on wq_b), kGemv for 2 <= M <= 64, kMma beyond
//    (178-222 TFLOP/s at M = 4096, where SIMT gives 7-9).
//  * block 32: kSimt at M = 1; kGemv up to M = 32 (1.3-5.6x SIMT), except N >= kFp8MmaWideN
//    with M > 16, where kMma wins (wq_b N 32768: 42 us vs 123 us at M = 64); for
//    kFp8DecodeTileMinM < M <= 64, kWgmmaF16 (N < kFp8MmaWideN; H200 2026-12-04,
//    gemm-fp8-wgmma-f16-h200-2026-12-04-6488545.md, us at M = 64 against the kernel kAuto ran
//    before: wo_b 101 vs mma-split 119, wq_a 24 vs 35, shared w1 39 vs 49, shared w2 37 vs gemv
//    51, wo_a group 21 vs 29; wkv 18.6 vs 17.6 is the one loss; at M = 32 gemv still wins on
//    wq_a / wo_a / shared w2), kMma for N >= kFp8MmaWideN; kMma past 64 (20-23x SIMT at
//    M = 4096, 150-190 TFLOP/s; kWgmmaF16's tiles give 110-141 there).
// The batch-invariant forward asks for kSimt explicitly (runtime/device_linear.cc).
//  * kWgmma: native FP8 tensor cores (wgmma, sm_90a; ops/gemm/gemm_fp8_wgmma.cu), block 32 and
//    128, any M: 128 x 128 tiles past M 64, 64 x 64 tiles with a K split (warpgroups + cluster,
//    from N and K only) up to M 64. Not in kAuto: Hopper's FP8 wgmma adds a block's 32 products
//    with fewer than fp32's bits (measured on the H200 2026-12-04: NMSE 1.1e-8 against kSimt,
//    where the other kernels give ~1e-13), enough to fail the V4.1 official-numerics GPU golden
//    (min cosine 0.38-0.83 against the CPU). Faster than kMma at prefill (234 vs 189 TFLOP/s,
//    block 32, M 4096), but still 5x behind cuBLASLt's block-128 FP8.
//  * kWgmmaF16: kWgmma's tiles on f16 wgmma (ops/gemm/gemm_fp8_wgmma_f16.cu): e4m3 codes
//    converted to f16 on chip, fp32 sums (NMSE 2e-14..1e-13 against kSimt; the V4.1 FP8
//    golden passes with every block-32 GEMM on it); block 32 only.
enum class Fp8GemmImpl { kAuto, kCublasLt, kSimt, kMma, kGemv, kMmaSplit, kWgmma, kWgmmaF16 };
constexpr int64_t kFp8MmaWideN = 16384;
constexpr int64_t kFp8MmaDecodeMaxM = 64;  // kMmaSplit, the wgmma decode tiles: one 64-row tile
constexpr int64_t kFp8DecodeTileMinM = 32;  // kAuto: kWgmmaF16 for M above this (block 32)

// Raw entries; all pointers are device pointers. y_dtype is BF16 or F32.
void gemm_bf16_cuda(cuda::DeviceContext& ctx, const void* x, const void* w, int64_t m, int64_t n,
                    int64_t k, void* y, DType y_dtype);
// FP32 x FP32 -> FP32 with full fp32 arithmetic (CUBLAS_COMPUTE_32F, never TF32): for the
// small fp32 projections of the official forward (mHC mixes, router, head).
void gemm_f32_cuda(cuda::DeviceContext& ctx, const float* x, const float* w, int64_t m, int64_t n,
                   int64_t k, float* y);
void gemm_fp8_block_cuda(cuda::DeviceContext& ctx, const void* xq, const float* sx_block_major,
                         const void* wq, const float* sw_padded, int64_t m, int64_t n, int64_t k,
                         void* y, DType y_dtype, Fp8GemmImpl impl = Fp8GemmImpl::kAuto,
                         int64_t block = kFp8GemmBlock);
// The kernel kAuto runs for this problem (never kAuto); cublaslt_ok: whether cuBLASLt has an
// algorithm (fp8_block_cublaslt_supported), consulted for block 128 only.
Fp8GemmImpl fp8_auto_impl(int64_t m, int64_t n, int64_t k, int64_t block, bool cublaslt_ok);
const char* fp8_impl_name(Fp8GemmImpl impl);  // "auto", "cublaslt", "simt", "mma", "gemv", "mma-split", "wgmma", "wgmma-f16"
// Whether cuBLASLt has a block-scaled FP8 algorithm for this problem (cached per thread).
bool fp8_block_cublaslt_supported(cuda::DeviceContext& ctx, int64_t m, int64_t n, int64_t k,
                                  DType y_dtype);

// Tensor entries (device tensors): x [M, K] BF16, w [N, K] BF16 -> new [M, N] y_dtype.
Tensor gemm_bf16(cuda::DeviceContext& ctx, const Tensor& x, const Tensor& w,
                 DType y_dtype = DType::BF16);
// xq [M, K] F8_E4M3, sx [n_kb, M] F32, wq [N, K] F8_E4M3, sw [n_nb, ld] F32.
Tensor gemm_fp8_block(cuda::DeviceContext& ctx, const Tensor& xq, const Tensor& sx,
                      const Tensor& wq, const Tensor& sw, DType y_dtype = DType::BF16,
                      int64_t block = kFp8GemmBlock);

#endif  // DEEPINFER_CUDA

}  // namespace deepinfer
