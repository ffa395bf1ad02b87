#include <cmath>
#include <cstring>

#include "base/dtype.h"
#include "base/error.h"
#include "ops/quant/qat.h"

namespace deepinfer {

float pow2_scale(float amax, float max_value) {
  const float ratio = amax / max_value;
  uint32_t bits;
  std::memcpy(&bits, &ratio, 4);
  const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0 ? 1 : 0);
  return std::ldexp(1.0f, exponent);
}

namespace {

template <typename Round>
void roundtrip(float* x, int64_t n, int64_t block, float max_value, float amax_floor, Round round) {
  ICHECK(block > 0);
  for (int64_t start = 0; start < n; start += block) {
    const int64_t end = std::min(n, start + block);
    float amax = amax_floor;
    for (int64_t i = start; i < end; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float scale = pow2_scale(amax, max_value);
    for (int64_t i = start; i < end; ++i) {
      const float q = std::min(max_value, std::max(-max_value, x[i] / scale));
      x[i] = round(q) * scale;
    }
  }
}

}  // namespace

void fp8_roundtrip(float* x, int64_t n, int64_t block) {
  roundtrip(x, n, block, kE4M3Max, 1e-4f, round_e4m3);
}

void fp4_roundtrip(float* x, int64_t n, int64_t block) {
  roundtrip(x, n, block, kE2M1Max, 6.0f * std::ldexp(1.0f, -126), round_e2m1);
}

void fp4_roundtrip_e4m3_scale(float* x, int64_t n, int64_t block) {
  ICHECK(block > 0);
  for (int64_t start = 0; start < n; start += block) {
    const int64_t end = std::min(n, start + block);
    float amax = 6.0f * std::ldexp(1.0f, -9);
    for (int64_t i = start; i < end; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float scale = round_e4m3(amax / kE2M1Max);
    for (int64_t i = start; i < end; ++i) {
      const float q = std::min(kE2M1Max, std::max(-kE2M1Max, x[i] / scale));
      x[i] = round_e2m1(q) * scale;
    }
  }
}

void hadamard_transform(float* x, int64_t n) {
  CHECK(n > 0 && (n & (n - 1)) == 0) << "Hadamard size must be a power of two, got " << n;
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t i = 0; i < n; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

}  // namespace deepinfer
