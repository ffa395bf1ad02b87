// DeviceLinear: projections in fp32 or FP8 block-scaled form (contracts in device_linear.h).
#include "runtime/device_linear.h"

#include <algorithm>
#include <cmath>

#include "base/dtype.h"
#include "base/error.h"
#include "ops/gemm/gemm.h"
#include "ops/quant/act_quant.h"
#include "runtime/gpu_kernels.h"

namespace deepinfer {

double DeviceLinear::bytes() const {
  if (!fp8()) return 4.0 * n * k;
  return static_cast<double>(n) * k + 4.0 * ceil_div64(n, kFp8GemmBlock) * fp8_weight_scale_ld(k);
}

void act_quantize(cuda::DeviceContext& ctx, const float* x, int64_t m, int64_t k, ActScratch a) {
  act_quant_cuda(ctx.stream(), x, DType::F32, m, k, kFp8GemmBlock, a.q, a.s,
                 ScaleLayout::kBlockMajor);
}

void linear_run_quantized(cuda::DeviceContext& ctx, const DeviceLinear& w, ActScratch x, int64_t m,
                          float* y, bool invariant) {
  ICHECK(w.fp8()) << "linear_run_quantized on an fp32 weight";
  gemm_fp8_block_cuda(ctx, x.q, x.s, w.q, w.s, m, w.n, w.k, y, DType::F32,
                      invariant ? Fp8GemmImpl::kSimt : Fp8GemmImpl::kAuto);
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

void quantize_fp8_blocks(float* w, int64_t n, int64_t k, uint8_t* codes, float* grid,
                         bool round_trip) {
  const int64_t n_nb = ceil_div64(n, kFp8GemmBlock), n_kb = ceil_div64(k, kFp8GemmBlock);
  for (int64_t bn = 0; bn < n_nb; ++bn) {
    for (int64_t bk = 0; bk < n_kb; ++bk) {
      const int64_t r0 = bn * kFp8GemmBlock, r1 = std::min(n, r0 + kFp8GemmBlock);
      const int64_t c0 = bk * kFp8GemmBlock, c1 = std::min(k, c0 + kFp8GemmBlock);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * k + c]));
      const float sc = amax > 0.0f ? amax / 448.0f : 1.0f;
      grid[bn * n_kb + bk] = sc;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const uint8_t code = f32_to_e4m3(w[r * k + c] / sc);
          codes[r * k + c] = code;
          if (round_trip) w[r * k + c] = e4m3_to_f32(code) * sc;
        }
      }
    }
  }
}

}  // namespace deepinfer
