// DeviceLinear: one projection y[m, n] = x[m, k] · W[n, k]^T of GpuModel, in either weight
// format, so the forward is written once:
//  * fp32:  w32 [n, k] row-major; fp32 GEMM (cuBLASLt CUBLAS_COMPUTE_32F, never TF32).
//  * FP8:   q [n, k] e4m3 codes with block x block scales (block = 128 for V4, 32 for V4.1,
//           MODEL_SPEC §B.4 b; one value per model, fp8_block_for(cfg) in GpuModel)
//           s [ceil(n/block), fp8_weight_scale_ld(k, block)] (the CUDA layout of
//           ops/gemm/gemm.h), fp32 holding UE8M0 / power-of-two values:
//           2^ceil(log2(amax / 448)) per block from quantize_fp8_blocks (fp8_weight_quant.h),
//           which reproduces checkpoint block-FP8 weights bit-exactly, or the checkpoint's own
//           e8m0 scales (routed experts, expert_loader.h); only GpuModel's device dummy
//           weights (no host weights) use one constant scale per matrix that is not. The
//           fp32 input is quantised per 1 x block (b_a = b: act_quant_cuda, block-major
//           scales) into caller scratch, then the block-scaled FP8 GEMM with fp32 output
//           (cuBLASLt for 128, else / when invariant the SIMT kernel of gemm.cu).
// Batch invariance (`invariant`): fp32 goes through gemm_f32_rowwise_cuda and FP8 through the
// SIMT block-scaled kernel (Fp8GemmImpl::kSimt) for every M. Both compute a row's outputs
// from that row alone in an order fixed by k only (see gpu_kernels.h and gemm.cu: one warp
// per output column, each lane's K chunks in order, a fixed shuffle tree; the row tile of
// the SIMT kernel changes which rows share a weight load, not any row's arithmetic), whereas
// cuBLASLt's algorithm (tile shape, split-K) is chosen per M.
// Device pointers throughout; runs on ctx.stream(); never allocates or synchronises.
#pragma once

#include <cstdint>

#include "cuda/device_context.h"
#include "ops/gemm/gemm.h"
#include "runtime/fp8_weight_quant.h"

namespace deepinfer {

struct DeviceLinear {
  const float* w32 = nullptr;
  const uint8_t* q = nullptr;
  const float* s = nullptr;
  int64_t n = 0, k = 0;
  int64_t block = kFp8GemmBlock;  // FP8: the weight's b x b blocks = the activation's 1 x b

  bool fp8() const { return q != nullptr; }
  double bytes() const;  // weight bytes a full read touches (codes + scales, or fp32)
};

// Activation scratch for the FP8 path: codes [rows, k] and block-major scales
// [ceil(k/block), rows] (16-byte aligned codes). `block` is what act_quantize writes and
// must equal the DeviceLinear's block in linear_run_quantized (ICHECK: a scratch view built
// with the default 128 by a caller that assumed V4 fails loudly on a V4.1 weight).
struct ActScratch {
  uint8_t* q = nullptr;
  float* s = nullptr;
  int64_t block = kFp8GemmBlock;
};

// Quantises x [m, k] into a (per 1 x a.block block, block-major scales).
void act_quantize(cuda::DeviceContext& ctx, const float* x, int64_t m, int64_t k, ActScratch a);

// y = x · W^T. FP8: quantises x into `scratch` first (unused for fp32).
void linear_run(cuda::DeviceContext& ctx, const DeviceLinear& w, const float* x, int64_t m,
                float* y, ActScratch scratch, bool invariant);
// FP8 only: y = x · W^T from an already quantised x (codes [m, w.k], scales block-major
// [ceil(k/w.block), m]; x.block == w.block).
void linear_run_quantized(cuda::DeviceContext& ctx, const DeviceLinear& w, ActScratch x, int64_t m,
                          float* y, bool invariant);

// quantize_fp8_blocks (the host quantiser of the FP8 weights): runtime/fp8_weight_quant.h.

}  // namespace deepinfer
