// Element types and exact scalar conversions for the formats DeepSeek-V4 checkpoints use
// (MODEL_SPEC.md §B): bf16, fp8 e4m3fn, e8m0 (ue8m0 scales), fp4 e2m1.
// All encoders round to nearest, ties to even; e4m3/e2m1 encoders saturate to the
// largest finite value (the "satfinite" behaviour of the reference kernels).
#pragma once

#include <cstdint>
#include <array>
#include <cstring>
#include <string>

namespace deepinfer {

enum class DType : uint8_t { F64, F32, F16, BF16, F8_E4M3, F8_E8M0, I64, I32, I16, I8, U8, BOOL };

const char* dtype_name(DType dtype);
// Size of one element in bytes.
size_t dtype_size(DType dtype);
// Parses a safetensors dtype string ("BF16", "F8_E4M3", ...). Returns false if unknown.
bool dtype_from_string(const std::string& name, DType* out);

inline float bf16_to_f32(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Rounds a float to the nearest bf16 value and returns it as float.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

float f16_to_f32(uint16_t bits);

// fp8 e4m3fn: bias 7, no infinities, 0x7f/0xff are NaN, max finite 448.
float e4m3_to_f32(uint8_t code);
// e4m3_to_f32 of every code, as a table (bulk decoding of FP8 tensors and table rows).
const std::array<float, 256>& e4m3_values();
uint8_t f32_to_e4m3(float value);
inline float round_e4m3(float value) { return e4m3_to_f32(f32_to_e4m3(value)); }
constexpr float kE4M3Max = 448.0f;

// e8m0 (ue8m0): byte s means 2^(s-127); 255 is NaN.
float e8m0_to_f32(uint8_t code);
const std::array<float, 256>& e8m0_values();  // e8m0_to_f32 of every code

// fp4 e2m1: code bit 3 = sign, magnitude index (code & 7) -> {0,.5,1,1.5,2,3,4,6}.
float e2m1_to_f32(uint8_t code);
uint8_t f32_to_e2m1(float value);
inline float round_e2m1(float value) { return e2m1_to_f32(f32_to_e2m1(value)); }
constexpr float kE2M1Max = 6.0f;

}  // namespace deepinfer
