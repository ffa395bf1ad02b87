// sparse_attention_cuda vs sparse_attention_row_ref: a batch of chunks from several
// sequences (window keys from the chunk and from the ring, compressed keys selected or all
// visible), at awkward sizes and at V4-Flash shapes (64 heads x 512, window 128, top-512),
// decode (one row per sequence) and prefill (many rows). NaN-poisoned outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/attention/sparse_attention.h"
#include "ops/attention/sparse_attention_cuda.h"

namespace deepinfer {
namespace {

struct Case {
  int64_t n_heads, head_dim, window, ratio, topk;  // topk 0: all visible entries
  std::vector<std::pair<int64_t, int64_t>> chunks;  // (start position, length) per sequence
};

void run_case(std::mt19937_64& rng, const Case& c) {
  SCOPED_TRACE(testing::Message() << "H " << c.n_heads << " d " << c.head_dim << " W " << c.window
                                  << " ratio " << c.ratio << " topk " << c.topk << " seqs "
                                  << c.chunks.size());
  const int64_t H = c.n_heads, d = c.head_dim, W = c.window, S = static_cast<int64_t>(c.chunks.size());
  std::vector<int32_t> pos, slot, cstart, crow0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t row0 = static_cast<int64_t>(pos.size());
    for (int64_t i = 0; i < c.chunks[s].second; ++i) {
      pos.push_back(static_cast<int32_t>(c.chunks[s].first + i));
      slot.push_back(static_cast<int32_t>(s));
      cstart.push_back(static_cast<int32_t>(c.chunks[s].first));
      crow0.push_back(static_cast<int32_t>(row0));
    }
  }
  const int64_t N = static_cast<int64_t>(pos.size());
  int64_t max_pos = 0;
  for (int32_t p : pos) max_pos = std::max<int64_t>(max_pos, p);
  const int64_t max_entries = c.ratio > 0 ? (max_pos + 1) / c.ratio + 1 : 1;
  const auto q = test::randn(rng, N * H * d, 1.0f);
  const auto chunk_kv = test::randn(rng, N * d, 1.0f);
  const auto ring = test::randn(rng, S * W * d, 1.0f);
  const auto entries = test::randn(rng, S * max_entries * d, 1.0f);
  const auto sinks = test::randn(rng, H, 1.0f);
  const int64_t k = std::max<int64_t>(c.topk, 1);
  std::vector<int32_t> selected(N * k, -1), n_sel(N, 0);
  std::vector<float> ref(N * H * d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t r = 0; r < N; ++r) {
    std::vector<const float*> keys;
    const int64_t p = pos[r];
    for (int64_t kp = std::max<int64_t>(0, p - W + 1); kp <= p; ++kp) {
      keys.push_back(kp >= cstart[r] ? &chunk_kv[(crow0[r] + kp - cstart[r]) * d]
                                     : &ring[(slot[r] * W + kp % W) * d]);
    }
    if (c.ratio > 0) {
      const int64_t n_vis = (p + 1) / c.ratio;
      std::vector<int64_t> ids(n_vis);
      std::iota(ids.begin(), ids.end(), 0);
      if (c.topk > 0) {
        std::shuffle(ids.begin(), ids.end(), rng);
        ids.resize(std::min(n_vis, c.topk));
        std::sort(ids.begin(), ids.end());
        n_sel[r] = static_cast<int32_t>(ids.size());
        for (size_t j = 0; j < ids.size(); ++j) selected[r * k + j] = static_cast<int32_t>(ids[j]);
      }
      for (int64_t e : ids) keys.push_back(&entries[(slot[r] * max_entries + e) * d]);
    }
    sparse_attention_row_ref(&q[r * H * d], H, d, keys.data(), static_cast<int64_t>(keys.size()),
                             sinks.data(), scale, &ref[r * H * d]);
  }
  Tensor qd = test::upload_f32(q), kvd = test::upload_f32(chunk_kv), rd = test::upload_f32(ring);
  Tensor ed = test::upload_f32(entries), sd = test::upload_f32(sinks);
  Tensor pd = test::upload_i32(pos), sld = test::upload_i32(slot), csd = test::upload_i32(cstart);
  Tensor crd = test::upload_i32(crow0), seld = test::upload_i32(selected), nsd = test::upload_i32(n_sel);
  Tensor od = test::poisoned_f32(N * H * d);
  SparseAttentionParams p;
  p.q = qd.data<float>();
  p.out = od.data<float>();
  p.sinks = sd.data<float>();
  p.n_rows = N;
  p.n_heads = H;
  p.head_dim = d;
  p.scale = scale;
  p.positions = pd.data<int32_t>();
  p.slot = sld.data<int32_t>();
  p.chunk_start = csd.data<int32_t>();
  p.chunk_row0 = crd.data<int32_t>();
  p.chunk_kv = kvd.data<float>();
  p.ring = rd.data<float>();
  p.window = W;
  if (c.ratio > 0) {
    p.entries = ed.data<float>();
    p.max_entries = max_entries;
    p.ratio = c.ratio;
    if (c.topk > 0) {
      p.selected = seld.data<int32_t>();
      p.n_selected = nsd.data<int32_t>();
      p.max_selected = k;
    }
  }
  sparse_attention_cuda(nullptr, p);
  const auto out = test::download_f32(od);
  const double err = test::nmse(out.data(), ref.data(), N * H * d);
  std::printf("sparse attention H %lld d %lld W %lld ratio %lld topk %lld rows %lld: nmse %.3g\n",
              static_cast<long long>(H), static_cast<long long>(d), static_cast<long long>(W),
              static_cast<long long>(c.ratio), static_cast<long long>(c.topk),
              static_cast<long long>(N), err);
  EXPECT_LT(err, 1e-10);
}

TEST(SparseAttentionCuda, AwkwardSizes) {
  auto rng = test::fresh_rng();
  // Prefill from 0, a continuing chunk (window keys from the ring), decode rows.
  run_case(rng, {3, 96, 5, 0, 0, {{0, 11}, {7, 4}, {30, 1}}});
  run_case(rng, {3, 96, 5, 4, 3, {{0, 23}, {9, 6}, {41, 1}, {2, 1}}});
  run_case(rng, {1, 32, 16, 7, 0, {{0, 40}, {50, 9}, {100, 1}}});
  run_case(rng, {5, 160, 3, 4, 50, {{0, 30}, {13, 2}}});  // top-k larger than the entries
}

TEST(SparseAttentionCuda, V4FlashShapes) {
  auto rng = test::fresh_rng();
  // Decode: one query per sequence, batched; CSA top-512 of ~1000 entries, HCA all entries.
  run_case(rng, {64, 512, 128, 4, 512, {{4000, 1}, {2100, 1}, {700, 1}, {3, 1}}});
  run_case(rng, {64, 512, 128, 128, 0, {{8191, 1}, {5000, 1}}});
  // Prefill: a 48-token chunk continuing a sequence, plus a fresh one.
  run_case(rng, {64, 512, 128, 4, 512, {{2200, 48}, {0, 16}}});
  run_case(rng, {64, 512, 128, 0, 0, {{300, 40}}});
}

}  // namespace
}  // namespace deepinfer
