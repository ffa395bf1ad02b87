// act_quant_ref: its dequantised output must equal the QAT FP8 round trip (ops/quant/qat.h,
// written separately from the spec), its scales must be powers of two that bound the block,
// and both scale layouts must hold the same values.
#include <gtest/gtest.h>

#include <cmath>

#include "op_test_util.h"
#include "ops/quant/act_quant.h"
#include "ops/quant/qat.h"

namespace deepinfer {
namespace {

TEST(ActQuantRef, DequantisedEqualsFp8Roundtrip) {
  auto rng = test::fresh_rng();
  std::uniform_int_distribution<int> exp_dist(-30, 30);
  for (int64_t block : {128, 32}) {
    for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 128}, {3, 336}, {17, 1000}}) {
      auto x = test::randn(rng, m * k);
      for (int64_t r = 0; r < m; ++r) {  // rows of very different magnitudes
        const float f = std::ldexp(1.0f, exp_dist(rng));
        for (int64_t i = 0; i < k; ++i) x[r * k + i] *= f;
      }
      for (int64_t i = 0; i < std::min<int64_t>(k, 40); ++i) x[i] = 0.0f;  // a zero block start
      const int64_t n_kb = (k + block - 1) / block;
      std::vector<uint8_t> q(m * k);
      std::vector<float> s(m * n_kb), s_t(m * n_kb);
      act_quant_ref(x.data(), m, k, block, q.data(), s.data(), ScaleLayout::kRowMajor);
      std::vector<uint8_t> q2(m * k);
      act_quant_ref(x.data(), m, k, block, q2.data(), s_t.data(), ScaleLayout::kBlockMajor);
      EXPECT_EQ(q, q2);

      for (int64_t r = 0; r < m; ++r) {
        std::vector<float> row(x.begin() + r * k, x.begin() + (r + 1) * k);
        fp8_roundtrip(row.data(), k, block);
        for (int64_t kb = 0; kb < n_kb; ++kb) {
          const float sc = s[r * n_kb + kb];
          ASSERT_EQ(sc, s_t[kb * m + r]);
          int e;
          ASSERT_EQ(std::frexp(sc, &e), 0.5f) << "scale " << sc << " is not a power of two";
          for (int64_t i = kb * block; i < std::min(k, kb * block + block); ++i) {
            ASSERT_LE(std::fabs(x[r * k + i]) / sc, kE4M3Max);
            ASSERT_EQ(e4m3_to_f32(q[r * k + i]) * sc, row[i])
                << "row " << r << " col " << i << " x " << x[r * k + i];
          }
        }
      }
    }
  }
}

TEST(ActQuantRef, Bf16InputMatchesF32Input) {
  auto rng = test::fresh_rng();
  const int64_t m = 5, k = 384;
  const auto xb = test::to_bf16(test::randn(rng, m * k, 10.0f));
  std::vector<float> xf(m * k);
  for (int64_t i = 0; i < m * k; ++i) xf[i] = bf16_to_f32(xb[i]);
  std::vector<uint8_t> q1(m * k), q2(m * k);
  std::vector<float> s1(m * 3), s2(m * 3);
  act_quant_ref(xf.data(), m, k, 128, q1.data(), s1.data());
  act_quant_bf16_ref(xb.data(), m, k, 128, q2.data(), s2.data());
  EXPECT_EQ(q1, q2);
  EXPECT_EQ(s1, s2);
}

}  // namespace
}  // namespace deepinfer
