// DeviceLinear: one projection y[m, n] = x[m, k] · W[n, k]^T of GpuModel, in either weight
// format, so the forward is written once:
//  * fp32:  w32 [n, k] row-major; fp32 GEMM (cuBLASLt CUBLAS_COMPUTE_32F, never TF32).
//  * FP8:   q [n, k] e4m3 codes with 128x128 block scales s [ceil(n/128), fp8_weight_scale_ld(k)]
//           (the CUDA layout of ops/gemm/gemm.h), fp32 holding UE8M0 / power-of-two values:
//           2^ceil(log2(amax / 448)) per block from quantize_fp8_blocks (fp8_weight_quant.h),
//           which reproduces checkpoint block-FP8 weights bit-exactly, or the checkpoint's own
//           e8m0 scales (routed experts, expert_loader.h); only GpuModel's device dummy
//           weights (no host weights) use one constant scale per matrix that is not. The
//           fp32 input is quantised per 1x128 block (act_quant_cuda, block-major scales) into
//           caller scratch, then the block-scaled FP8 GEMM with fp32 output.
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
#include "runtime/fp8_weight_quant.h"

namespace deepinfer {

struct DeviceLinear {
  const float* w32 = nullptr;
  const uint8_t* q = nullptr;
  const float* s = nullptr;
  int64_t n = 0, k = 0;

  bool fp8() const { return q != nullptr; }
  double bytes() const;  // weight bytes a full read touches (codes + scales, or fp32)
};

// Activation scratch for the FP8 path: codes [rows, k] and block-major scales
// [ceil(k/128), rows] (16-byte aligned codes).
struct ActScratch {
  uint8_t* q = nullptr;
  float* s = nullptr;
};

// Quantises x [m, k] into a (per 1x128 block, block-major scales).
void act_quantize(cuda::DeviceContext& ctx, const float* x, int64_t m, int64_t k, ActScratch a);

// y = x · W^T. FP8: quantises x into `scratch` first (unused for fp32).
void linear_run(cuda::DeviceContext& ctx, const DeviceLinear& w, const float* x, int64_t m,
                float* y, ActScratch scratch, bool invariant);
// FP8 only: y = x · W^T from an already quantised x (codes [m, w.k], scales block-major
// [ceil(k/128), m]).
void linear_run_quantized(cuda::DeviceContext& ctx, const DeviceLinear& w, ActScratch x, int64_t m,
                          float* y, bool invariant);

// quantize_fp8_blocks (the host quantiser of the FP8 weights): runtime/fp8_weight_quant.h.

}  // namespace deepinfer
