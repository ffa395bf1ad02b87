// The official-numerics roundings (MODEL_SPEC §A.10, §B.4, §E.10-11) tested directly.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "ops/mhc/mhc.h"
#include "ops/quant/qat.h"
#include "ops/rope/rope.h"

namespace deepinfer {
namespace {

std::vector<float> randn(int64_t n, uint32_t seed, float std = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, std);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

bool is_pow2(float s) {
  int e;
  return std::frexp(s, &e) == 0.5f;
}

TEST(Qat, Fp8RoundTripIsIdempotentWithPowerOfTwoScales) {
  for (float std : {1e-3f, 1.0f, 300.0f}) {
    auto x = randn(448, 1, std);
    fp8_roundtrip(x.data(), 448, 64);
    auto again = x;
    fp8_roundtrip(again.data(), 448, 64);
    EXPECT_EQ(again, x) << "std " << std;
    for (int64_t b = 0; b < 448; b += 64) {
      float amax = 1e-4f;
      for (int64_t i = b; i < b + 64; ++i) amax = std::max(amax, std::abs(x[i]));
      const float s = pow2_scale(amax, kE4M3Max);
      EXPECT_TRUE(is_pow2(s));
      for (int64_t i = b; i < b + 64; ++i) EXPECT_EQ(round_e4m3(x[i] / s) * s, x[i]);  // on the grid
    }
  }
}

TEST(Qat, Fp4RoundTripIsIdempotentOnTheE2M1Grid) {
  auto x = randn(256, 2);
  fp4_roundtrip(x.data(), 256, 32);
  auto again = x;
  fp4_roundtrip(again.data(), 256, 32);
  EXPECT_EQ(again, x);
  for (int64_t b = 0; b < 256; b += 32) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + 32; ++i) amax = std::max(amax, std::abs(x[i]));
    const float s = pow2_scale(amax, kE2M1Max);
    for (int64_t i = b; i < b + 32; ++i) EXPECT_EQ(round_e2m1(x[i] / s) * s, x[i]);
  }
}

TEST(Qat, ZeroBlocksStayZero) {
  std::vector<float> z(128, 0.0f);
  fp8_roundtrip(z.data(), 128, 64);
  fp4_roundtrip(z.data(), 128, 32);
  for (float v : z) EXPECT_EQ(v, 0.0f);
}

TEST(Qat, PowerOfTwoScaleIsTheCeilingOfLog2) {
  EXPECT_EQ(pow2_scale(448.0f, 448.0f), 1.0f);
  EXPECT_EQ(pow2_scale(449.0f, 448.0f), 2.0f);
  EXPECT_EQ(pow2_scale(6.0f, 6.0f), 1.0f);
  EXPECT_EQ(pow2_scale(3.0f, 6.0f), 0.5f);
  EXPECT_EQ(pow2_scale(3.1f, 6.0f), 1.0f);
}

TEST(Qat, HadamardIsOrthonormalAndSelfInverse) {
  auto x = randn(128, 3);
  auto y = x;
  hadamard_transform(y.data(), 128);
  double nx = 0, ny = 0;
  for (int i = 0; i < 128; ++i) nx += x[i] * x[i], ny += y[i] * y[i];
  EXPECT_NEAR(nx, ny, 1e-4 * nx);
  hadamard_transform(y.data(), 128);
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(y[i], x[i], 1e-5f);
  EXPECT_THROW(hadamard_transform(y.data(), 96), Error);
}

TEST(Rope, ForwardThenInverseIsIdentityAndYarnRangeMatchesSpec) {
  RopeParams p;
  p.rope_dim = 64;
  p.theta = 160000;
  p.yarn = true;
  p.yarn_factor = 16;
  p.yarn_original_max_position = 65536;
  RopeTable yarn(p);
  p.yarn = false;
  RopeTable plain(p);
  // MODEL_SPEC §A.4: low = 15, high = 25 for V4's compressed layers.
  for (int i = 0; i < 32; ++i) {
    const float ratio = yarn.inv_freq()[i] / plain.inv_freq()[i];
    if (i <= 15) EXPECT_FLOAT_EQ(ratio, 1.0f) << i;
    if (i >= 25) EXPECT_NEAR(ratio, 1.0f / 16, 1e-6) << i;
    if (i > 15 && i < 25) EXPECT_TRUE(ratio < 1.0f && ratio > 1.0f / 16) << i;
  }
  auto x = randn(64, 4);
  auto y = x;
  yarn.apply(y.data(), 12345);
  yarn.apply(y.data(), 12345, /*inverse=*/true);
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(y[i], x[i], 1e-5f);
}

TEST(Mhc, SinkhornColumnsSumToOneAndEntriesArePositive) {
  HcMixParams p{4, 32, 20, 1e-6f, 1e-6f};
  const int64_t n = 5, n_mix = 24;
  auto x = randn(n * 4 * 32, 5), fn = randn(n_mix * 4 * 32, 6, 0.2f), base = randn(n_mix, 7);
  std::vector<float> scale = {0.5f, 0.7f, 2.0f}, pre(n * 4), post(n * 4), comb(n * 16);
  hc_mix_ref(x.data(), n, fn.data(), base.data(), scale.data(), p, pre.data(), post.data(), comb.data());
  for (int64_t r = 0; r < n; ++r) {
    for (int k = 0; k < 4; ++k) {
      float col = 0.0f;
      for (int j = 0; j < 4; ++j) {
        EXPECT_GT(comb[r * 16 + j * 4 + k], 0.0f);
        col += comb[r * 16 + j * 4 + k];
      }
      EXPECT_NEAR(col, 1.0f, 1e-5f);
      EXPECT_GT(post[r * 4 + k], 0.0f);
      EXPECT_LT(post[r * 4 + k], 2.0f);
      EXPECT_GT(pre[r * 4 + k], 0.0f);
    }
  }
}

}  // namespace
}  // namespace deepinfer
