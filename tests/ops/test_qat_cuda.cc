// QAT round trips on the GPU vs qat.h's CPU functions: identical values for FP8 rows
// (partial last blocks, strided rows, tiny and large magnitudes, values at the saturation
// limit) and for Hadamard + FP4 vectors (sizes 32..4096, V4's indexer 128).
#include <gtest/gtest.h>

#include <cstring>

#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/quant/qat.h"
#include "ops/quant/qat_cuda.h"

namespace deepinfer {
namespace {

std::vector<float> awkward_values(std::mt19937_64& rng, int64_t n) {
  auto v = test::randn(rng, n, 1.0f);
  std::uniform_int_distribution<int> e(-30, 12), kind(0, 9);
  for (auto& x : v) {
    const int k = kind(rng);
    if (k == 0) x = 0.0f;
    else if (k == 1) x = -0.0f;
    else x = std::ldexp(x, e(rng));
  }
  return v;
}

// Elements whose values differ (+0 and -0 count as equal; no NaNs are produced).
int64_t count_bit_diffs(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += !(a[i] == b[i]);
  return n;
}

TEST(QatCuda, Fp8RowsBitExact) {
  auto rng = test::fresh_rng();
  for (auto [rows, stride, n, block] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 1, 1, 64},
                                        {7, 100, 96, 64}, {33, 512, 448, 64}, {5, 130, 129, 128},
                                        {300, 512, 448, 64}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << n << " stride " << stride << " block " << block);
    auto x = awkward_values(rng, rows * stride);
    for (int64_t r = 0; r < rows; r += 3) x[r * stride] = 1e6f;  // saturating block
    auto ref = x;
    for (int64_t r = 0; r < rows; ++r) fp8_roundtrip(&ref[r * stride], n, block);
    Tensor xd = test::upload_f32(x);
    fp8_roundtrip_rows_cuda(nullptr, xd.data<float>(), rows, stride, n, block);
    EXPECT_EQ(count_bit_diffs(test::download_f32(xd), ref), 0);
  }
}

TEST(QatCuda, HadamardFp4BitExact) {
  auto rng = test::fresh_rng();
  for (auto [vectors, n] : {std::pair<int64_t, int64_t>{1, 32}, {17, 128}, {64 * 5, 128},
                            {3, 512}, {2, 4096}}) {
    SCOPED_TRACE(testing::Message() << vectors << " x " << n);
    const auto x = awkward_values(rng, vectors * n);
    auto ref = x;
    for (int64_t v = 0; v < vectors; ++v) {
      hadamard_transform(&ref[v * n], n);
      fp4_roundtrip(&ref[v * n], n, 32);
    }
    Tensor xd = test::upload_f32(x);
    hadamard_fp4_rows_cuda(nullptr, xd.data<float>(), vectors, n, 32);
    EXPECT_EQ(count_bit_diffs(test::download_f32(xd), ref), 0);
  }
}

}  // namespace
}  // namespace deepinfer
