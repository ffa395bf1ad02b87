// MoE pieces on the GPU vs the CPU reference: routing (sqrtsoftplus, score bias, top-k with
// ties, hash routing) against route_ref at awkward sizes and V4-Flash's 256 experts top-6;
// SwiGLU with the clamp and row weights, row gather and the combine against plain loops.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/moe/moe.h"
#include "ops/moe/moe_cuda.h"

namespace deepinfer {
namespace {

void check_route(std::mt19937_64& rng, int64_t n_rows, int64_t n_exp, int64_t k, bool hash,
                 bool ties) {
  SCOPED_TRACE(testing::Message() << "rows " << n_rows << " experts " << n_exp << " top " << k
                                  << (hash ? " hash" : "") << (ties ? " ties" : ""));
  auto logits = test::randn(rng, n_rows * n_exp, 2.0f);
  if (ties) {
    for (auto& v : logits) v = std::round(v);  // many equal scores
  }
  const auto bias = ties ? std::vector<float>(n_exp, 0.0f) : test::randn(rng, n_exp, 0.2f);
  const int64_t vocab = 50;
  std::vector<int32_t> tokens(n_rows), table(vocab * k);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1), ex(0, static_cast<int32_t>(n_exp - 1));
  for (auto& t : tokens) t = tok(rng);
  for (auto& t : table) t = ex(rng);
  // route_ref computes the logits itself: identity gate over x = logits gives them exactly.
  std::vector<float> eye(n_exp * n_exp, 0.0f);
  for (int64_t e = 0; e < n_exp; ++e) eye[e * n_exp + e] = 1.0f;
  const RouterParams rp{n_exp, k, 1.5f};
  std::vector<int32_t> ids_ref(n_rows * k);
  std::vector<float> w_ref(n_rows * k);
  route_ref(logits.data(), n_rows, n_exp, eye.data(), hash ? nullptr : bias.data(),
            hash ? table.data() : nullptr, tokens.data(), rp, ids_ref.data(), w_ref.data(),
            GemmMode::kFixedOrder);
  Tensor ld = test::upload_f32(logits), bd = test::upload_f32(bias), td = test::upload_i32(tokens);
  Tensor tabd = test::upload_i32(table);
  Tensor idd = test::upload_i32(std::vector<int32_t>(n_rows * k, -1));
  Tensor wd = test::poisoned_f32(n_rows * k);
  route_cuda(nullptr, ld.data<float>(), n_rows, hash ? nullptr : bd.data<float>(),
             hash ? tabd.data<int32_t>() : nullptr, td.data<int32_t>(), rp, idd.data<int32_t>(),
             wd.data<float>());
  std::vector<int32_t> ids(n_rows * k);
  cuda::copy_d2h(ids.data(), idd.raw(), ids.size() * sizeof(int32_t));
  const auto w = test::download_f32(wd);
  EXPECT_EQ(ids, ids_ref);
  EXPECT_LT(test::nmse(w.data(), w_ref.data(), n_rows * k), 1e-12);
}

TEST(MoeCuda, RoutingMatchesReference) {
  auto rng = test::fresh_rng();
  for (bool hash : {false, true}) {
    check_route(rng, 7, 8, 2, hash, false);
    check_route(rng, 33, 6, 6, hash, false);  // k == n_experts
    check_route(rng, 300, 256, 6, hash, false);  // V4-Flash
  }
  check_route(rng, 100, 256, 6, false, true);
  check_route(rng, 50, 37, 5, false, true);
}

TEST(MoeCuda, SwigluGatherCombine) {
  auto rng = test::fresh_rng();
  const int64_t n = 37, inter = 100, dim = 96, k = 3;
  const float limit = 1.5f;
  const auto g = test::randn(rng, n * inter, 2.0f), v = test::randn(rng, n * inter, 2.0f);
  const auto rw = test::randn(rng, n, 1.0f);
  Tensor gd = test::upload_f32(g), vd = test::upload_f32(v), rwd = test::upload_f32(rw);
  swiglu_cuda(nullptr, gd.data<float>(), vd.data<float>(), rwd.data<float>(), n, inter, limit);
  const auto out = test::download_f32(gd);
  std::vector<float> ref(n * inter);
  for (int64_t i = 0; i < n * inter; ++i) {
    const float gate = std::min(g[i], limit), up = std::min(limit, std::max(-limit, v[i]));
    ref[i] = gate / (1.0f + std::exp(-gate)) * up * rw[i / inter];
  }
  EXPECT_LT(test::nmse(out.data(), ref.data(), n * inter), 1e-12);

  // gather + combine: out[r] = sum_j y[slot_of[r*k+j]] + shared[r]
  const auto x = test::randn(rng, n * dim);
  std::vector<int32_t> rows(n * k), slot_of(n * k);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(n - 1));
  for (auto& r : rows) r = pick(rng);
  for (int64_t i = 0; i < n * k; ++i) slot_of[i] = static_cast<int32_t>((i * 7) % (n * k));
  const auto shared = test::randn(rng, n * dim);
  Tensor xd = test::upload_f32(x), rd = test::upload_i32(rows), sod = test::upload_i32(slot_of);
  Tensor shd = test::upload_f32(shared), gathered = test::poisoned_f32(n * k * dim);
  Tensor comb = test::poisoned_f32(n * dim);
  gather_rows_cuda(nullptr, xd.data<float>(), rd.data<int32_t>(), n * k, dim, gathered.data<float>());
  moe_combine_cuda(nullptr, gathered.data<float>(), sod.data<int32_t>(), shd.data<float>(), n, k, dim,
                   comb.data<float>());
  const auto got_g = test::download_f32(gathered), got_c = test::download_f32(comb);
  std::vector<float> ref_g(n * k * dim), ref_c(n * dim);
  for (int64_t i = 0; i < n * k; ++i)
    for (int64_t c = 0; c < dim; ++c) ref_g[i * dim + c] = x[rows[i] * dim + c];
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < dim; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) acc += ref_g[slot_of[r * k + j] * dim + c];
      ref_c[r * dim + c] = acc + shared[r * dim + c];
    }
  EXPECT_EQ(got_g, ref_g);
  EXPECT_LT(test::nmse(got_c.data(), ref_c.data(), n * dim), 1e-14);
}

}  // namespace
}  // namespace deepinfer
