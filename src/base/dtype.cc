#include "base/dtype.h"

#include <cmath>

namespace deepinfer {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::F8_E8M0: return "F8_E8M0";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: return 2;
    default: return 1;
  }
}

bool dtype_from_string(const std::string& name, DType* out) {
  static const struct { const char* name; DType dtype; } kTable[] = {
      {"F64", DType::F64},         {"F32", DType::F32},         {"F16", DType::F16},
      {"BF16", DType::BF16},       {"F8_E4M3", DType::F8_E4M3}, {"F8_E8M0", DType::F8_E8M0},
      {"I64", DType::I64},         {"I32", DType::I32},         {"I16", DType::I16},
      {"I8", DType::I8},           {"U8", DType::U8},           {"BOOL", DType::BOOL},
  };
  for (const auto& entry : kTable) {
    if (name == entry.name) {
      *out = entry.dtype;
      return true;
    }
  }
  return false;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

namespace {

// Generic small float with `ebits` exponent bits, `mbits` mantissa bits and bias `bias`.
// Returns the code (sign in the top bit of the (1+ebits+mbits)-bit field). Saturates to
// `max_value`, whose code is `max_code`.
uint8_t encode_minifloat(float x, int mbits, int bias, float max_value, uint8_t max_code,
                         int total_bits) {
  const uint8_t sign = std::signbit(x) ? static_cast<uint8_t>(1u << (total_bits - 1)) : 0;
  float a = std::fabs(x);
  if (a >= max_value) return sign | max_code;
  const int emin = 1 - bias;
  int e2;
  std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1)
  int exp = a == 0.0f ? emin : std::max(e2 - 1, emin);
  const float quantum = std::ldexp(1.0f, exp - mbits);
  float n = std::nearbyint(a / quantum);  // exact division by a power of two; RNE
  const float one = std::ldexp(1.0f, mbits);
  if (n >= 2 * one) {  // rounded up into the next binade
    n = one;
    ++exp;
  }
  if (std::ldexp(n, exp - mbits) >= max_value) return sign | max_code;
  uint32_t code;
  if (n < one) {
    code = static_cast<uint32_t>(n);  // subnormal (exponent field 0)
  } else {
    code = (static_cast<uint32_t>(exp + bias) << mbits) | static_cast<uint32_t>(n - one);
  }
  return sign | static_cast<uint8_t>(code);
}

float decode_minifloat(uint8_t code, int ebits, int mbits, int bias, int total_bits) {
  const bool neg = (code >> (total_bits - 1)) & 1u;
  const int exp = (code >> mbits) & ((1 << ebits) - 1);
  const int mant = code & ((1 << mbits) - 1);
  float v = exp == 0 ? std::ldexp(static_cast<float>(mant), 1 - bias - mbits)
                     : std::ldexp(static_cast<float>(mant + (1 << mbits)), exp - bias - mbits);
  return neg ? -v : v;
}

}  // namespace

float e4m3_to_f32(uint8_t code) {
  if ((code & 0x7f) == 0x7f) return NAN;
  return decode_minifloat(code, 4, 3, 7, 8);
}

uint8_t f32_to_e4m3(float value) {
  if (std::isnan(value)) return 0x7f;
  return encode_minifloat(value, 3, 7, kE4M3Max, 0x7e, 8);
}

const std::array<float, 256>& e4m3_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = e4m3_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

const std::array<float, 256>& e8m0_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = e8m0_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

float e8m0_to_f32(uint8_t code) {
  if (code == 255) return NAN;
  return std::ldexp(1.0f, static_cast<int>(code) - 127);
}

float e2m1_to_f32(uint8_t code) { return decode_minifloat(code & 0xf, 2, 1, 1, 4); }

uint8_t f32_to_e2m1(float value) {
  if (std::isnan(value)) return 0x7;  // no NaN in e2m1; callers never pass NaN
  return encode_minifloat(value, 1, 1, kE2M1Max, 0x7, 4);
}

}  // namespace deepinfer
