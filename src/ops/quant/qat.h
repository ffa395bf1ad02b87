// Quantise -> dequantise round trips that the official forward applies in place
// (MODEL_SPEC §A.10, §B.4). All take fp32 values and overwrite them with the values
// the low-precision format can hold. Scales are powers of two (ue8m0).
#pragma once

#include <cstdint>

namespace deepinfer {

// FP8 e4m3 round trip in blocks of `block` values: amax = max(max|x|, 1e-4),
// s = 2^ceil(log2(amax / 448)), x <- e4m3(clamp(x / s)) * s.
void fp8_roundtrip(float* x, int64_t n, int64_t block);

// FP4 e2m1 round trip in blocks of `block` values: amax = max(max|x|, 6 * 2^-126),
// s = 2^ceil(log2(amax / 6)), x <- e2m1(clamp(x / s)) * s.
void fp4_roundtrip(float* x, int64_t n, int64_t block);

// FP4 e2m1 round trip with e4m3 block scales (V4.1 compressed KV, MODEL_SPEC §B.4): blocks
// of `block` values, amax = max(max|x|, 6 * 2^-9), s = e4m3(amax / 6) (round to nearest even,
// saturating; not a power of two), x <- e2m1(clamp(x / s, -6, 6)) * s.
void fp4_roundtrip_e4m3_scale(float* x, int64_t n, int64_t block);

// In-place Sylvester-ordered Walsh-Hadamard transform scaled by n^-1/2 (n a power of 2).
void hadamard_transform(float* x, int64_t n);

// Power-of-two scale 2^ceil(log2(amax / max_value)) computed from the fp32 bits as the
// reference kernels do (exponent - 127 + [mantissa != 0]).
float pow2_scale(float amax, float max_value);

}  // namespace deepinfer
