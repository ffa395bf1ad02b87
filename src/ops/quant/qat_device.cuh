// Device versions of the QAT roundings of qat.h, bit-identical to the CPU ones for the same
// fp32 inputs (exact power-of-two scales, round-to-nearest-even via rintf on values scaled
// to the format's step). Included by .cu files only.
#pragma once

#include <cstdint>

namespace deepinfer::qat_device {

constexpr float kE4M3MaxF = 448.0f;
constexpr float kE2M1MaxF = 6.0f;

__device__ __forceinline__ float pow2_scale(float amax, float max_value) {
  const float ratio = amax / max_value;
  const uint32_t bits = __float_as_uint(ratio);
  const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0 ? 1 : 0);
  return ldexpf(1.0f, exponent);
}

// Round |q| <= max to a float format with `mant` mantissa bits whose smallest normal
// exponent is `emin` (subnormal step 2^(emin - mant)); ties to even.
__device__ __forceinline__ float round_format(float q, int mant, int emin) {
  const float a = fabsf(q);
  if (a == 0.0f) return q;
  int e = static_cast<int>((__float_as_uint(a) >> 23) & 0xff) - 127;  // floor(log2 a) for normals
  if (e < emin) e = emin;
  const float step = ldexpf(1.0f, e - mant);
  return rintf(q / step) * step;
}

__device__ __forceinline__ float round_e4m3(float q) { return round_format(q, 3, -6); }
__device__ __forceinline__ float round_e2m1(float q) { return round_format(q, 1, 0); }

}  // namespace deepinfer::qat_device
