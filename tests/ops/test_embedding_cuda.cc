// embedding_cuda vs a host gather: every (row, copy) gets the token's table row, bit for
// bit, including repeated tokens, the first and last ids, and V4-Flash's hidden 4096 with
// its 4 mHC copies. NaN-poisoned output.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/embedding/embedding_cuda.h"

namespace deepinfer {
namespace {

void check(std::mt19937_64& rng, int64_t vocab, int64_t dim, int64_t n_rows, int64_t copies) {
  SCOPED_TRACE(testing::Message() << "V " << vocab << " dim " << dim << " rows " << n_rows
                                  << " copies " << copies);
  const auto table = test::randn(rng, vocab * dim);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> tokens(n_rows);
  for (auto& t : tokens) t = tok(rng);
  tokens[0] = 0;
  if (n_rows > 1) tokens[n_rows - 1] = static_cast<int32_t>(vocab - 1);
  if (n_rows > 2) tokens[1] = tokens[2];
  Tensor td = test::upload_f32(table), kd = test::upload_i32(tokens);
  Tensor out = test::poisoned_f32(n_rows * copies * dim);
  embedding_cuda(nullptr, td.data<float>(), kd.data<int32_t>(), n_rows, dim, copies, out.data<float>());
  const auto got = test::download_f32(out);
  std::vector<float> ref(n_rows * copies * dim);
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t j = 0; j < copies; ++j)
      for (int64_t c = 0; c < dim; ++c) ref[(r * copies + j) * dim + c] = table[tokens[r] * dim + c];
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0);
}

TEST(EmbeddingCuda, MatchesGather) {
  auto rng = test::fresh_rng();
  check(rng, 7, 3, 1, 1);
  check(rng, 300, 100, 37, 4);
  check(rng, 4096, 4096, 65, 4);  // V4-Flash hidden (vocabulary cut for the test's memory)
}

}  // namespace
}  // namespace deepinfer
