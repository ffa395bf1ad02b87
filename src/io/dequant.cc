#include "io/dequant.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "base/parallel.h"

namespace deepinfer {
namespace {

constexpr int64_t kFp4Block = 32;
// Rows per parallel_for chunk: enough work per task for small tensors too.
constexpr int64_t kMinRowsPerChunk = 16;



const std::array<float, 16>& e2m1_table() {
  static const std::array<float, 16> table = [] {
    std::array<float, 16> t{};
    for (int c = 0; c < 16; ++c) t[c] = e2m1_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

// Reads element i of a possibly unaligned array of T.
template <typename T>
T load(const void* base, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(base) + i * sizeof(T), sizeof(T));
  return v;
}

// Scale tensors of any supported dtype, decoded to F32 once (they are small).
Tensor scale_to_f32(const Tensor& scale, const std::string& name) {
  if (scale.dtype() == DType::F8_E8M0) {
    Tensor out = Tensor::empty(DType::F32, scale.shape());
    const auto& table = e8m0_values();
    const uint8_t* src = static_cast<const uint8_t*>(scale.raw());
    for (int64_t i = 0; i < scale.numel(); ++i) out.f32()[i] = table[src[i]];
    return out;
  }
  CHECK(scale.dtype() == DType::F32 || scale.dtype() == DType::BF16)
      << "scale tensor of '" << name << "' has dtype " << dtype_name(scale.dtype())
      << ", expected F8_E8M0, F32 or BF16";
  return convert_to_f32(scale, name);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Tensor convert_to_f32(const Tensor& t, const std::string& name) {
  Tensor out = Tensor::empty(DType::F32, t.shape());
  float* dst = out.f32();
  const void* src = t.raw();
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      break;
    case DType::F64:
      parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = static_cast<float>(load<double>(src, i));
      }, 1 << 16);
      break;
    case DType::BF16:
      parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = bf16_to_f32(load<uint16_t>(src, i));
      }, 1 << 16);
      break;
    case DType::F16:
      parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = f16_to_f32(load<uint16_t>(src, i));
      }, 1 << 16);
      break;
    default:
      THROW(kInvalidInput) << "tensor '" << name << "' has dtype " << dtype_name(t.dtype())
                           << ", which does not convert to F32";
  }
  return out;
}

void check_fp8_block_pair(const Tensor& q, const Tensor& scale, int64_t block_n, int64_t block_k,
                          const std::string& name) {
  CHECK(q.dtype() == DType::F8_E4M3 && q.dim() == 2)
      << "tensor '" << name << "' is " << q.str() << ", expected a 2-D F8_E4M3 weight";
  ICHECK(block_n > 0 && block_k > 0);
  const int64_t n = q.size(0), k = q.size(1);
  const Shape expected = {ceil_div(n, block_n), ceil_div(k, block_k)};
  CHECK(scale.shape() == expected)
      << "scale of tensor '" << name << "' has shape " << shape_str(scale.shape())
      << ", expected " << shape_str(expected) << " for weight " << shape_str(q.shape()) << " and "
      << block_n << "x" << block_k << " blocks";
  CHECK(scale.dtype() == DType::F8_E8M0 || scale.dtype() == DType::F32 || scale.dtype() == DType::BF16)
      << "scale tensor of '" << name << "' has dtype " << dtype_name(scale.dtype())
      << ", expected F8_E8M0, F32 or BF16";
}

void check_fp4_pair(const Tensor& packed, const Tensor& scale, const std::string& name) {
  CHECK((packed.dtype() == DType::I8 || packed.dtype() == DType::U8) && packed.dim() == 2)
      << "tensor '" << name << "' is " << packed.str()
      << ", expected a 2-D I8/U8 weight of packed FP4 pairs";
  const int64_t n = packed.size(0), k = 2 * packed.size(1);
  const Shape expected = {n, ceil_div(k, kFp4Block)};
  CHECK(scale.dtype() == DType::F8_E8M0 && scale.shape() == expected)
      << "scale of FP4 tensor '" << name << "' is " << scale.str() << ", expected F8_E8M0"
      << shape_str(expected) << " (one scale per " << kFp4Block << " of the " << k
      << " unpacked columns)";
}

Tensor dequant_fp8_block(const Tensor& q, const Tensor& scale, int64_t block_n, int64_t block_k,
                         const std::string& name) {
  check_fp8_block_pair(q, scale, block_n, block_k, name);
  const int64_t n = q.size(0), k = q.size(1);
  const Shape expected = {ceil_div(n, block_n), ceil_div(k, block_k)};
  const Tensor s = scale_to_f32(scale, name);
  Tensor out = Tensor::empty(DType::F32, q.shape());
  const auto& table = e4m3_values();
  const uint8_t* src = static_cast<const uint8_t*>(q.raw());
  float* dst = out.f32();
  const float* sf = s.f32();
  const int64_t n_col_blocks = expected[1];
  parallel_for(n, [&](int64_t row_begin, int64_t row_end) {
    for (int64_t i = row_begin; i < row_end; ++i) {
      const float* srow = sf + (i / block_n) * n_col_blocks;
      const uint8_t* qrow = src + i * k;
      float* orow = dst + i * k;
      for (int64_t jb = 0; jb < n_col_blocks; ++jb) {
        const float sv = srow[jb];
        const int64_t end = std::min(k, (jb + 1) * block_k);
        for (int64_t j = jb * block_k; j < end; ++j) orow[j] = table[qrow[j]] * sv;
      }
    }
  }, kMinRowsPerChunk);
  return out;
}

bool is_fp4_pair(const Tensor& weight, const Tensor& scale) {
  return (weight.dtype() == DType::I8 || weight.dtype() == DType::U8) && weight.dim() == 2 &&
         scale.dim() == 2 && scale.size(0) == weight.size(0) &&
         scale.size(1) == ceil_div(2 * weight.size(1), kFp4Block);
}

Tensor dequant_fp4(const Tensor& packed, const Tensor& scale, const std::string& name) {
  check_fp4_pair(packed, scale, name);
  const int64_t n = packed.size(0), k = 2 * packed.size(1);
  const Shape expected = {n, ceil_div(k, kFp4Block)};
  Tensor out = Tensor::empty(DType::F32, {n, k});
  const auto& fp4 = e2m1_table();
  const auto& e8m0 = e8m0_values();
  const uint8_t* src = static_cast<const uint8_t*>(packed.raw());
  const uint8_t* sc = static_cast<const uint8_t*>(scale.raw());
  float* dst = out.f32();
  const int64_t n_blocks = expected[1];
  parallel_for(n, [&](int64_t row_begin, int64_t row_end) {
    for (int64_t i = row_begin; i < row_end; ++i) {
      const uint8_t* prow = src + i * (k / 2);
      const uint8_t* srow = sc + i * n_blocks;
      float* orow = dst + i * k;
      // A scale block holds 32 elements = 16 whole bytes, so pairs never straddle blocks.
      for (int64_t sb = 0; sb < n_blocks; ++sb) {
        const float sv = e8m0[srow[sb]];
        const int64_t end = std::min(k / 2, (sb + 1) * (kFp4Block / 2));
        for (int64_t b = sb * (kFp4Block / 2); b < end; ++b) {
          const uint8_t byte = prow[b];
          orow[2 * b] = fp4[byte & 0xf] * sv;
          orow[2 * b + 1] = fp4[byte >> 4] * sv;
        }
      }
    }
  }, kMinRowsPerChunk);
  return out;
}

}  // namespace deepinfer
