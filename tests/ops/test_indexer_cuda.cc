// Lightning indexer on the GPU vs indexer_scores_ref / topk_indices: scores over each
// sequence's compressed indexer entries (awkward sizes and V4-Flash's 64 heads x 128), and
// the exact top-k (same indices, ascending) including heavy ties, n < k, n == k, and k up
// to 1024 over up to 256K entries.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/indexer/indexer.h"
#include "ops/indexer/indexer_cuda.h"

namespace deepinfer {
namespace {

void check_scores(std::mt19937_64& rng, int64_t n_heads, int64_t head_dim,
                  const std::vector<int32_t>& pos, const std::vector<int32_t>& slot, int64_t n_slots) {
  SCOPED_TRACE(testing::Message() << "heads " << n_heads << " dim " << head_dim << " rows "
                                  << pos.size());
  const int64_t N = static_cast<int64_t>(pos.size()), ratio = 4;
  int64_t max_pos = 0;
  for (int32_t p : pos) max_pos = std::max<int64_t>(max_pos, p);
  const int64_t max_entries = (max_pos + 1) / ratio + 3;
  const auto q = test::randn(rng, N * n_heads * head_dim);
  const auto g = test::randn(rng, N * n_heads);
  const auto keys = test::randn(rng, n_slots * max_entries * head_dim);
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(n_heads));
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  Tensor qd = test::upload_f32(q), gd = test::upload_f32(g), kd = test::upload_f32(keys);
  Tensor pd = test::upload_i32(pos), sd = test::upload_i32(slot);
  Tensor out = test::poisoned_f32(N * max_entries);
  IndexerScoresParams p;
  p.q = qd.data<float>();
  p.g = gd.data<float>();
  p.n_rows = N;
  p.n_heads = n_heads;
  p.head_dim = head_dim;
  p.head_scale = head_scale;
  p.scale = scale;
  p.positions = pd.data<int32_t>();
  p.slot = sd.data<int32_t>();
  p.ratio = ratio;
  p.keys = kd.data<float>();
  p.max_entries = max_entries;
  p.scores = out.data<float>();
  p.score_stride = max_entries;
  indexer_scores_cuda(nullptr, p);
  const auto got = test::download_f32(out);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t n = (pos[r] + 1) / ratio;
    std::vector<float> gs(n_heads), ref(n);
    for (int64_t h = 0; h < n_heads; ++h) gs[h] = g[r * n_heads + h] * head_scale;
    indexer_scores_ref(&q[r * n_heads * head_dim], gs.data(), n_heads, head_dim,
                       &keys[slot[r] * max_entries * head_dim], n, scale, ref.data());
    EXPECT_LT(test::nmse(&got[r * max_entries], ref.data(), n), 1e-11) << "row " << r;
    for (int64_t s = n; s < max_entries; ++s) {
      EXPECT_TRUE(std::isnan(got[r * max_entries + s])) << "row " << r << " entry " << s << " written";
    }
  }
}

TEST(IndexerCuda, ScoresMatchReference) {
  auto rng = test::fresh_rng();
  check_scores(rng, 3, 32, {0, 3, 4, 17, 99}, {0, 1, 1, 0, 2}, 3);
  check_scores(rng, 8, 128, {159, 40, 7}, {0, 1, 0}, 2);
  check_scores(rng, 64, 128, {65535, 4000, 2047}, {1, 0, 2}, 3);  // V4-Flash
}

// Top-k of each row: scores drawn from `levels` distinct values when levels > 0 (ties).
void check_topk(std::mt19937_64& rng, const std::vector<int64_t>& n_keys, int64_t k, int levels) {
  SCOPED_TRACE(testing::Message() << "k " << k << " levels " << levels);
  const int64_t N = static_cast<int64_t>(n_keys.size());
  int64_t stride = 1;
  for (int64_t n : n_keys) stride = std::max(stride, n);
  std::vector<float> scores(N * stride, NAN);
  std::uniform_int_distribution<int> lvl(0, std::max(levels - 1, 0));
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t s = 0; s < n_keys[r]; ++s) {
      scores[r * stride + s] = levels > 0 ? static_cast<float>(lvl(rng)) * 0.25f - 2.0f : nd(rng);
    }
    if (n_keys[r] > 3) scores[r * stride + 1] = -0.0f, scores[r * stride + 2] = 0.0f;
  }
  std::vector<int32_t> nk(n_keys.begin(), n_keys.end());
  Tensor sd = test::upload_f32(scores), nkd = test::upload_i32(nk);
  Tensor seld = test::upload_i32(std::vector<int32_t>(N * k, -7));
  Tensor nsd = test::upload_i32(std::vector<int32_t>(N, -7));
  topk_rows_cuda(nullptr, sd.data<float>(), N, stride, nullptr, 0, nkd.data<int32_t>(), k,
                 seld.data<int32_t>(), nsd.data<int32_t>());
  std::vector<int32_t> sel(N * k), ns(N);
  cuda::copy_d2h(sel.data(), seld.raw(), sel.size() * sizeof(int32_t));
  cuda::copy_d2h(ns.data(), nsd.raw(), ns.size() * sizeof(int32_t));
  for (int64_t r = 0; r < N; ++r) {
    const auto ref = topk_indices(&scores[r * stride], n_keys[r], k);
    ASSERT_EQ(ns[r], static_cast<int32_t>(ref.size())) << "row " << r << " of " << n_keys[r];
    for (size_t j = 0; j < ref.size(); ++j) {
      ASSERT_EQ(sel[r * k + j], ref[j]) << "row " << r << " (n " << n_keys[r] << ") pick " << j;
    }
  }
}

TEST(IndexerCuda, TopKMatchesReference) {
  auto rng = test::fresh_rng();
  check_topk(rng, {0, 1, 5, 8, 9, 40, 1000, 513}, 8, 0);
  check_topk(rng, {1000, 4096, 3, 700, 5000}, 512, 0);
  check_topk(rng, {1000, 4096, 3, 700, 5000}, 512, 7);  // heavy ties at the threshold
  check_topk(rng, {1024, 1023, 1025, 70000}, 1024, 0);
  check_topk(rng, {262144, 200000}, 1024, 0);  // 256K entries
  check_topk(rng, {262144}, 512, 300);
}

}  // namespace
}  // namespace deepinfer
