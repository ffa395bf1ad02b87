#include <cblas.h>

#include <algorithm>
#include <vector>

#include "base/error.h"
#include "base/parallel.h"
#include "ops/gemm/gemm.h"

namespace deepinfer {

void gemm_bf16_ref(const uint16_t* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                   float* y) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(y, y + m * n, 0.0f);
    return;
  }
  // bf16 -> fp32 is exact, and products of two bf16 values are exact in fp32, so sgemm
  // differs from the exact result only by fp32 summation error.
  std::vector<float> xf(m * k), wf(n * k);
  for (int64_t i = 0; i < m * k; ++i) xf[i] = bf16_to_f32(x[i]);
  for (int64_t i = 0; i < n * k; ++i) wf[i] = bf16_to_f32(w[i]);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, xf.data(), static_cast<int>(k), wf.data(),
              static_cast<int>(k), 0.0f, y, static_cast<int>(n));
}

void gemm_fp8_block_ref(const uint8_t* xq, const float* sx, const uint8_t* wq, const float* sw,
                        int64_t m, int64_t n, int64_t k, float* y, int64_t block) {
  ICHECK(block > 0) << "gemm_fp8_block_ref: block " << block;
  if (m == 0 || n == 0) return;
  const int64_t n_kb = ceil_div64(k, block);
  // e4m3 -> fp32 through a 256-entry table (exact).
  float lut[256];
  for (int c = 0; c < 256; ++c) lut[c] = e4m3_to_f32(static_cast<uint8_t>(c));
  std::vector<float> xf(m * k), wf(n * k);
  for (int64_t i = 0; i < m * k; ++i) xf[i] = lut[xq[i]];
  for (int64_t i = 0; i < n * k; ++i) wf[i] = lut[wq[i]];
  parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t row = 0; row < m; ++row) {
      const float* xr = xf.data() + row * k;
      for (int64_t col = begin; col < end; ++col) {
        const float* wr = wf.data() + col * k;
        float acc = 0.0f;
        for (int64_t kb = 0; kb < n_kb; ++kb) {
          const int64_t k0 = kb * block, k1 = std::min(k, k0 + block);
          float part = 0.0f;  // products of e4m3 values are exact in fp32
          for (int64_t i = k0; i < k1; ++i) part += xr[i] * wr[i];
          acc += part * sx[row * n_kb + kb] * sw[(col / block) * n_kb + kb];
        }
        y[row * n + col] = acc;
      }
    }
  }, 8);
}

std::vector<float> expand_weight_scales_f32(const float* s, int64_t n, int64_t k, int64_t block) {
  ICHECK(block > 0) << "expand_weight_scales: block " << block;
  const int64_t n_nb = ceil_div64(n, block), n_kb = ceil_div64(k, block);
  const int64_t ld = fp8_weight_scale_ld(k, block);
  std::vector<float> out(n_nb * ld, 1.0f);
  for (int64_t i = 0; i < n_nb; ++i)
    for (int64_t j = 0; j < n_kb; ++j) out[i * ld + j] = s[i * n_kb + j];
  return out;
}

std::vector<float> expand_weight_scales_ue8m0(const uint8_t* s, int64_t n, int64_t k,
                                              int64_t block) {
  ICHECK(block > 0) << "expand_weight_scales: block " << block;
  const int64_t count = ceil_div64(n, block) * ceil_div64(k, block);
  std::vector<float> f(count);
  for (int64_t i = 0; i < count; ++i) {
    CHECK(s[i] != 255) << "weight scale " << i << " is the e8m0 NaN code 255";
    f[i] = e8m0_to_f32(s[i]);
  }
  return expand_weight_scales_f32(f.data(), n, k, block);
}

}  // namespace deepinfer
