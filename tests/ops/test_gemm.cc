// CPU references of ops/gemm against plain double-precision loops over the dequantised
// inputs (products of bf16/e4m3 values are exact, so only summation order differs).
#include <gtest/gtest.h>

#include "op_test_util.h"
#include "ops/gemm/gemm.h"
#include "ops/quant/act_quant.h"

namespace deepinfer {
namespace {

std::vector<float> matmul_nt_f64(const std::vector<float>& x, const std::vector<float>& w,
                                 int64_t m, int64_t n, int64_t k) {
  std::vector<float> y(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t t = 0; t < k; ++t) acc += static_cast<double>(x[i * k + t]) * w[j * k + t];
      y[i * n + j] = static_cast<float>(acc);
    }
  return y;
}

TEST(GemmRef, Bf16MatchesDoubleLoops) {
  auto rng = test::fresh_rng();
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 7, 5}, {3, 130, 257},
                         {17, 64, 1000}}) {
    const auto xb = test::to_bf16(test::randn(rng, m * k));
    const auto wb = test::to_bf16(test::randn(rng, n * k));
    std::vector<float> xf(m * k), wf(n * k);
    for (int64_t i = 0; i < m * k; ++i) xf[i] = bf16_to_f32(xb[i]);
    for (int64_t i = 0; i < n * k; ++i) wf[i] = bf16_to_f32(wb[i]);
    std::vector<float> y(m * n, NAN);
    gemm_bf16_ref(xb.data(), wb.data(), m, n, k, y.data());
    const auto ref = matmul_nt_f64(xf, wf, m, n, k);
    EXPECT_LT(test::nmse(y.data(), ref.data(), m * n), 1e-11) << m << "x" << n << "x" << k;
  }
}

TEST(GemmRef, Fp8BlockMatchesDequantisedDoubleLoops) {
  auto rng = test::fresh_rng();
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 128, 128}, {3, 200, 336},
                         {17, 257, 512}}) {
    std::vector<uint8_t> wq, xq(m * k);
    std::vector<float> sw, sx((k + 127) / 128 * m);
    test::quantize_weight_blocks(test::randn(rng, n * k, 0.02f), n, k, &wq, &sw);
    const auto x = test::randn(rng, m * k, 3.0f);
    act_quant_ref(x.data(), m, k, 128, xq.data(), sx.data(), ScaleLayout::kRowMajor);

    const int64_t n_kb = (k + 127) / 128;
    std::vector<float> xd(m * k), wd(n * k);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t t = 0; t < k; ++t) xd[i * k + t] = e4m3_to_f32(xq[i * k + t]) * sx[i * n_kb + t / 128];
    for (int64_t j = 0; j < n; ++j)
      for (int64_t t = 0; t < k; ++t)
        wd[j * k + t] = e4m3_to_f32(wq[j * k + t]) * sw[(j / 128) * n_kb + t / 128];

    std::vector<float> y(m * n, NAN);
    gemm_fp8_block_ref(xq.data(), sx.data(), wq.data(), sw.data(), m, n, k, y.data());
    const auto ref = matmul_nt_f64(xd, wd, m, n, k);
    EXPECT_LT(test::nmse(y.data(), ref.data(), m * n), 1e-11) << m << "x" << n << "x" << k;
  }
}

TEST(GemmRef, WeightScaleExpansionPadsToFour) {
  // N = 300 -> 3 row blocks; K = 700 -> 6 K blocks, padded to 8.
  const int64_t n = 300, k = 700;
  std::vector<uint8_t> s(3 * 6);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(120 + i);
  const auto f = expand_weight_scales_ue8m0(s.data(), n, k);
  ASSERT_EQ(fp8_weight_scale_ld(k), 8);
  ASSERT_EQ(f.size(), 3u * 8u);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 6; ++j)
      EXPECT_EQ(f[i * 8 + j], std::ldexp(1.0f, static_cast<int>(120 + i * 6 + j) - 127));
  const uint8_t bad[1] = {255};
  EXPECT_THROW(expand_weight_scales_ue8m0(bad, 1, 1), Error);
}

}  // namespace
}  // namespace deepinfer
