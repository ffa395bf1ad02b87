#include "io/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/parallel.h"

namespace deepinfer {
namespace {

constexpr int64_t kFp4Block = 32;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// E8M0 code of 2^ceil(log2(amax / qmax)), from the fp32 bit pattern of the ratio
// (exponent + [mantissa != 0]) as the reference kernels do. All-zero blocks get 2^0.
uint8_t pow2_scale_code(float amax, float qmax) {
  if (!(amax > 0)) return 127;
  const float ratio = amax / qmax;
  uint32_t bits;
  std::memcpy(&bits, &ratio, 4);
  const int exponent = static_cast<int>((bits >> 23) & 0xff);
  const int e = exponent - 127 + ((bits & 0x7fffff) != 0 ? 1 : 0);
  return static_cast<uint8_t>(std::clamp(e + 127, 0, 254));
}

void check_input(const Tensor& w, const char* what) {
  CHECK(w.dtype() == DType::F32 && w.dim() == 2)
      << what << ": expected an F32 [N, K] tensor, got " << w.str();
}

}  // namespace

QuantizedWeight quantize_fp8_block(const Tensor& w, int64_t block_n, int64_t block_k) {
  check_input(w, "quantize_fp8_block");
  CHECK(block_n > 0 && block_k > 0) << "quantize_fp8_block: block sizes must be positive";
  const int64_t n = w.size(0), k = w.size(1);
  const int64_t nb = ceil_div(n, block_n), kb = ceil_div(k, block_k);
  QuantizedWeight out{Tensor::empty(DType::F8_E4M3, {n, k}), Tensor::empty(DType::F8_E8M0, {nb, kb})};
  const float* src = w.f32();
  uint8_t* q = out.weight.data<uint8_t>();
  uint8_t* sc = out.scale.data<uint8_t>();
  parallel_for(nb, [&](int64_t b0, int64_t b1) {
    for (int64_t bi = b0; bi < b1; ++bi) {
      const int64_t r0 = bi * block_n, r1 = std::min(n, r0 + block_n);
      for (int64_t bj = 0; bj < kb; ++bj) {
        const int64_t c0 = bj * block_k, c1 = std::min(k, c0 + block_k);
        float amax = 0;
        for (int64_t i = r0; i < r1; ++i) {
          for (int64_t j = c0; j < c1; ++j) amax = std::max(amax, std::fabs(src[i * k + j]));
        }
        const uint8_t code = pow2_scale_code(amax, kE4M3Max);
        sc[bi * kb + bj] = code;
        const float inv = 1.0f / e8m0_to_f32(code);
        for (int64_t i = r0; i < r1; ++i) {
          for (int64_t j = c0; j < c1; ++j) q[i * k + j] = f32_to_e4m3(src[i * k + j] * inv);
        }
      }
    }
  });
  return out;
}

QuantizedWeight quantize_fp4(const Tensor& w) {
  check_input(w, "quantize_fp4");
  const int64_t n = w.size(0), k = w.size(1);
  CHECK(k % 2 == 0) << "quantize_fp4: the input width " << k << " must be even";
  const int64_t kb = ceil_div(k, kFp4Block);
  QuantizedWeight out{Tensor::empty(DType::I8, {n, k / 2}), Tensor::empty(DType::F8_E8M0, {n, kb})};
  const float* src = w.f32();
  uint8_t* packed = out.weight.data<uint8_t>();
  uint8_t* sc = out.scale.data<uint8_t>();
  parallel_for(n, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const float* row = src + i * k;
      for (int64_t bj = 0; bj < kb; ++bj) {
        const int64_t c0 = bj * kFp4Block, c1 = std::min(k, c0 + kFp4Block);
        float amax = 0;
        for (int64_t j = c0; j < c1; ++j) amax = std::max(amax, std::fabs(row[j]));
        const uint8_t code = pow2_scale_code(amax, kE2M1Max);
        sc[i * kb + bj] = code;
        const float inv = 1.0f / e8m0_to_f32(code);
        for (int64_t j = c0; j < c1; j += 2) {
          const uint8_t lo = f32_to_e2m1(row[j] * inv) & 0xf;
          const uint8_t hi = f32_to_e2m1(row[j + 1] * inv) & 0xf;
          packed[i * (k / 2) + j / 2] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
    }
  }, 16);
  return out;
}

}  // namespace deepinfer
