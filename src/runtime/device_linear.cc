// DeviceLinear: projections in fp32 or FP8 block-scaled form (contracts in device_linear.h).
#include "runtime/device_linear.h"

#include "base/error.h"
#include "ops/quant/act_quant.h"
#include "runtime/gpu_kernels.h"

namespace deepinfer {

double DeviceLinear::bytes() const {
  if (!fp8()) return 4.0 * n * k;
  return static_cast<double>(n) * k + 4.0 * fp8_weight_scale_count(n, k, block);
}

void act_quantize(cuda::DeviceContext& ctx, const float* x, int64_t m, int64_t k, ActScratch a) {
  act_quant_cuda(ctx.stream(), x, DType::F32, m, k, a.block, a.q, a.s, ScaleLayout::kBlockMajor);
}

void linear_run_quantized(cuda::DeviceContext& ctx, const DeviceLinear& w, ActScratch x, int64_t m,
                          float* y, bool invariant) {
  ICHECK(w.fp8()) << "linear_run_quantized on an fp32 weight";
  ICHECK(x.block == w.block) << "linear_run_quantized: activations quantised per 1x" << x.block
                             << " for a " << w.block << "x" << w.block << "-block weight";
  gemm_fp8_block_cuda(ctx, x.q, x.s, w.q, w.s, m, w.n, w.k, y, DType::F32,
                      invariant ? Fp8GemmImpl::kSimt : Fp8GemmImpl::kAuto, w.block);
}

void linear_run(cuda::DeviceContext& ctx, const DeviceLinear& w, const float* x, int64_t m,
                float* y, ActScratch scratch, bool invariant) {
  if (m <= 0) return;
  if (w.fp8()) {
    act_quantize(ctx, x, m, w.k, scratch);
    linear_run_quantized(ctx, w, scratch, m, y, invariant);
  } else if (invariant) {
    gemm_f32_rowwise_cuda(ctx.stream(), x, w.w32, m, w.n, w.k, y);
  } else {
    gemm_f32_cuda(ctx, x, w.w32, m, w.n, w.k, y);
  }
}

}  // namespace deepinfer
