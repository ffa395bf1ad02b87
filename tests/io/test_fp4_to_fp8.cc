// FP4 experts -> block-FP8 at load (io/fp4_to_fp8.h): exact conversions dequantise to the
// same bits as the FP4 tensor (io/dequant.h's dequant_fp4), the 128x128 scale is the
// block's largest 32-block scale / 2^6 as in DeepSeek's convert.py, a block whose 32-block
// scales span 2^15 makes 0.5 and 1.5 fall off e4m3's grid (error naming the tensor, or
// round-to-nearest-even under kRound), and bad scales are rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "io/dequant.h"
#include "io/fp4_to_fp8.h"
#include "io_test_util.h"

namespace deepinfer {
namespace {

struct Fp4 {
  Tensor packed;  // U8 [n, k/2]
  Tensor scale;   // F8_E8M0 [n, ceil(k/32)]
};

// Random codes; the 32-block scale codes are drawn from [lo, hi].
Fp4 random_fp4(int64_t n, int64_t k, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  Fp4 f{Tensor::empty(DType::U8, {n, k / 2}), Tensor::empty(DType::F8_E8M0, {n, (k + 31) / 32})};
  auto* p = static_cast<uint8_t*>(f.packed.raw());
  for (int64_t i = 0; i < f.packed.numel(); ++i) p[i] = static_cast<uint8_t>(rng());
  std::uniform_int_distribution<int> code(lo, hi);
  auto* s = static_cast<uint8_t*>(f.scale.raw());
  for (int64_t i = 0; i < f.scale.numel(); ++i) s[i] = static_cast<uint8_t>(code(rng));
  return f;
}

uint8_t& nibble_byte(Fp4& f, int64_t i, int64_t j) {
  return static_cast<uint8_t*>(f.packed.raw())[i * f.packed.size(1) + j / 2];
}
void set_code(Fp4& f, int64_t i, int64_t j, uint8_t c) {
  uint8_t& b = nibble_byte(f, i, j);
  b = (j % 2 == 0) ? static_cast<uint8_t>((b & 0xf0) | c)
                   : static_cast<uint8_t>((b & 0x0f) | (c << 4));
}
uint8_t& scale_at(Fp4& f, int64_t i, int64_t sb) {
  return static_cast<uint8_t*>(f.scale.raw())[i * f.scale.size(1) + sb];
}

TEST(Fp4ToFp8, ExactConversionKeepsEveryValue) {
  // Partial blocks on both axes: 200 rows (128 + 72), 320 columns (128 + 128 + 64).
  for (auto [n, k] : {std::pair<int64_t, int64_t>{200, 320}, {256, 512}, {3, 64}}) {
    SCOPED_TRACE(testing::Message() << n << "x" << k);
    Fp4 f = random_fp4(n, k, 113, 127, static_cast<uint32_t>(n * k));  // span 2^14: exact
    const Fp8BlockWeight w = fp4_to_fp8_block(f.packed, f.scale, "experts.0.w1");
    EXPECT_EQ(w.n_rounded, 0);
    ASSERT_EQ(w.weight.shape(), (Shape{n, k}));
    ASSERT_EQ(w.scale.shape(), (Shape{(n + 127) / 128, (k + 127) / 128}));
    EXPECT_TRUE(test::same_bytes(dequant_fp8_block(w.weight, w.scale, 128, 128, "w"),
                                 dequant_fp4(f.packed, f.scale, "w")));
    // New scale = max 32-block scale / 2^6 (convert.py's MAX_OFFSET_BITS).
    for (int64_t nb = 0; nb < w.scale.size(0); ++nb) {
      for (int64_t kb = 0; kb < w.scale.size(1); ++kb) {
        int mx = 0;
        for (int64_t i = nb * 128; i < std::min(n, nb * 128 + 128); ++i)
          for (int64_t s = kb * 4; s < std::min(f.scale.size(1), kb * 4 + 4); ++s)
            mx = std::max<int>(mx, scale_at(f, i, s));
        EXPECT_EQ(w.scale.data<uint8_t>()[nb * w.scale.size(1) + kb], mx - 6);
      }
    }
  }
}

TEST(Fp4ToFp8, WideScaleSpanIsInexactAndNamed) {
  const int64_t n = 128, k = 256;
  Fp4 f = random_fp4(n, k, 127, 127, 7);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) set_code(f, i, j, 2);  // 1.0 everywhere
  scale_at(f, 5, 1) = 140;  // block (0, 0): max 140, new scale 134
  scale_at(f, 9, 2) = 140 - 15;  // offset 2^-9: 1.0 and 3.0 stay exact, 0.5 and 1.5 do not
  set_code(f, 9, 64, 4);   // 2.0 -> 2^-8: exact
  set_code(f, 9, 65, 5);   // 3.0 -> 3 * 2^-9: exact (subnormal 3)
  {
    const Fp8BlockWeight w = fp4_to_fp8_block(f.packed, f.scale, "layers.3.ffn.experts.7.w2");
    EXPECT_EQ(w.n_rounded, 0);
    EXPECT_TRUE(test::same_bytes(dequant_fp8_block(w.weight, w.scale, 128, 128, "w"),
                                 dequant_fp4(f.packed, f.scale, "w")));
  }
  set_code(f, 9, 70, 1);        // 0.5 -> 2^-10: a tie between 0 and 2^-9, rounds to 0
  set_code(f, 9, 71, 8 | 3);    // -1.5 -> -3 * 2^-10: a tie, rounds to -2^-8 (even)
  test::expect_error([&] { fp4_to_fp8_block(f.packed, f.scale, "layers.3.ffn.experts.7.w2"); },
                     ErrorKind::kInvalidInput,
                     {"layers.3.ffn.experts.7.w2", "2 value(s)", "[9, 70]"});
  const Fp8BlockWeight w = fp4_to_fp8_block(f.packed, f.scale, "w", Fp4ToFp8Policy::kRound);
  EXPECT_EQ(w.n_rounded, 2);
  const Tensor d = dequant_fp8_block(w.weight, w.scale, 128, 128, "w");
  const Tensor ref = dequant_fp4(f.packed, f.scale, "w");
  const float block_scale = std::ldexp(1.0f, 134 - 127);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      const float got = d.f32()[i * k + j];
      if (i == 9 && j == 70) {
        EXPECT_EQ(got, 0.0f);
      } else if (i == 9 && j == 71) {
        EXPECT_EQ(got, -std::ldexp(1.0f, -8) * block_scale);
      } else {
        ASSERT_EQ(got, ref.f32()[i * k + j]) << i << "," << j;
      }
    }
  }
}

TEST(Fp4ToFp8, FarBelowTheBlockScaleRoundsToSignedZero) {
  Fp4 f = random_fp4(4, 128, 250, 250, 3);
  scale_at(f, 1, 1) = 1;  // 2^-243 of the block scale
  set_code(f, 1, 32, 8 | 7);   // -6 -> -0
  set_code(f, 1, 33, 0);       // +0 stays exact
  for (int64_t j = 34; j < 64; ++j) set_code(f, 1, j, 0);
  const Fp8BlockWeight w = fp4_to_fp8_block(f.packed, f.scale, "w", Fp4ToFp8Policy::kRound);
  EXPECT_EQ(w.n_rounded, 1);
  EXPECT_EQ(w.weight.data<uint8_t>()[1 * 128 + 32], 0x80);
  EXPECT_EQ(w.weight.data<uint8_t>()[1 * 128 + 33], 0x00);
  test::expect_error([&] { fp4_to_fp8_block(f.packed, f.scale, "mtp.0.ffn.experts.1.w3"); },
                     ErrorKind::kInvalidInput, {"mtp.0.ffn.experts.1.w3", "[1, 32]"});
}

TEST(Fp4ToFp8, RejectsBadScales) {
  Fp4 f = random_fp4(8, 64, 120, 130, 1);
  scale_at(f, 2, 1) = 255;
  test::expect_error([&] { fp4_to_fp8_block(f.packed, f.scale, "experts.2.w1"); },
                     ErrorKind::kInvalidInput, {"experts.2.w1", "NaN"});
  const Tensor wrong = Tensor::zeros(DType::F8_E8M0, {8, 3});
  test::expect_error([&] { fp4_to_fp8_block(f.packed, wrong, "experts.2.w1"); },
                     ErrorKind::kInvalidInput, {"experts.2.w1", "[8, 2]"});
}

}  // namespace
}  // namespace deepinfer
