// rope_cuda vs RopeTable::apply_heads: both V4 tables (theta 10000; theta 160000 + YaRN),
// many heads, positions up to 1M, forward and inverse, and forward-then-inverse = identity.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/rope/rope.h"
#include "ops/rope/rope_cuda.h"

namespace deepinfer {
namespace {

RopeParams v4_params(bool compressed) {
  RopeParams p;
  p.rope_dim = 64;
  if (compressed) {
    p.theta = 160000.0;
    p.yarn = true;
    p.yarn_factor = 16.0;
    p.yarn_original_max_position = 65536;
  }
  return p;
}

TEST(RopeCuda, MatchesReference) {
  auto rng = test::fresh_rng();
  std::uniform_int_distribution<int32_t> pos_dist(0, 1 << 20);
  for (bool compressed : {false, true}) {
    const RopeTable table(v4_params(compressed));
    const Tensor inv_freq = test::upload_f32(table.inv_freq());
    for (auto [tokens, heads, head_dim] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 512},
                                           {17, 1, 512}, {3, 5, 70}, {129, 64, 512}}) {
      for (bool inverse : {false, true}) {
        SCOPED_TRACE(testing::Message() << "tokens " << tokens << " heads " << heads << " dim "
                                        << head_dim << (compressed ? " yarn" : "")
                                        << (inverse ? " inverse" : ""));
        std::vector<int32_t> pos(tokens);
        for (auto& p : pos) p = pos_dist(rng);
        pos[0] = 0;
        const auto x = test::randn(rng, tokens * heads * head_dim);
        std::vector<float> ref = x;
        for (int64_t t = 0; t < tokens; ++t)
          table.apply_heads(ref.data() + t * heads * head_dim, heads, head_dim, pos[t], inverse);
        Tensor xd = test::upload_f32(x);
        const Tensor pd = test::upload_i32(pos);
        rope_cuda(nullptr, xd.data<float>(), pd.data<int32_t>(), tokens, heads, head_dim, 64,
                  inv_freq.data<float>(), inverse);
        const auto out = test::download_f32(xd);
        EXPECT_LT(test::nmse(out.data(), ref.data(), x.size()), 1e-12);
        // The non-rope part is untouched.
        for (int64_t i = 0; i < tokens * heads; ++i)
          for (int64_t d = 0; d < head_dim - 64; ++d)
            ASSERT_EQ(out[i * head_dim + d], x[i * head_dim + d]);
        // Inverse of the forward result returns the input.
        if (!inverse) {
          rope_cuda(nullptr, xd.data<float>(), pd.data<int32_t>(), tokens, heads, head_dim, 64,
                    inv_freq.data<float>(), true);
          const auto back = test::download_f32(xd);
          EXPECT_LT(test::nmse(back.data(), x.data(), x.size()), 1e-12);
        }
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer
