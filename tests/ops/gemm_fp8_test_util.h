// Shared by the block-scaled FP8 GEMM CUDA tests (test_gemm_fp8_mma_cuda, test_gemm_fp8_gemv_cuda):
// a random problem in the layouts of ops/gemm/gemm.h and its device copy.
//  * make(): activations and weights random e4m3 codes (no NaN code), a random power-of-two
//    scale per 1 x b activation block over 2^-10..2^-2 (row-major for the CPU reference,
//    block-major for the device) and per b x b weight block over 2^-12..2^-4 (the checkpoint
//    grid, and the device's padded layout): a kernel reading the wrong scale or another row /
//    column / K block's codes is off by O(1) relative.
//  * DeviceProblem uploads it; download() reads a BF16 or F32 [m, n] result back as floats.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "cuda/device_context.h"
#include "cuda/device_tensor.h"
#include "ops/gemm/gemm.h"

namespace deepinfer::gemm_fp8_test {

inline cuda::DeviceContext& ctx() {
  static cuda::DeviceContext context;
  return context;
}

inline Tensor upload(const void* data, DType dtype, Shape shape) {
  Tensor t = cuda::device_empty(dtype, shape);
  cuda::copy_h2d(t.raw(), data, t.nbytes(), ctx().stream());
  return t;
}

struct Problem {
  int64_t m, n, k, b;
  std::vector<uint8_t> xq, wq;
  std::vector<float> sx_row, sx_blk, sw_grid, sw_pad;
};

inline void random_codes(std::mt19937_64& rng, std::vector<uint8_t>& v, int64_t count) {
  std::uniform_int_distribution<int> code(0, 255);
  v.resize(count);
  for (auto& c : v) {
    int x = code(rng);
    while ((x & 0x7f) == 0x7f) x = code(rng);  // e4m3's NaN codes
    c = static_cast<uint8_t>(x);
  }
}

inline Problem make(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k, int64_t b) {
  Problem p{m, n, k, b, {}, {}, {}, {}, {}, {}};
  random_codes(rng, p.xq, m * k);
  random_codes(rng, p.wq, n * k);
  const int64_t n_kb = ceil_div64(k, b), n_nb = ceil_div64(n, b);
  std::uniform_int_distribution<int> ex(-10, -2), ew(-12, -4);
  p.sx_row.resize(m * n_kb);
  p.sx_blk.resize(m * n_kb);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t kb = 0; kb < n_kb; ++kb)
      p.sx_row[r * n_kb + kb] = p.sx_blk[kb * m + r] = std::ldexp(1.0f, ex(rng));
  p.sw_grid.resize(n_nb * n_kb);
  for (auto& s : p.sw_grid) s = std::ldexp(1.0f, ew(rng));
  p.sw_pad = expand_weight_scales_f32(p.sw_grid.data(), n, k, b);
  return p;
}

struct DeviceProblem {
  Tensor xq, wq, sx, sw;
  explicit DeviceProblem(const Problem& p)
      : xq(upload(p.xq.data(), DType::F8_E4M3, {p.m, p.k})),
        wq(upload(p.wq.data(), DType::F8_E4M3, {p.n, p.k})),
        sx(upload(p.sx_blk.data(), DType::F32, {ceil_div64(p.k, p.b), p.m})),
        sw(upload(p.sw_pad.data(), DType::F32,
                  {ceil_div64(p.n, p.b), fp8_weight_scale_ld(p.k, p.b)})) {}
};

inline std::vector<float> download(const Tensor& y, DType y_dtype) {
  const Tensor h = cuda::to_host(y, ctx().stream());
  std::vector<float> out(h.numel());
  for (int64_t i = 0; i < h.numel(); ++i)
    out[i] = y_dtype == DType::BF16 ? bf16_to_f32(h.data<uint16_t>()[i]) : h.data<float>()[i];
  return out;
}

}  // namespace deepinfer::gemm_fp8_test
