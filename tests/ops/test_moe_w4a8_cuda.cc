// W4A8 routed experts for decode (ops/moe/moe_w4a8_cuda.h) against independent references:
//  * (w4a8_pack's layout itself: tests/ops/test_moe_w4a8.cc, on the CPU);
//  * moe_experts_w4a8_cuda vs (a) the recipe on the CPU (moe_experts_w4a8_ref: exact FP4
//    weights, act_quant_ref activations, double sums; tight) and (b) the fp32 MoE reference
//    expert_ffn_accumulate_ref on the dequantised (exact) weights, bounded by the FP8
//    activation rounding only, at awkward sizes (T = 1, 3, 64, 256; D and I multiples of 32
//    but not of 128 or of the 128-row CTA tile; experts with 0 rows; unsorted hash-like ids and
//    an id of -1), activation blocks 128 (V4) and 32 (V4.1), and V4-Flash shapes;
//  * against the FP8 grouped path (moe_experts_fp8_cuda, the current device path) on FP4
//    weights whose scales are constant per 128 x 128 block (so the FP8 conversion is exact);
//  * outputs poisoned with NaN first; a token's output bitwise the same alone and in a batch;
//    the layer replayed from a CUDA graph with new routing gives the direct run's bits;
//  * FastMatchesPlain: the kFast kernels against the kPlain ones (NMSE 1e-6) at every K split;
//  * NarrowAndWidePassesGiveTheSameBits: the plain path at 8 and 16 tokens per pass, bitwise;
//  * ReportDecodeBandwidth: report only (never asserted): µs, expert bytes touched and GB/s of
//    the W4A8 fast path (plain path's µs in the last column) and the FP8 path at V4-Flash and V4.1-Flash shapes for T = 1, 4, 16, 64, 256,
//    next to the copy (cudaMemcpy D2D, 1 GiB) and read (w4a8_read_probe_cuda) bandwidth
//    measured in the same run.
// Failures name the first unwritten / NaN element or the worst (token, column).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "cuda/event.h"
#include "cuda/graph.h"
#include "cuda/stream.h"
#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/gemm/gemm.h"
#include "ops/moe/moe.h"
#include "ops/moe/moe_grouped_cuda.h"
#include "ops/moe/moe_w4a8_cuda.h"

namespace deepinfer {
namespace {

using test::download_f32;
using test::upload_f32;
using test::upload_i32;

Tensor upload_u8(const uint8_t* p, int64_t n) {
  Tensor t = cuda::device_empty(DType::U8, {std::max<int64_t>(n, 16)});
  cuda::copy_h2d(t.raw(), p, n);
  return t;
}

// got vs want [T, D]: the first non-finite element fails at once; else NMSE < bound, with the
// worst element named.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, int64_t D,
                  double bound, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ADD_FAILURE() << what << ": token " << i / D << " column " << i % D << " is " << got[i]
                    << " (unwritten or not finite; want " << want[i] << ")";
      return;
    }
  }
  const double e = test::nmse(got.data(), want.data(), static_cast<int64_t>(got.size()));
  std::printf("  %s: NMSE %.3g (bound %.3g)\n", what.c_str(), e, bound);
  if (e < bound) return;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::fabs(got[i] - want[i]) > std::fabs(got[worst] - want[worst])) worst = i;
  ADD_FAILURE() << what << ": NMSE " << e << " >= " << bound << "; worst at token " << worst / D
                << " column " << worst % D << ": got " << got[worst] << " want " << want[worst];
}

// FP4 experts in the checkpoint format: `distinct` different experts, expert e is
// e % distinct (large E without gigabytes of host data). Scales 2^(base + jitter) with base so
// that W x has about unit scale; block_uniform: one exponent per 128 x 128 block (then the
// matrix has an exact block-FP8 form).
struct Fp4Matrix {
  int64_t n = 0, k = 0;
  std::vector<uint8_t> codes, scales;  // [n, k/2], [n, k/32]
  std::vector<float> values;           // [n, k] dequantised
};

Fp4Matrix random_fp4(std::mt19937_64& rng, int64_t n, int64_t k, bool block_uniform) {
  Fp4Matrix m;
  m.n = n;
  m.k = k;
  m.codes.resize(n * k / 2);
  for (size_t i = 0; i < m.codes.size(); i += 8) {
    const uint64_t r = rng();
    for (size_t j = 0; j < 8 && i + j < m.codes.size(); ++j) m.codes[i + j] = (r >> (8 * j)) & 0xff;
  }
  const int base = static_cast<int>(std::lround(-1.55 - 0.5 * std::log2(static_cast<double>(k))));
  std::uniform_int_distribution<int> jitter(-1, 1);
  m.scales.resize(n * k / 32);
  std::vector<int> block(ceil_div64(n, 128) * ceil_div64(k, 128));
  for (int& b : block) b = base + jitter(rng);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k / 32; ++j)
      m.scales[i * (k / 32) + j] = static_cast<uint8_t>(
          127 + (block_uniform ? block[(i / 128) * ceil_div64(k, 128) + j / 4] : base + jitter(rng)));
  m.values.resize(n * k);
  w4a8_dequant_ref(m.codes.data(), m.scales.data(), n, k, m.values.data());
  return m;
}

// Device stack [E, ...] of one matrix role, expert e = host[e % distinct].
struct DeviceStack {
  Tensor codes, scales;
  DeviceStack(const std::vector<Fp4Matrix>& host, int64_t E) {
    const int64_t n = host[0].n, k = host[0].k;
    const int64_t cb = w4a8_code_bytes(n, k), sb = w4a8_scale_bytes(n, k);
    codes = cuda::device_empty(DType::U8, {E * cb});
    scales = cuda::device_empty(DType::U8, {E * sb});
    std::vector<uint8_t> pc(cb), ps(sb);
    const int64_t distinct = static_cast<int64_t>(host.size());
    for (int64_t e = 0; e < std::min(E, distinct); ++e) {
      w4a8_pack(host[e].codes.data(), host[e].scales.data(), n, k, pc.data(), ps.data());
      cuda::copy_h2d(static_cast<uint8_t*>(codes.raw()) + e * cb, pc.data(), cb);
      cuda::copy_h2d(static_cast<uint8_t*>(scales.raw()) + e * sb, ps.data(), sb);
    }
    for (int64_t e = distinct; e < E; ++e) {
      cuda::copy_d2d_async(static_cast<uint8_t*>(codes.raw()) + e * cb,
                           static_cast<uint8_t*>(codes.raw()) + (e % distinct) * cb, cb, nullptr);
      cuda::copy_d2d_async(static_cast<uint8_t*>(scales.raw()) + e * sb,
                           static_cast<uint8_t*>(scales.raw()) + (e % distinct) * sb, sb, nullptr);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
  }
};

struct Layer {
  int64_t E, D, I, k, ab;
  float limit;
  std::vector<Fp4Matrix> w1, w3, w2;
  std::unique_ptr<DeviceStack> d1, d3, d2;
  Layer(std::mt19937_64& rng, int64_t e, int64_t d, int64_t i, int64_t top, int64_t act_block,
        float lim, int64_t distinct, bool block_uniform = false)
      : E(e), D(d), I(i), k(top), ab(act_block), limit(lim) {
    for (int64_t x = 0; x < std::min(e, distinct); ++x) {
      w1.push_back(random_fp4(rng, I, D, block_uniform));
      w3.push_back(random_fp4(rng, I, D, block_uniform));
      w2.push_back(random_fp4(rng, D, I, block_uniform));
    }
    d1 = std::make_unique<DeviceStack>(w1, E);
    d3 = std::make_unique<DeviceStack>(w3, E);
    d2 = std::make_unique<DeviceStack>(w2, E);
  }
  int64_t distinct() const { return static_cast<int64_t>(w1.size()); }
  MoeW4a8Weights weights() const {
    return {d1->codes.data<uint8_t>(), d1->scales.data<uint8_t>(), d3->codes.data<uint8_t>(),
            d3->scales.data<uint8_t>(), d2->codes.data<uint8_t>(), d2->scales.data<uint8_t>()};
  }
  MoeExpertsShape shape(int64_t T) const { return {T, k, E, D, I, limit}; }
  std::vector<float> shared_out(const std::vector<float>& x) const {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = 0.1f * x[i];
    return y;
  }
  std::vector<float> run_cuda(const std::vector<float>& x, const std::vector<int32_t>& ids,
                              const std::vector<float>& rw, int64_t T, bool with_shared = true,
                              MoeW4a8Kernel kernel = MoeW4a8Kernel::kPlain) const {
    const MoeExpertsShape s = shape(T);
    Tensor ws = cuda::device_filled(DType::U8, {static_cast<int64_t>(moe_experts_w4a8_workspace_bytes(s, ab))}, 0xff);
    Tensor x_d = upload_f32(x), ids_d = upload_i32(ids), rw_d = upload_f32(rw);
    Tensor sh_d = upload_f32(shared_out(x));
    Tensor out = test::poisoned_f32(T * D);
    moe_experts_w4a8_cuda(nullptr, s, ab, x_d.data<float>(), ids_d.data<int32_t>(),
                          rw_d.data<float>(), weights(), with_shared ? sh_d.data<float>() : nullptr,
                          ws.raw(), out.data<float>(), kernel);
    return download_f32(out);
  }
  // (a) the recipe on the CPU, (b) fp32 experts (no activation quantisation).
  void refs(const std::vector<float>& x, const std::vector<int32_t>& ids,
            const std::vector<float>& rw, int64_t T, std::vector<float>* recipe,
            std::vector<float>* f32) const {
    std::vector<W4a8ExpertRef> ex(E);
    for (int64_t e = 0; e < E; ++e) {
      const int64_t d = e % distinct();
      ex[e] = {w1[d].codes.data(), w1[d].scales.data(), w3[d].codes.data(), w3[d].scales.data(),
               w2[d].codes.data(), w2[d].scales.data()};
    }
    const std::vector<float> shared = shared_out(x);
    recipe->assign(T * D, 0.0f);
    moe_experts_w4a8_ref(x.data(), T, k, D, I, limit, ab, ids.data(), rw.data(), ex, shared.data(),
                         recipe->data());
    *f32 = shared;
    for (int64_t e = 0; e < E; ++e) {
      std::vector<int64_t> rows;
      std::vector<float> wts;
      for (int64_t s = 0; s < T * k; ++s) {
        if (ids[s] != e) continue;
        rows.push_back(s / k);
        wts.push_back(rw[s]);
      }
      if (rows.empty()) continue;
      const int64_t d = e % distinct();
      expert_ffn_accumulate_ref(x.data(), D, rows, wts,
                                {w1[d].values.data(), w3[d].values.data(), w2[d].values.data()}, I,
                                limit, f32->data());
    }
  }
};

struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Distinct experts per token. sorted: ascending as route_cuda gives, drawn from a hot set for
// even tokens; else unsorted (hash-like, tid2eid order), and token 1's last slot (if any) is -1.
Routing make_routing(std::mt19937_64& rng, int64_t E, int64_t k, int64_t T, bool sorted) {
  Routing r{std::vector<int32_t>(T * k), std::vector<float>(T * k)};
  std::vector<int32_t> all(E), hot(std::min<int64_t>(E, 3 * k));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::copy(all.begin(), all.begin() + static_cast<int64_t>(hot.size()), hot.begin());
  std::uniform_real_distribution<float> wd(0.05f, 1.0f);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t>& from = (sorted && t % 2 == 0) ? hot : all;
    std::shuffle(from.begin(), from.end(), rng);
    std::vector<int32_t> pick(from.begin(), from.begin() + k);
    if (sorted) std::sort(pick.begin(), pick.end());
    for (int64_t j = 0; j < k; ++j) {
      r.ids[t * k + j] = pick[j];
      r.weights[t * k + j] = wd(rng);
    }
  }
  if (!sorted && T > 1) r.ids[2 * k - 1] = -1;
  return r;
}

// Bounds. (a) recipe: same exact products, fp32 vs double sums and the Hopper FP8 MMA's own
// accumulation; the h codes can flip by one e4m3 step where h sits at a rounding boundary,
// rare: 1e-4. (b) fp32 experts: the only difference is the e4m3 rounding of x and of h
// (relative error <= 2^-4, rms 2^-4 / sqrt(3) = 0.036 each, NMSE ~1.3e-3 per quantised
// operand, amplified at most ~2x through the SwiGLU product): 1e-2.
constexpr double kRecipeBound = 1e-4, kF32Bound = 1e-2;

void check_layer(std::mt19937_64& rng, const Layer& L, int64_t T, bool sorted, float x_std = 1.0f) {
  const std::string tag = "T " + std::to_string(T) + " E " + std::to_string(L.E) + " D " +
                          std::to_string(L.D) + " I " + std::to_string(L.I) + " k " +
                          std::to_string(L.k) + " act block " + std::to_string(L.ab) +
                          (sorted ? " routed" : " hash-like");
  SCOPED_TRACE(tag);
  const auto x = test::randn(rng, T * L.D, x_std);
  const Routing r = make_routing(rng, L.E, L.k, T, sorted);
  const auto out = L.run_cuda(x, r.ids, r.weights, T);
  std::vector<float> recipe, f32;
  L.refs(x, r.ids, r.weights, T, &recipe, &f32);
  expect_close(out, recipe, L.D, kRecipeBound, tag + " vs the CPU recipe");
  expect_close(out, f32, L.D, kF32Bound, tag + " vs fp32 experts");
  // Batch invariance: the last token alone gives the bits it has inside the batch.
  const int64_t t = T - 1;
  const std::vector<float> x1(x.begin() + t * L.D, x.end());
  const std::vector<int32_t> ids1(r.ids.begin() + t * L.k, r.ids.end());
  const std::vector<float> rw1(r.weights.begin() + t * L.k, r.weights.end());
  const auto out1 = L.run_cuda(x1, ids1, rw1, 1);
  for (int64_t d = 0; d < L.D; ++d) {
    if (std::memcmp(&out1[d], &out[t * L.D + d], sizeof(float)) != 0) {
      ADD_FAILURE() << tag << ": token " << t << " column " << d << " is " << out1[d]
                    << " alone but " << out[t * L.D + d] << " in the batch";
      break;
    }
  }
}

// The pack layout itself: tests/ops/test_moe_w4a8.cc (CPU).
TEST(MoeW4a8Cuda, RefusesBadShapes) {
  EXPECT_THROW(moe_experts_w4a8_workspace_bytes({1, 2, 4, 100, 64, 0.0f}, 128), Error);
  EXPECT_THROW(moe_experts_w4a8_workspace_bytes({1, 2, 4, 128, 64, 0.0f}, 64), Error);
}

TEST(MoeW4a8Cuda, LayerAwkwardShapes) {
  auto rng = test::fresh_rng();
  // D = 288 (2 x 128 + 32), I = 224 (7 x 32: a partial 128-row CTA tile and a partial last
  // activation block), 12 experts, top-3.
  for (const int64_t ab : {128, 32}) {
    const Layer L(rng, 12, 288, 224, 3, ab, 10.0f, 12);
    for (const int64_t T : {1, 3, 64, 256}) check_layer(rng, L, T, true);
    check_layer(rng, L, 64, false);
  }
  // Clamp active on most values; top-6 of 8 experts (16+ rows per expert: several passes).
  const Layer clamped(rng, 8, 256, 128, 6, 128, 1.0f, 8);
  check_layer(rng, clamped, 40, true, 3.0f);
}

TEST(MoeW4a8Cuda, LayerV4FlashShapes) {
  auto rng = test::fresh_rng();
  const Layer L(rng, 256, 4096, 2048, 6, 128, 10.0f, 8);
  for (const int64_t T : {1, 4}) check_layer(rng, L, T, true);
}

TEST(MoeW4a8Cuda, LayerV41FlashShapes) {
  auto rng = test::fresh_rng();
  const Layer L(rng, 384, 5120, 2304, 6, 32, 10.0f, 6);
  check_layer(rng, L, 2, true);
}

// The fast kernels (cp.async stages, K split over a cluster) against the plain ones: the same
// products in another fp32 order, so a few ulp apart, except where an h value sits on an e4m3
// rounding boundary and flips by one code (rare): NMSE < 1e-6 (seen on the H200: <= 3e-10).
// Every split 1..3 of the up and the down projection, awkward shapes and both act blocks;
// the fast path's last token alone bitwise as in its batch.
TEST(MoeW4a8Cuda, FastMatchesPlain) {
  auto rng = test::fresh_rng();
  for (const int64_t ab : {128, 32}) {
    const Layer L(rng, 12, 288, 224, 3, ab, 10.0f, 12);
    for (const int split : {1, 2, 3}) {
      moe_w4a8_set_fast_split(split, 4 - split);
      for (const int64_t T : {1, 5, 64}) {
        const auto x = test::randn(rng, T * L.D);
        const Routing r = make_routing(rng, L.E, L.k, T, T != 5);
        const auto plain = L.run_cuda(x, r.ids, r.weights, T, true, MoeW4a8Kernel::kPlain);
        const auto fast = L.run_cuda(x, r.ids, r.weights, T, true, MoeW4a8Kernel::kFast);
        expect_close(fast, plain, L.D, 1e-6,
                     "T " + std::to_string(T) + " act block " + std::to_string(ab) + " split " +
                         std::to_string(split) + " fast vs plain");
        // Batch invariance of the fast path: the last token alone gives its bits in the batch.
        const std::vector<float> x1(x.end() - L.D, x.end());
        const std::vector<int32_t> ids1(r.ids.end() - L.k, r.ids.end());
        const std::vector<float> rw1(r.weights.end() - L.k, r.weights.end());
        const auto one = L.run_cuda(x1, ids1, rw1, 1, true, MoeW4a8Kernel::kFast);
        EXPECT_EQ(0, std::memcmp(one.data(), fast.data() + (T - 1) * L.D, L.D * sizeof(float)))
            << "T " << T << " act block " << ab << " split " << split << ": the last token alone";
      }
    }
  }
  moe_w4a8_set_fast_split(1, 1);
  const Layer v4(rng, 256, 4096, 2048, 6, 128, 10.0f, 4);
  const auto x = test::randn(rng, 4 * v4.D);
  const Routing r = make_routing(rng, v4.E, v4.k, 4, true);
  expect_close(v4.run_cuda(x, r.ids, r.weights, 4, true, MoeW4a8Kernel::kFast),
               v4.run_cuda(x, r.ids, r.weights, 4, true, MoeW4a8Kernel::kPlain), v4.D, 1e-6,
               "V4-Flash T 4 fast vs plain");
}

// FP4 weights with one scale per 128 x 128 block have an exact block-FP8 form: the W4A8 path
// and today's FP8 grouped path compute the same recipe from the same values.
// The plain path's two widths (moe_w4a8_set_pass_max: 16 tokens per pass, or 8 with the
// narrow kernels, chosen by T by default) give every token the same bits: the MMA columns are
// independent and the K order is one. Experts with more rows than a pass (T 256 over 12
// experts) take several passes at width 8. Both act blocks, awkward shapes.
TEST(MoeW4a8Cuda, NarrowAndWidePassesGiveTheSameBits) {
  auto rng = test::fresh_rng();
  for (const int64_t ab : {128, 32}) {
    const Layer L(rng, 12, 288, 224, 3, ab, 10.0f, 12);
    for (const int64_t T : {1, 3, 64, 256}) {
      const auto x = test::randn(rng, T * L.D);
      const Routing r = make_routing(rng, L.E, L.k, T, T != 3);
      moe_w4a8_set_pass_max(16);
      const auto wide = L.run_cuda(x, r.ids, r.weights, T);
      moe_w4a8_set_pass_max(8);
      const auto narrow = L.run_cuda(x, r.ids, r.weights, T);
      moe_w4a8_set_pass_max(0);
      const auto chosen = L.run_cuda(x, r.ids, r.weights, T);
      EXPECT_EQ(0, std::memcmp(wide.data(), narrow.data(), wide.size() * sizeof(float)))
          << "T " << T << " act block " << ab << ": pass 16 vs pass 8";
      EXPECT_EQ(0, std::memcmp(wide.data(), chosen.data(), wide.size() * sizeof(float)))
          << "T " << T << " act block " << ab << ": pass 16 vs the default choice";
    }
  }
  EXPECT_THROW(moe_w4a8_set_pass_max(4), Error);
}

TEST(MoeW4a8Cuda, MatchesTheFp8GroupedPath) {
  auto rng = test::fresh_rng();
  const Layer L(rng, 16, 512, 384, 4, 128, 10.0f, 16, /*block_uniform=*/true);
  auto fp8_stack = [&](const std::vector<Fp4Matrix>& m, Tensor* q, Tensor* s) {
    const int64_t n = m[0].n, k = m[0].k, nb = ceil_div64(n, 128), kb = ceil_div64(k, 128);
    const int64_t ld = fp8_weight_scale_ld(k);
    std::vector<uint8_t> codes(L.E * n * k);
    std::vector<float> scales(L.E * nb * ld);
    for (int64_t e = 0; e < L.E; ++e) {
      const Fp4Matrix& w = m[e];
      std::vector<float> grid(nb * kb);
      for (int64_t bi = 0; bi < nb; ++bi)
        for (int64_t bj = 0; bj < kb; ++bj)
          grid[bi * kb + bj] = std::ldexp(1.0f, w.scales[bi * 128 * (k / 32) + bj * 4] - 127);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < k; ++j) {
          const float v = w.values[i * k + j] / grid[(i / 128) * kb + j / 128];
          codes[(e * n + i) * k + j] = f32_to_e4m3(v);
          ASSERT_EQ(e4m3_to_f32(codes[(e * n + i) * k + j]), v) << "not exact at " << i << ", " << j;
        }
      const auto pad = expand_weight_scales_f32(grid.data(), n, k);
      std::copy(pad.begin(), pad.end(), scales.begin() + e * nb * ld);
    }
    *q = upload_u8(codes.data(), static_cast<int64_t>(codes.size()));
    *s = upload_f32(scales);
  };
  Tensor q1, s1, q3, s3, q2, s2;
  fp8_stack(L.w1, &q1, &s1);
  fp8_stack(L.w3, &q3, &s3);
  fp8_stack(L.w2, &q2, &s2);
  const MoeExpertsFp8Weights fw{q1.data<uint8_t>(), s1.data<float>(), q3.data<uint8_t>(),
                                s3.data<float>(), q2.data<uint8_t>(), s2.data<float>()};
  for (const int64_t T : {1, 37}) {
    const auto x = test::randn(rng, T * L.D);
    const Routing r = make_routing(rng, L.E, L.k, T, true);
    const auto w4 = L.run_cuda(x, r.ids, r.weights, T, false);
    const MoeExpertsShape s = L.shape(T);
    Tensor ws = cuda::device_empty(DType::U8, {static_cast<int64_t>(moe_experts_fp8_workspace_bytes(s))});
    Tensor x_d = upload_f32(x), ids_d = upload_i32(r.ids), rw_d = upload_f32(r.weights);
    Tensor out = test::poisoned_f32(T * L.D);
    moe_experts_fp8_cuda(nullptr, s, x_d.data<float>(), ids_d.data<int32_t>(), rw_d.data<float>(),
                         fw, nullptr, ws.raw(), out.data<float>());
    expect_close(w4, download_f32(out), L.D, kRecipeBound,
                 "T " + std::to_string(T) + " W4A8 vs the FP8 grouped path");
  }
}

TEST(MoeW4a8Cuda, LayerReplaysFromACudaGraph) {
  auto rng = test::fresh_rng();
  const Layer L(rng, 12, 288, 224, 3, 128, 10.0f, 12);
  const int64_t T = 20;
  const MoeExpertsShape shape = L.shape(T);
  Tensor ws = cuda::device_empty(DType::U8, {static_cast<int64_t>(moe_experts_w4a8_workspace_bytes(shape, 128))});
  Tensor x_d = cuda::device_empty(DType::F32, {T * L.D}), out = test::poisoned_f32(T * L.D);
  Tensor ids_d = cuda::device_empty(DType::I32, {T * L.k});
  Tensor rw_d = cuda::device_empty(DType::F32, {T * L.k});
  cuda::Stream stream = cuda::Stream::create();
  const cuda::Graph graph = cuda::Graph::capture(stream, [&] {
    moe_experts_w4a8_cuda(stream, shape, 128, x_d.data<float>(), ids_d.data<int32_t>(),
                          rw_d.data<float>(), L.weights(), nullptr, ws.raw(), out.data<float>());
  });
  for (int round = 0; round < 2; ++round) {
    const auto x = test::randn(rng, T * L.D);
    const Routing r = make_routing(rng, L.E, L.k, T, round == 0);
    cuda::copy_h2d(x_d.raw(), x.data(), x.size() * sizeof(float));
    cuda::copy_h2d(ids_d.raw(), r.ids.data(), r.ids.size() * sizeof(int32_t));
    cuda::copy_h2d(rw_d.raw(), r.weights.data(), r.weights.size() * sizeof(float));
    graph.launch(stream);
    stream.synchronize();
    const auto got = download_f32(out);
    const auto want = L.run_cuda(x, r.ids, r.weights, T, /*with_shared=*/false);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << "round " << round;
  }
}

// ---- report-only benchmark ----

// Mean ms of fn replayed from a graph of `reps` calls (median of 5 launches).
template <typename Fn>
double graph_ms(cudaStream_t s, int reps, Fn&& fn) {
  fn();
  CUDA_CHECK(cudaStreamSynchronize(s));
  const cuda::Graph g = cuda::Graph::capture(s, [&] {
    for (int i = 0; i < reps; ++i) fn();
  });
  g.launch(s);
  std::vector<double> ms;
  for (int it = 0; it < 5; ++it) {
    cuda::Event a, b;
    a.record(s);
    g.launch(s);
    b.record(s);
    b.synchronize();
    ms.push_back(cuda::Event::elapsed_ms(a, b) / reps);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

TEST(MoeW4a8Cuda, ReportDecodeBandwidth) {
  auto rng = test::fresh_rng();
  cuda::Stream stream = cuda::Stream::create();
  const int64_t gib = int64_t{1} << 30;
  double copy_gbs = 0, read_gbs = 0;
  {
    Tensor a = cuda::device_filled(DType::U8, {gib}, 0x5a), b = cuda::device_empty(DType::U8, {gib});
    Tensor sink = cuda::device_empty(DType::I32, {1});
    const double cms = graph_ms(stream, 4, [&] { cuda::copy_d2d_async(b.raw(), a.raw(), gib, stream); });
    const double rms = graph_ms(stream, 4, [&] {
      w4a8_read_probe_cuda(stream, a.raw(), gib, reinterpret_cast<uint32_t*>(sink.raw()));
    });
    copy_gbs = 2.0 * gib / (cms * 1e6);
    read_gbs = 1.0 * gib / (rms * 1e6);
  }
  std::printf("copy d2d (cudaMemcpy, 1 GiB, read + written): %.0f GB/s; read probe (1 GiB): %.0f GB/s\n",
              copy_gbs, read_gbs);
  struct Shape {
    const char* name;
    int64_t E, D, I, k, ab;
  };
  for (const Shape sh : {Shape{"V4-Flash", 256, 4096, 2048, 6, 128}, Shape{"V4.1-Flash", 384, 5120, 2304, 6, 32}}) {
    const Layer L(rng, sh.E, sh.D, sh.I, sh.k, sh.ab, 10.0f, 2);
    // FP8 stacks of the same shape (random codes without NaN, constant scales): the "before".
    const int64_t up_q = sh.E * sh.I * sh.D, up_s = sh.E * ceil_div64(sh.I, 128) * fp8_weight_scale_ld(sh.D);
    const int64_t dn_q = sh.E * sh.D * sh.I, dn_s = sh.E * ceil_div64(sh.D, 128) * fp8_weight_scale_ld(sh.I);
    Tensor f1 = cuda::device_filled(DType::U8, {up_q}, 0x33), f3 = cuda::device_filled(DType::U8, {up_q}, 0x34);
    Tensor f2 = cuda::device_filled(DType::U8, {dn_q}, 0x35);
    Tensor g1 = cuda::device_filled(DType::U8, {4 * up_s}, 0x30), g3 = cuda::device_filled(DType::U8, {4 * up_s}, 0x30);
    Tensor g2 = cuda::device_filled(DType::U8, {4 * dn_s}, 0x30);  // 0x30303030: 6.4e-10
    const MoeExpertsFp8Weights fw{f1.data<uint8_t>(), g1.data<float>(), f3.data<uint8_t>(),
                                  g3.data<float>(), f2.data<uint8_t>(), g2.data<float>()};
    const double w4_expert = 2.0 * (w4a8_code_bytes(sh.I, sh.D) + w4a8_scale_bytes(sh.I, sh.D)) +
                             w4a8_code_bytes(sh.D, sh.I) + w4a8_scale_bytes(sh.D, sh.I);
    const double f8_expert = 3.0 * sh.I * sh.D + 4.0 * (2 * up_s + dn_s) / sh.E;
    std::printf("%s (E %ld, D %ld, I %ld, top-%ld, act block %ld): W4A8 %.2f MB per expert, FP8 %.2f MB\n",
                sh.name, static_cast<long>(sh.E), static_cast<long>(sh.D), static_cast<long>(sh.I),
                static_cast<long>(sh.k), static_cast<long>(sh.ab), w4_expert / 1e6, f8_expert / 1e6);
    std::printf("| T | experts | W4A8 us | W4A8 GB/s | of copy | of read | FP8 us | FP8 GB/s | speedup | W4A8 plain us |\n");
    for (const int64_t T : {1, 4, 16, 64, 256}) {
      const auto x = test::randn(rng, T * sh.D);
      const Routing r = make_routing(rng, sh.E, sh.k, T, true);
      std::vector<bool> used(sh.E, false);
      for (int32_t e : r.ids) used[e] = true;
      const int64_t n_used = std::count(used.begin(), used.end(), true);
      const MoeExpertsShape s = L.shape(T);
      Tensor ws4 = cuda::device_empty(DType::U8, {static_cast<int64_t>(moe_experts_w4a8_workspace_bytes(s, sh.ab))});
      Tensor ws8 = cuda::device_empty(DType::U8, {static_cast<int64_t>(moe_experts_fp8_workspace_bytes(s))});
      Tensor x_d = upload_f32(x), ids_d = upload_i32(r.ids), rw_d = upload_f32(r.weights);
      Tensor out = cuda::device_empty(DType::F32, {T * sh.D});
      const MoeW4a8Weights w4 = L.weights();
      const double ms4 = graph_ms(stream, 10, [&] {
        moe_experts_w4a8_cuda(stream, s, sh.ab, x_d.data<float>(), ids_d.data<int32_t>(),
                              rw_d.data<float>(), w4, nullptr, ws4.raw(), out.data<float>(),
                              MoeW4a8Kernel::kFast);
      });
      const double ms_plain = graph_ms(stream, 10, [&] {
        moe_experts_w4a8_cuda(stream, s, sh.ab, x_d.data<float>(), ids_d.data<int32_t>(),
                              rw_d.data<float>(), w4, nullptr, ws4.raw(), out.data<float>(),
                              MoeW4a8Kernel::kPlain);
      });
      const double ms8 = graph_ms(stream, 10, [&] {
        moe_experts_fp8_cuda(stream, s, x_d.data<float>(), ids_d.data<int32_t>(), rw_d.data<float>(),
                             fw, nullptr, ws8.raw(), out.data<float>());
      });
      const double gbs4 = n_used * w4_expert / (ms4 * 1e6), gbs8 = n_used * f8_expert / (ms8 * 1e6);
      std::printf("| %ld | %ld | %.1f | %.0f | %.0f%% | %.0f%% | %.1f | %.0f | %.2fx | %.1f |\n",
                  static_cast<long>(T), static_cast<long>(n_used), 1e3 * ms4, gbs4,
                  100.0 * gbs4 / copy_gbs, 100.0 * gbs4 / read_gbs, 1e3 * ms8, gbs8, ms8 / ms4,
                  1e3 * ms_plain);
    }
  }
}

}  // namespace
}  // namespace deepinfer
