#include "io/fp4_to_fp8.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "base/error.h"
#include "base/parallel.h"

namespace deepinfer {
namespace {

constexpr int64_t kFp8Block = 128;
constexpr int64_t kFp4Block = 32;
// 6 * 2^6 = 384 fits e4m3 (max 448); 6 * 2^7 would not (convert.py's MAX_OFFSET_BITS).
constexpr int kMaxOffsetBits = 6;
// Below this exponent offset a nonzero value is far under e4m3's smallest subnormal (2^-9)
// and also under fp32's normal range, so it is decided without forming it in fp32.
constexpr int kTinyOffset = -100;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Inexact {
  int64_t row = -1, col = -1;
  float value = 0.0f;    // exact value (0 if below fp32's range: see kTinyOffset)
  float rounded = 0.0f;  // what e4m3 round-to-nearest-even gives
  int offset = 0;        // exponent offset of the element's 32-block to the new scale
};

}  // namespace

void check_fp4_scales(const uint8_t* scales, int64_t n_rows, int64_t n_sb, int64_t row0, const std::string& name) {
  for (int64_t i = 0; i < n_rows * n_sb; ++i) {
    CHECK(scales[i] != 255) << "scale of FP4 tensor '" << name << "' at [" << row0 + i / n_sb << ", "
                            << i % n_sb << "] is the e8m0 NaN code 255";
  }
}

Fp8BlockWeight fp4_to_fp8_block(const Tensor& packed, const Tensor& scale,
                                const std::string& name, Fp4ToFp8Policy policy) {
  CHECK((packed.dtype() == DType::I8 || packed.dtype() == DType::U8) && packed.dim() == 2)
      << "tensor '" << name << "' is " << packed.str()
      << ", expected a 2-D I8/U8 weight of packed FP4 pairs";
  const int64_t n = packed.size(0), k = 2 * packed.size(1);
  const int64_t n_sb = ceil_div(k, kFp4Block);
  const Shape expected{n, n_sb};
  CHECK(scale.dtype() == DType::F8_E8M0 && scale.shape() == expected)
      << "scale of FP4 tensor '" << name << "' is " << scale.str() << ", expected F8_E8M0"
      << shape_str(expected);
  const int64_t n_nb = ceil_div(n, kFp8Block), n_kb = ceil_div(k, kFp8Block);
  Fp8BlockWeight out;
  out.weight = Tensor::empty(DType::F8_E4M3, {n, k});
  out.scale = Tensor::empty(DType::F8_E8M0, {n_nb, n_kb});
  const auto* src = static_cast<const uint8_t*>(packed.raw());
  const auto* sc = static_cast<const uint8_t*>(scale.raw());
  auto* q = static_cast<uint8_t*>(out.weight.raw());
  auto* new_scale = static_cast<uint8_t*>(out.scale.raw());
  check_fp4_scales(sc, n, n_sb, 0, name);
  float mag[16];
  for (int c = 0; c < 16; ++c) mag[c] = e2m1_to_f32(static_cast<uint8_t>(c));
  // The conversion of each (offset, code) pair for the offsets formed in fp32, computed once
  // (the same arithmetic as per element; a table lookup in the loop below).
  constexpr int kOffsets = kMaxOffsetBits - kTinyOffset + 1;
  std::vector<uint8_t> tab_code(kOffsets * 16), tab_exact(kOffsets * 16);
  std::vector<float> tab_value(kOffsets * 16);
  for (int o = 0; o < kOffsets; ++o) {
    for (int c = 0; c < 16; ++c) {
      const float value = std::ldexp(mag[c], o + kTinyOffset);  // exact: normal fp32 or zero
      const uint8_t code = f32_to_e4m3(value);
      tab_code[o * 16 + c] = code;
      tab_exact[o * 16 + c] = e4m3_to_f32(code) == value;
      tab_value[o * 16 + c] = value;
    }
  }

  // One task per 128-row block; first inexact element and count of rounded values per task.
  std::vector<Inexact> first(n_nb);
  std::vector<int64_t> n_rounded(n_nb, 0);
  parallel_for(n_nb, [&](int64_t nb_begin, int64_t nb_end) {
    for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
      const int64_t i0 = nb * kFp8Block, i1 = std::min(n, i0 + kFp8Block);
      for (int64_t kb = 0; kb < n_kb; ++kb) {
        const int64_t s0 = kb * (kFp8Block / kFp4Block);
        const int64_t s1 = std::min(n_sb, s0 + kFp8Block / kFp4Block);
        int max_code = 0;
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t s = s0; s < s1; ++s) max_code = std::max<int>(max_code, sc[i * n_sb + s]);
        const int block_code = std::max(max_code - kMaxOffsetBits, 0);
        new_scale[nb * n_kb + kb] = static_cast<uint8_t>(block_code);
        for (int64_t i = i0; i < i1; ++i) {
          for (int64_t s = s0; s < s1; ++s) {
            const int offset = static_cast<int>(sc[i * n_sb + s]) - block_code;  // <= 6
            const int64_t j1 = std::min(k, (s + 1) * kFp4Block);
            for (int64_t j = s * kFp4Block; j < j1; ++j) {
              const uint8_t byte = src[i * (k / 2) + j / 2];
              const uint8_t c = (j % 2 == 0) ? (byte & 0xf) : (byte >> 4);
              uint8_t code;
              bool exact;
              float value = 0.0f;
              if (offset < kTinyOffset) {
                code = (c & 8) ? 0x80 : 0x00;  // rounds to a signed zero
                exact = (c & 7) == 0;
              } else {
                const int t = (offset - kTinyOffset) * 16 + c;
                value = tab_value[t];
                code = tab_code[t];
                exact = tab_exact[t] != 0;
              }
              q[i * k + j] = code;
              if (!exact) {
                if (n_rounded[nb]++ == 0)
                  first[nb] = Inexact{i, j, value, e4m3_to_f32(code), offset};
              }
            }
          }
        }
      }
    }
  }, 1);

  for (int64_t nb = 0; nb < n_nb; ++nb) out.n_rounded += n_rounded[nb];
  if (out.n_rounded > 0 && policy == Fp4ToFp8Policy::kExact) {
    const Inexact& f = *std::find_if(first.begin(), first.end(),
                                     [](const Inexact& e) { return e.row >= 0; });
    std::ostringstream msg;
    msg << "FP4 expert tensor '" << name << "' has no exact FP8 128x128-block form: "
        << out.n_rounded << " value(s) fall below e4m3's resolution, first at [" << f.row
        << ", " << f.col << "] in block [" << f.row / kFp8Block << ", " << f.col / kFp8Block
        << "] (" << f.value << " * block scale would round to " << f.rounded
        << "; its 32-block scale is 2^" << f.offset
        << " of the block scale, whose 32-block scales span 2^15 or more)";
    THROW(kInvalidInput) << msg.str();
  }
  return out;
}

}  // namespace deepinfer
