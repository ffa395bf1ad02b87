// Routed experts with fp32 weights on the device without host sync
// (ops/moe/moe_grouped_f32_cuda.h), against plain CPU loops written here:
//  * grouped_gemm_f32_cuda: every real row bitwise equal to a CPU fp32 FMA chain over k
//    ascending (the header's numerics contract) and within 1e-5 of max|ref| of an fp64 sum;
//    padding rows +0; rows past the padded total untouched. Experts with 0, 1, 3, 65 and 200
//    rows, N with a partial 64-column tile, K not a multiple of the 32-wide step, lda > K, the
//    dual (W1 + W3) launch, N = K = 1;
//  * moe_experts_f32_cuda vs a plain CPU reference (per token, per slot j: W1 x, W3 x,
//    clamped SwiGLU x weight, W2 h, summed, fp64 accumulation): max|diff| <= 1e-5 max|ref| at
//    T = 1, 3, 37 with E = 13 (3 experts get no rows), a padding token (all ids -1), ids -1
//    and E inside a token, clamp on / off / mostly active; and a V4-Flash-like shape (E = 256
//    top-6, D = 4096, I = 2048 (full size), T = 8) where only the used experts' weights are
//    generated and every other expert is NaN, so reading an unused expert fails;
//  * batch invariance: every token of a batch of 37 alone gives the same bits; a padding
//    token's output is y_shared bitwise;
//  * the layer captured into a CUDA graph replays new routing bit-identically.
// Outputs and workspaces are NaN-poisoned first.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/parallel.h"
#include "cuda/graph.h"
#include "cuda/stream.h"
#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/moe/moe_grouped_f32_cuda.h"

namespace deepinfer {
namespace {

using test::download_f32;
using test::upload_f32;
using test::upload_i32;

std::vector<int32_t> download_i32(const int32_t* d, int64_t n) {
  std::vector<int32_t> v(n);
  if (n > 0) cuda::copy_d2h(v.data(), d, n * sizeof(int32_t));
  return v;
}

// Uniform values of standard deviation `std` from a counter hash (fast, parallel).
float hashed_uniform(uint64_t seed, uint64_t i, float std) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return (2.0f * u - 1.0f) * 1.7320508f * std;
}

std::vector<float> hashed_vector(uint64_t seed, int64_t n, float std) {
  std::vector<float> v(n);
  parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) v[i] = hashed_uniform(seed, i, std);
  }, 1 << 16);
  return v;
}

// ---- grouped GEMM ----

// One grouped GEMM (k = 1: token t -> expert assign[t]) against the CPU.
void check_grouped_gemm(std::mt19937_64& rng, const std::vector<int64_t>& rows_per_expert,
                        int64_t N, int64_t K, int64_t lda, bool dual) {
  const int64_t E = static_cast<int64_t>(rows_per_expert.size());
  SCOPED_TRACE(testing::Message() << "E " << E << " N " << N << " K " << K << " lda " << lda
                                  << (dual ? " dual" : ""));
  std::vector<int32_t> assign;
  for (int64_t e = 0; e < E; ++e)
    assign.insert(assign.end(), rows_per_expert[e], static_cast<int32_t>(e));
  std::shuffle(assign.begin(), assign.end(), rng);
  const int64_t T = static_cast<int64_t>(assign.size());
  const auto a = test::randn(rng, std::max<int64_t>(T * lda, 1));
  const uint64_t seed = rng();
  const auto w = hashed_vector(seed, E * N * K, 1.0f / std::sqrt(static_cast<float>(K)));
  const auto wb = hashed_vector(seed + 1, E * N * K, 1.0f / std::sqrt(static_cast<float>(K)));

  const int64_t cap = moe_rows_cap(T, 1, E), tiles = moe_tiles_cap(T, 1, E);
  auto mk = [](int64_t n) { return cuda::device_filled(DType::I32, {std::max<int64_t>(n, 1)}, 0x7b); };
  Tensor counts = mk(E), offsets = mk(E + 1), row_slot = mk(cap), slot_row = mk(T);
  Tensor tile_expert = mk(tiles), tile_row0 = mk(tiles);
  const MoeAlignBuffers al{counts.data<int32_t>(), offsets.data<int32_t>(),
                           row_slot.data<int32_t>(), slot_row.data<int32_t>(),
                           tile_expert.data<int32_t>(), tile_row0.data<int32_t>()};
  Tensor ids_d = upload_i32(assign.empty() ? std::vector<int32_t>{0} : assign);
  moe_align_cuda(nullptr, ids_d.data<int32_t>(), T, 1, E, al);
  Tensor a_d = upload_f32(a), w_d = upload_f32(w), wb_d = upload_f32(wb);
  Tensor c_d = test::poisoned_f32(std::max<int64_t>(cap * N, 1));
  Tensor cb_d = test::poisoned_f32(std::max<int64_t>(cap * N, 1));
  GroupedGemmF32Params p;
  p.a = a_d.data<float>();
  p.lda = lda;
  p.a_rows = al.row_slot;
  p.a_rows_div = 1;
  p.w = w_d.data<float>();
  p.c = c_d.data<float>();
  p.ldc = N;
  p.n = N;
  p.k = K;
  p.tile_expert = al.tile_expert;
  p.tile_row0 = al.tile_row0;
  p.n_tiles_cap = tiles;
  if (dual) {
    p.w_b = wb_d.data<float>();
    p.c_b = cb_d.data<float>();
  }
  grouped_gemm_f32_cuda(nullptr, p);

  const auto offs = download_i32(al.offsets, E + 1);
  const auto rs = download_i32(al.row_slot, offs[E]);
  for (int pass = 0; pass < (dual ? 2 : 1); ++pass) {
    SCOPED_TRACE(pass == 0 ? "first weight" : "second weight (w_b)");
    const std::vector<float>& wt = pass == 0 ? w : wb;
    const auto c = download_f32(pass == 0 ? c_d : cb_d);
    int64_t n_chain_diff = 0, n_bad = 0;
    for (int64_t r = 0; r < offs[E]; ++r) {
      const int64_t e = std::upper_bound(offs.begin(), offs.end(), static_cast<int32_t>(r)) -
                        offs.begin() - 1;
      if (rs[r] < 0) {  // padding row
        for (int64_t n = 0; n < N; ++n) ASSERT_EQ(c[r * N + n], 0.0f) << "padding row " << r;
        continue;
      }
      ASSERT_EQ(assign[rs[r]], e) << "row " << r;
      const float* ar = a.data() + rs[r] * lda;
      std::vector<double> ref(N);
      double scale = 0.0;
      for (int64_t n = 0; n < N; ++n) {
        const float* wr = wt.data() + (e * N + n) * K;
        double s = 0.0;
        for (int64_t k = 0; k < K; ++k) s += static_cast<double>(ar[k]) * wr[k];
        ref[n] = s;
        scale = std::max(scale, std::abs(s));
      }
      for (int64_t n = 0; n < N; ++n) {
        const float* wr = wt.data() + (e * N + n) * K;
        float chain = 0.0f;
        for (int64_t k = 0; k < K; ++k) chain = std::fma(ar[k], wr[k], chain);
        const float got = c[r * N + n];
        n_chain_diff += !(got == chain);
        n_bad += !(std::abs(got - ref[n]) <= 1e-5 * std::max(scale, 1e-30));
      }
    }
    EXPECT_EQ(n_chain_diff, 0) << "elements differing from the fp32 FMA chain in ascending k";
    EXPECT_EQ(n_bad, 0) << "elements beyond 1e-5 max|ref| of the fp64 sums";
    // Rows past the padded total are not written (still the NaN poison).
    for (int64_t i = offs[E] * N; i < cap * N; ++i) {
      ASSERT_TRUE(std::isnan(c[i])) << "element " << i << " past the padded total written";
    }
  }
}

TEST(MoeGroupedF32Cuda, GroupedGemmMatchesReference) {
  auto rng = test::fresh_rng();
  check_grouped_gemm(rng, {0, 1, 3, 65, 200}, 200, 37, 37, /*dual=*/true);
  check_grouped_gemm(rng, {200, 3, 0, 1, 65, 0}, 64, 256, 259, /*dual=*/false);
  check_grouped_gemm(rng, {1}, 1, 1, 1, /*dual=*/true);
  check_grouped_gemm(rng, {0, 0, 7}, 70, 100, 100, /*dual=*/false);
}

// ---- the layer ----

// Stacked fp32 experts on the device; host copies of the experts in `live` only, the other
// experts' device weights are NaN.
struct F32Layer {
  int64_t E, D, I, k;
  float limit;
  std::vector<std::vector<float>> w1, w3, w2;  // per expert; empty when not generated
  Tensor w1_d, w3_d, w2_d;

  F32Layer(std::mt19937_64& rng, int64_t e, int64_t d, int64_t i, int64_t top, float lim,
           std::vector<int32_t> live = {})
      : E(e), D(d), I(i), k(top), limit(lim), w1(e), w3(e), w2(e) {
    if (live.empty()) {
      live.resize(E);
      std::iota(live.begin(), live.end(), 0);
    }
    w1_d = cuda::device_filled(DType::F32, {E * I * D}, 0xff);
    w3_d = cuda::device_filled(DType::F32, {E * I * D}, 0xff);
    w2_d = cuda::device_filled(DType::F32, {E * D * I}, 0xff);
    const uint64_t seed = rng();
    const float s_up = 1.0f / std::sqrt(static_cast<float>(D));
    const float s_down = 1.0f / std::sqrt(static_cast<float>(I));
    for (int32_t x : live) {
      w1[x] = hashed_vector(seed + 3 * x, I * D, s_up);
      w3[x] = hashed_vector(seed + 3 * x + 1, I * D, s_up);
      w2[x] = hashed_vector(seed + 3 * x + 2, D * I, s_down);
      cuda::copy_h2d(w1_d.data<float>() + x * I * D, w1[x].data(), I * D * sizeof(float));
      cuda::copy_h2d(w3_d.data<float>() + x * I * D, w3[x].data(), I * D * sizeof(float));
      cuda::copy_h2d(w2_d.data<float>() + x * D * I, w2[x].data(), D * I * sizeof(float));
    }
  }
  MoeExpertsF32Weights weights() const {
    return {w1_d.data<float>(), w3_d.data<float>(), w2_d.data<float>()};
  }
  MoeExpertsShape shape(int64_t T) const { return {T, k, E, D, I, limit}; }
  // Stand-in for the shared expert's output.
  std::vector<float> shared_out(const std::vector<float>& x, int64_t T) const {
    std::vector<float> y(T * D);
    for (int64_t i = 0; i < T * D; ++i) y[i] = 0.1f * x[i] - 0.05f;
    return y;
  }

  std::vector<float> run_cuda(const std::vector<float>& x, const std::vector<int32_t>& ids,
                              const std::vector<float>& rw, int64_t T,
                              bool with_shared = true) const {
    const MoeExpertsShape s = shape(T);
    Tensor ws = cuda::device_filled(
        DType::U8, {static_cast<int64_t>(moe_experts_f32_workspace_bytes(s))}, 0xff);
    Tensor x_d = upload_f32(x), ids_d = upload_i32(ids), rw_d = upload_f32(rw);
    Tensor shared_d = upload_f32(shared_out(x, T));
    Tensor out = test::poisoned_f32(T * D);
    moe_experts_f32_cuda(nullptr, s, x_d.data<float>(), ids_d.data<int32_t>(), rw_d.data<float>(),
                         weights(), with_shared ? shared_d.data<float>() : nullptr, ws.raw(),
                         out.data<float>());
    return download_f32(out);
  }

  // Mean time of one layer call (printed, never asserted).
  void report_time(const std::vector<float>& x, const std::vector<int32_t>& ids,
                   const std::vector<float>& rw, int64_t T) const {
    const MoeExpertsShape s = shape(T);
    Tensor ws = cuda::device_empty(
        DType::U8, {static_cast<int64_t>(moe_experts_f32_workspace_bytes(s))});
    Tensor x_d = upload_f32(x), ids_d = upload_i32(ids), rw_d = upload_f32(rw);
    Tensor out = cuda::device_empty(DType::F32, {T * D});
    auto run = [&] {
      moe_experts_f32_cuda(nullptr, s, x_d.data<float>(), ids_d.data<int32_t>(),
                           rw_d.data<float>(), weights(), nullptr, ws.raw(), out.data<float>());
    };
    const double ms = test::mean_ms(run, 10);
    std::printf("  T %ld: %.1f us per layer (fp32 weights, not asserted)\n", static_cast<long>(T),
                1e3 * ms);
  }

  // Plain CPU reference: per token, per slot j, the expert's FFN in fp64, summed over j.
  std::vector<double> reference(const std::vector<float>& x, const std::vector<int32_t>& ids,
                                const std::vector<float>& rw, int64_t T, bool with_shared) const {
    for (int32_t e : ids) {
      if (e >= 0 && e < E) {
        EXPECT_FALSE(w1[e].empty()) << "expert " << e << " has no weights";
      }
    }
    auto live = [&](int32_t e) { return e >= 0 && e < E && !w1[e].empty(); };
    std::vector<double> y_slot(T * k * D, 0.0);  // expert output of each slot
    parallel_for(T * k, [&](int64_t b, int64_t end) {
      std::vector<double> h(I);
      for (int64_t s = b; s < end; ++s) {
        const int32_t e = ids[s];
        if (!live(e)) continue;
        const float* xt = x.data() + (s / k) * D;
        for (int64_t i = 0; i < I; ++i) {
          double g = 0.0, u = 0.0;
          for (int64_t d = 0; d < D; ++d) {
            g += static_cast<double>(w1[e][i * D + d]) * xt[d];
            u += static_cast<double>(w3[e][i * D + d]) * xt[d];
          }
          if (limit > 0.0f) {
            g = std::min(g, static_cast<double>(limit));
            u = std::clamp(u, -static_cast<double>(limit), static_cast<double>(limit));
          }
          h[i] = g / (1.0 + std::exp(-g)) * u * rw[s];
        }
        for (int64_t d = 0; d < D; ++d) {
          double y = 0.0;
          for (int64_t i = 0; i < I; ++i) y += static_cast<double>(w2[e][d * I + i]) * h[i];
          y_slot[s * D + d] = y;
        }
      }
    }, 1);
    std::vector<double> out(T * D, 0.0);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        for (int64_t d = 0; d < D; ++d) out[t * D + d] += y_slot[(t * k + j) * D + d];
      }
    }
    if (with_shared) {
      const auto sh = shared_out(x, T);
      for (int64_t i = 0; i < T * D; ++i) out[i] += sh[i];
    }
    return out;
  }
};

struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// k distinct experts per token in ascending order (as route_cuda gives), drawn from experts
// [0, n_live); even tokens from a hot subset of 24 of them, so some experts get many rows.
Routing random_routing(std::mt19937_64& rng, int64_t k, int64_t T, int64_t n_live) {
  Routing r{std::vector<int32_t>(T * k), std::vector<float>(T * k)};
  std::vector<int32_t> all(n_live), hot(std::min<int64_t>(n_live, std::max<int64_t>(24, k)));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::copy(all.begin(), all.begin() + static_cast<int64_t>(hot.size()), hot.begin());
  std::uniform_real_distribution<float> wd(0.05f, 1.0f);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t>& from = t % 2 == 0 ? hot : all;
    std::shuffle(from.begin(), from.end(), rng);
    std::vector<int32_t> pick(from.begin(), from.begin() + k);
    std::sort(pick.begin(), pick.end());
    for (int64_t j = 0; j < k; ++j) {
      r.ids[t * k + j] = pick[j];
      r.weights[t * k + j] = wd(rng);
    }
  }
  return r;
}

// max|out - ref| <= 1e-5 max|ref| (NaN fails).
void expect_close(const std::vector<float>& out, const std::vector<double>& ref) {
  ASSERT_EQ(out.size(), ref.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double d = std::abs(out[i] - ref[i]);
    if (!(d <= diff)) diff = d;
    scale = std::max(scale, std::abs(ref[i]));
  }
  std::printf("  max|diff| %.3g, max|ref| %.3g, ratio %.3g (bound 1e-5)\n", diff, scale,
              diff / scale);
  EXPECT_GT(scale, 0.0);
  EXPECT_LE(diff, 1e-5 * scale);
}

// The layer at T tokens against the reference, with the awkward routing cases when T allows:
// token 2 is a padding token (all ids -1), token 5 has one id -1 and one id E (no row).
// With `invariance`, every token alone must give the batch's bits.
void check_layer(std::mt19937_64& rng, const F32Layer& L, int64_t T, int64_t n_live,
                 float x_std, bool invariance) {
  SCOPED_TRACE(testing::Message() << "T " << T << " E " << L.E << " D " << L.D << " I " << L.I
                                  << " k " << L.k << " limit " << L.limit);
  const auto x = test::randn(rng, T * L.D, x_std);
  Routing r = random_routing(rng, L.k, T, n_live);
  if (T > 2) std::fill(r.ids.begin() + 2 * L.k, r.ids.begin() + 3 * L.k, -1);
  if (T > 5 && L.k >= 2) {
    r.ids[5 * L.k] = -1;
    r.ids[5 * L.k + 1] = static_cast<int32_t>(L.E);
  }
  for (bool with_shared : {true, false}) {
    SCOPED_TRACE(with_shared ? "with y_shared" : "without y_shared");
    const auto out = L.run_cuda(x, r.ids, r.weights, T, with_shared);
    expect_close(out, L.reference(x, r.ids, r.weights, T, with_shared));
    if (T > 2 && with_shared) {  // the padding token: exactly y_shared
      const auto sh = L.shared_out(x, T);
      EXPECT_EQ(0, std::memcmp(out.data() + 2 * L.D, sh.data() + 2 * L.D, L.D * sizeof(float)));
    }
  }
  if (!invariance) return;
  const auto out = L.run_cuda(x, r.ids, r.weights, T);
  int64_t n_diff = 0;
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<float> x1(x.begin() + t * L.D, x.begin() + (t + 1) * L.D);
    const std::vector<int32_t> ids1(r.ids.begin() + t * L.k, r.ids.begin() + (t + 1) * L.k);
    const std::vector<float> rw1(r.weights.begin() + t * L.k, r.weights.begin() + (t + 1) * L.k);
    const auto out1 = L.run_cuda(x1, ids1, rw1, 1);
    n_diff += std::memcmp(out1.data(), out.data() + t * L.D, L.D * sizeof(float)) != 0;
  }
  EXPECT_EQ(n_diff, 0) << "tokens whose output differs alone vs in the batch of " << T;
}

TEST(MoeGroupedF32Cuda, LayerMatchesReference) {
  auto rng = test::fresh_rng();
  // E = 13, routing over experts 0..9 only: 10, 11, 12 get no rows (and NaN weights, so
  // reading them would show). D and I not multiples of the 32-wide K step or the 64-column
  // tile.
  const F32Layer L(rng, 13, 100, 75, 3, 10.0f, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  check_layer(rng, L, 1, 10, 1.0f, false);
  check_layer(rng, L, 3, 10, 1.0f, false);
  check_layer(rng, L, 37, 10, 1.0f, /*invariance=*/true);
  const F32Layer clamped(rng, 8, 64, 128, 2, 1.0f);  // clamp active on most values
  check_layer(rng, clamped, 37, 8, 3.0f, true);
  const F32Layer unclamped(rng, 5, 33, 17, 1, 0.0f);  // limit 0: no clamp; top-1
  check_layer(rng, unclamped, 37, 5, 2.0f, false);
}

TEST(MoeGroupedF32Cuda, NoTokens) {
  auto rng = test::fresh_rng();
  const F32Layer L(rng, 4, 32, 16, 2, 10.0f);
  const MoeExpertsShape s = L.shape(0);
  Tensor ws = cuda::device_empty(
      DType::U8, {std::max<int64_t>(static_cast<int64_t>(moe_experts_f32_workspace_bytes(s)), 1)});
  Tensor out = test::poisoned_f32(1);
  moe_experts_f32_cuda(nullptr, s, nullptr, nullptr, nullptr, L.weights(), nullptr, ws.raw(),
                       out.data<float>());
  EXPECT_TRUE(std::isnan(download_f32(out)[0]));
}

// V4-Flash-like: 256 experts, top-6, D 4096, I 2048 (the real sizes; fp32 stacks of 8.6 GB
// each on the device), T = 8. Only the routed experts get generated weights.
TEST(MoeGroupedF32Cuda, LayerV4FlashShape) {
  auto rng = test::fresh_rng();
  const int64_t E = 256, k = 6, D = 4096, I = 2048, T = 8;
  // Routing first (needs only E and k), then the weights of the experts it uses.
  const Routing r = random_routing(rng, k, T, E);
  std::vector<int32_t> used(r.ids);
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  std::printf("  %zu of %ld experts used\n", used.size(), static_cast<long>(E));
  const F32Layer L(rng, E, D, I, k, 10.0f, used);
  const auto x = test::randn(rng, T * D);
  const auto out = L.run_cuda(x, r.ids, r.weights, T);
  expect_close(out, L.reference(x, r.ids, r.weights, T, true));
  // Token 5 alone: the same bits.
  const std::vector<float> x1(x.begin() + 5 * D, x.begin() + 6 * D);
  const std::vector<int32_t> ids1(r.ids.begin() + 5 * k, r.ids.begin() + 6 * k);
  const std::vector<float> rw1(r.weights.begin() + 5 * k, r.weights.begin() + 6 * k);
  const auto out1 = L.run_cuda(x1, ids1, rw1, 1);
  EXPECT_EQ(0, std::memcmp(out1.data(), out.data() + 5 * D, D * sizeof(float)));
  L.report_time(x, r.ids, r.weights, T);
}

// The layer captured once into a CUDA graph (capture fails on any host synchronisation or
// allocation inside it) and replayed with new routing and inputs written into the same
// buffers: the same bits as direct runs.
TEST(MoeGroupedF32Cuda, LayerReplaysFromACudaGraph) {
  auto rng = test::fresh_rng();
  const F32Layer L(rng, 13, 100, 75, 3, 10.0f);
  const int64_t T = 37;
  const MoeExpertsShape shape = L.shape(T);
  Tensor ws = cuda::device_empty(
      DType::U8, {static_cast<int64_t>(moe_experts_f32_workspace_bytes(shape))});
  Tensor x_d = cuda::device_empty(DType::F32, {T * L.D}), out = test::poisoned_f32(T * L.D);
  Tensor ids_d = cuda::device_empty(DType::I32, {T * L.k});
  Tensor rw_d = cuda::device_empty(DType::F32, {T * L.k});
  cuda::Stream stream = cuda::Stream::create();
  const cuda::Graph graph = cuda::Graph::capture(stream, [&] {
    moe_experts_f32_cuda(stream, shape, x_d.data<float>(), ids_d.data<int32_t>(),
                         rw_d.data<float>(), L.weights(), nullptr, ws.raw(), out.data<float>());
  });
  for (int round = 0; round < 2; ++round) {
    const auto x = test::randn(rng, T * L.D);
    Routing r = random_routing(rng, L.k, T, round == 0 ? 13 : 4);  // round 1: 9 experts idle
    std::fill(r.ids.begin(), r.ids.begin() + L.k, -1);         // token 0: padding
    cuda::copy_h2d(x_d.raw(), x.data(), x.size() * sizeof(float));
    cuda::copy_h2d(ids_d.raw(), r.ids.data(), r.ids.size() * sizeof(int32_t));
    cuda::copy_h2d(rw_d.raw(), r.weights.data(), r.weights.size() * sizeof(float));
    graph.launch(stream);
    stream.synchronize();
    const auto got = download_f32(out);
    const auto want = L.run_cuda(x, r.ids, r.weights, T, /*with_shared=*/false);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
        << "round " << round;
  }
}

}  // namespace
}  // namespace deepinfer
