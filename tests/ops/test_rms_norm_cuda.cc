// rms_norm_cuda vs rms_norm_ref: awkward and V4-Flash sizes, strided rows, with and without
// weight, in place, NaN-poisoned outputs. fp32 sums (tree order) vs the reference's double:
// relative differences ~1e-7, so NMSE < 1e-11.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/rms_norm/rms_norm.h"
#include "ops/rms_norm/rms_norm_cuda.h"

namespace deepinfer {
namespace {

void check(std::mt19937_64& rng, int64_t n_rows, int64_t n, int64_t stride, bool weighted,
           bool in_place) {
  SCOPED_TRACE(testing::Message() << "rows " << n_rows << " n " << n << " stride " << stride
                                  << (weighted ? " weighted" : "") << (in_place ? " in-place" : ""));
  const auto x = test::randn(rng, n_rows * stride, 3.0f);
  const auto w = test::randn(rng, n, 1.0f);
  std::vector<float> ref = x;  // padding between rows must stay untouched
  rms_norm_ref(x.data(), weighted ? w.data() : nullptr, n_rows, n, stride, 1e-6f, ref.data());
  Tensor xd = test::upload_f32(x), wd = test::upload_f32(w);
  Tensor yd = in_place ? xd : test::upload_f32(x);
  if (!in_place) {  // poison the row contents only
    std::vector<float> poison = x;
    for (int64_t r = 0; r < n_rows; ++r)
      for (int64_t i = 0; i < n; ++i) poison[r * stride + i] = NAN;
    yd = test::upload_f32(poison);
  }
  rms_norm_cuda(nullptr, xd.data<float>(), weighted ? wd.data<float>() : nullptr, n_rows, n,
                stride, 1e-6f, yd.data<float>());
  const auto out = test::download_f32(yd);
  EXPECT_LT(test::nmse(out.data(), ref.data(), n_rows * stride), 1e-11);
}

TEST(RmsNormCuda, MatchesReference) {
  auto rng = test::fresh_rng();
  for (auto [rows, n, stride] : {std::tuple<int64_t, int64_t, int64_t>{1, 4096, 4096},
                                 {3, 1, 1}, {17, 100, 130}, {257, 1024, 1024},
                                 {5 * 64, 512, 512}, {7, 1500, 1501}, {2, 7168, 7168}})
    for (bool weighted : {true, false})
      for (bool in_place : {false, true}) check(rng, rows, n, stride, weighted, in_place);
}

}  // namespace
}  // namespace deepinfer
