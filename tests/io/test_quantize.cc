#include <gtest/gtest.h>

#include <cmath>

#include "io/dequant.h"
#include "io/quantize.h"
#include "io/weight_loader.h"
#include "io_test_util.h"

namespace deepinfer {
namespace {

// Random values whose magnitude varies by block row so that blocks get different scales;
// one block row is all zero.
Tensor varied(int64_t n, int64_t k, int64_t zero_row_begin, int64_t zero_row_end, uint32_t seed) {
  Tensor w = test::random_f32({n, k}, seed);
  for (int64_t i = 0; i < n; ++i) {
    const float mag = std::ldexp(1.0f, static_cast<int>(i % 7) * 3 - 9);
    for (int64_t j = 0; j < k; ++j) {
      w.f32()[i * k + j] = (i >= zero_row_begin && i < zero_row_end) ? 0.0f : w.f32()[i * k + j] * mag;
    }
  }
  return w;
}

TEST(Quantize, Fp8BlockScalesAreMinimalPowersOfTwoAndErrorsBounded) {
  const int64_t n = 130, k = 300, b = 64;  // partial blocks on both axes
  const Tensor w = varied(n, k, 64, 128, 1);
  const QuantizedWeight q = quantize_fp8_block(w, b, b);
  ASSERT_EQ(q.scale.shape(), (Shape{3, 5}));
  const Tensor d = dequant_fp8_block(q.weight, q.scale, b, b, "w");
  for (int64_t bi = 0; bi < 3; ++bi) {
    for (int64_t bj = 0; bj < 5; ++bj) {
      const float s = e8m0_to_f32(q.scale.data<uint8_t>()[bi * 5 + bj]);
      float amax = 0;
      for (int64_t i = bi * b; i < std::min(n, (bi + 1) * b); ++i) {
        for (int64_t j = bj * b; j < std::min(k, (bj + 1) * b); ++j) {
          const float x = w.f32()[i * k + j], y = d.f32()[i * k + j];
          amax = std::max(amax, std::fabs(x));
          EXPECT_LE(std::fabs(y - x), std::ldexp(std::fabs(x), -4) + std::ldexp(s, -10)) << i << "," << j;
        }
      }
      if (amax == 0) {
        EXPECT_EQ(s, 1.0f);  // zero block: scale 1, codes zero
      } else {
        EXPECT_GT(amax / s, kE4M3Max / 2);
        EXPECT_LE(amax / s, kE4M3Max);
      }
    }
  }
  for (int64_t i = 64; i < 128; ++i) {
    for (int64_t j = 0; j < k; ++j) EXPECT_EQ(d.f32()[i * k + j], 0.0f);
  }
  // Quantising the dequantised tensor returns the same values.
  const QuantizedWeight q2 = quantize_fp8_block(d, b, b);
  EXPECT_TRUE(test::same_bytes(dequant_fp8_block(q2.weight, q2.scale, b, b, "w"), d));
}

TEST(Quantize, Fp4ScalesPerThirtyTwoAndErrorsBounded) {
  const int64_t n = 9, k = 80;  // last scale block holds 16 values
  const Tensor w = varied(n, k, 4, 5, 2);
  const QuantizedWeight q = quantize_fp4(w);
  ASSERT_EQ(q.weight.shape(), (Shape{9, 40}));
  ASSERT_EQ(q.scale.shape(), (Shape{9, 3}));
  const Tensor d = dequant_fp4(q.weight, q.scale, "w");
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t bj = 0; bj < 3; ++bj) {
      const float s = e8m0_to_f32(q.scale.data<uint8_t>()[i * 3 + bj]);
      float amax = 0;
      for (int64_t j = bj * 32; j < std::min(k, (bj + 1) * 32); ++j) {
        const float x = w.f32()[i * k + j], y = d.f32()[i * k + j];
        amax = std::max(amax, std::fabs(x));
        EXPECT_LE(std::fabs(y - x), 0.25f * std::fabs(x) + 0.25f * s) << i << "," << j;
      }
      if (amax == 0) {
        EXPECT_EQ(s, 1.0f);
      } else {
        EXPECT_GT(amax / s, kE2M1Max / 2);
        EXPECT_LE(amax / s, kE2M1Max);
      }
    }
  }
  const QuantizedWeight q2 = quantize_fp4(d);
  EXPECT_TRUE(test::same_bytes(dequant_fp4(q2.weight, q2.scale, "w"), d));
}

TEST(Quantize, RepresentableValuesRoundTripExactly) {
  // Every e2m1 magnitude times 2^3 in one 32-block (amax 6 * 8 -> scale 8).
  Tensor w = Tensor::zeros(DType::F32, {1, 32});
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int j = 0; j < 16; ++j) w.f32()[j] = (j % 2 ? -1.0f : 1.0f) * grid[j % 8] * 8;
  const QuantizedWeight q = quantize_fp4(w);
  EXPECT_EQ(q.scale.data<uint8_t>()[0], 130);
  EXPECT_TRUE(test::same_bytes(dequant_fp4(q.weight, q.scale, "w"), w));
}

TEST(Quantize, QuantisedCheckpointLoadsToTheDequantisedValues) {
  const Tensor w = varied(200, 136, 0, 0, 3);
  const QuantizedWeight dense = quantize_fp8_block(w, 128, 128);
  const QuantizedWeight expert = quantize_fp4(w);
  test::TempDir dir;
  write_safetensors(dir.file("model.safetensors"),
                    {{"layers.0.attn.wo_b.weight", dense.weight}, {"layers.0.attn.wo_b.scale", dense.scale},
                     {"layers.0.ffn.experts.5.w2.weight", expert.weight},
                     {"layers.0.ffn.experts.5.w2.scale", expert.scale}});
  LoadOptions quiet;
  quiet.progress = LoadOptions::Progress::kOff;
  WeightStore store = WeightStore::load(dir.str(), {}, quiet);
  EXPECT_TRUE(test::same_bytes(store.take("layers.0.attn.wo_b.weight", {200, 136}),
                               dequant_fp8_block(dense.weight, dense.scale, 128, 128, "w")));
  EXPECT_TRUE(test::same_bytes(store.take("layers.0.ffn.experts.5.w2.weight", {200, 136}),
                               dequant_fp4(expert.weight, expert.scale, "w")));
}

}  // namespace
}  // namespace deepinfer
