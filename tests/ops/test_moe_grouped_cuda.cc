// Routed experts on the device without host sync (ops/moe/moe_grouped_cuda.h):
//  * moe_align_cuda vs a CPU reference (exact ints) at awkward sizes, skewed routing and an
//    out-of-range id;
//  * grouped_gemm_fp8_cuda vs gemm_fp8_block_ref per expert (experts with 0, 1, 3, 65, 200
//    rows; awkward N and K; V4-Flash's 256 experts x [2048, 4096]);
//  * moe_experts_fp8_cuda vs (a) the same FP8 recipe composed on the CPU from act_quant_ref and
//    gemm_fp8_block_ref (tight) and (b) the fp32 MoE reference expert_ffn_accumulate_ref on the
//    dequantised weights (FP8 activation rounding only), small and V4-Flash shapes (D 4096,
//    I 2048, 256 experts top-6, T = 1, 16, 256);
//  * outputs poisoned with NaN first; a token's output is bitwise the same alone and in a batch;
//  * the layer captured into a CUDA graph replays new routing bit-identically.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "base/parallel.h"
#include "cuda/graph.h"
#include "cuda/stream.h"
#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/gemm/gemm.h"
#include "ops/moe/moe.h"
#include "ops/moe/moe_grouped_cuda.h"
#include "ops/quant/act_quant.h"

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
std::vector<float> download_f32_raw(const float* d, int64_t n) {
  std::vector<float> v(n);
  if (n > 0) cuda::copy_d2h(v.data(), d, n * sizeof(float));
  return v;
}
Tensor upload_u8(const std::vector<uint8_t>& v) { return test::upload_vec(v, DType::U8); }
int64_t workspace_elems(const MoeExpertsShape& s) {
  return static_cast<int64_t>(moe_experts_fp8_workspace_bytes(s));
}

// ---- alignment reference ----

struct AlignRef {
  std::vector<int32_t> counts, offsets, row_slot, slot_row, tile_expert, tile_row0;
};

AlignRef align_ref(const std::vector<int32_t>& ids, int64_t T, int64_t k, int64_t E) {
  AlignRef r;
  r.counts.assign(E, 0);
  for (int32_t e : ids)
    if (e >= 0 && e < E) ++r.counts[e];
  r.offsets.assign(E + 1, 0);
  for (int64_t e = 0; e < E; ++e)
    r.offsets[e + 1] = r.offsets[e] + (r.counts[e] + kMoeRowTile - 1) / kMoeRowTile * kMoeRowTile;
  r.row_slot.assign(r.offsets[E], -1);
  r.slot_row.assign(T * k, -1);
  std::vector<int32_t> next(r.offsets.begin(), r.offsets.end() - 1);
  for (int64_t s = 0; s < T * k; ++s) {
    const int32_t e = ids[s];
    if (e < 0 || e >= E) continue;
    r.row_slot[next[e]] = static_cast<int32_t>(s);
    r.slot_row[s] = next[e]++;
  }
  const int64_t tiles = moe_tiles_cap(T, k, E);
  r.tile_expert.assign(tiles, -1);
  r.tile_row0.assign(tiles, 0);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t row = r.offsets[e]; row < r.offsets[e + 1]; row += kMoeRowTile) {
      r.tile_expert[row / kMoeRowTile] = static_cast<int32_t>(e);
      r.tile_row0[row / kMoeRowTile] = static_cast<int32_t>(row);
    }
  }
  return r;
}

// Device buffers for the alignment of T x k slots over E experts.
struct AlignDev {
  Tensor counts, offsets, row_slot, slot_row, tile_expert, tile_row0;
  MoeAlignBuffers buf;
  AlignDev(int64_t T, int64_t k, int64_t E) {
    const int64_t cap = moe_rows_cap(T, k, E), tiles = moe_tiles_cap(T, k, E);
    auto mk = [](int64_t n) {
      return cuda::device_filled(DType::I32, {std::max<int64_t>(n, 1)}, 0x7b);
    };
    counts = mk(E);
    offsets = mk(E + 1);
    row_slot = mk(cap);
    slot_row = mk(T * k);
    tile_expert = mk(tiles);
    tile_row0 = mk(tiles);
    buf = {counts.data<int32_t>(), offsets.data<int32_t>(), row_slot.data<int32_t>(),
           slot_row.data<int32_t>(), tile_expert.data<int32_t>(), tile_row0.data<int32_t>()};
  }
};

void check_align(const std::vector<int32_t>& ids, int64_t T, int64_t k, int64_t E) {
  SCOPED_TRACE(testing::Message() << "T " << T << " k " << k << " E " << E);
  const AlignRef ref = align_ref(ids, T, k, E);
  AlignDev dev(T, k, E);
  Tensor ids_d = upload_i32(ids.empty() ? std::vector<int32_t>{0} : ids);
  moe_align_cuda(nullptr, ids_d.data<int32_t>(), T, k, E, dev.buf);
  EXPECT_EQ(download_i32(dev.buf.counts, E), ref.counts);
  EXPECT_EQ(download_i32(dev.buf.offsets, E + 1), ref.offsets);
  EXPECT_EQ(download_i32(dev.buf.row_slot, ref.offsets[E]), ref.row_slot);
  EXPECT_EQ(download_i32(dev.buf.slot_row, T * k), ref.slot_row);
  const int64_t tiles = moe_tiles_cap(T, k, E);
  EXPECT_EQ(download_i32(dev.buf.tile_expert, tiles), ref.tile_expert);
  const auto row0 = download_i32(dev.buf.tile_row0, tiles);
  for (int64_t i = 0; i < tiles; ++i) {
    if (ref.tile_expert[i] >= 0) {
      EXPECT_EQ(row0[i], ref.tile_row0[i]) << "tile " << i;
    }
  }
  EXPECT_LE(ref.offsets[E], moe_rows_cap(T, k, E));
}

TEST(MoeGroupedCuda, AlignMatchesReference) {
  auto rng = test::fresh_rng();
  struct Case { int64_t T, k, E; };
  for (const Case c : {Case{1, 6, 256}, Case{7, 2, 8}, Case{300, 6, 256}, Case{2000, 6, 384},
                       Case{100, 1, 5}, Case{5000, 8, 64}, Case{64, 6, 1025},
                       Case{50, 3, kMoeAlignMaxExperts}}) {
    // distinct experts per token, as routing gives
    std::vector<int32_t> ids(c.T * c.k), perm(c.E);
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t t = 0; t < c.T; ++t) {
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t j = 0; j < c.k; ++j) ids[t * c.k + j] = perm[j];
    }
    check_align(ids, c.T, c.k, c.E);
  }
  // Skewed: every token's first slot to expert 3, the rest spread; one id out of range.
  std::vector<int32_t> ids(500 * 4);
  std::uniform_int_distribution<int32_t> ex(0, 31);
  for (int64_t s = 0; s < 2000; ++s) ids[s] = s % 4 == 0 ? 3 : ex(rng);
  check_align(ids, 500, 4, 32);
  ids[17] = 32;
  ids[18] = -1;
  check_align(ids, 500, 4, 32);
  check_align({}, 0, 6, 256);
}

// ---- FP8 data ----

// e4m3 codes of N(0, 1) * 64 (no NaN codes), drawn from a precomputed pool for speed.
struct CodePool {
  std::vector<uint8_t> pool;
  explicit CodePool(std::mt19937_64& rng) {
    std::normal_distribution<float> d(0.0f, 64.0f);
    pool.resize(1 << 14);
    for (auto& c : pool) c = f32_to_e4m3(std::max(-448.0f, std::min(448.0f, d(rng))));
  }
  void fill(std::mt19937_64& rng, uint8_t* out, int64_t n) const {
    for (int64_t i = 0; i < n; i += 4) {
      const uint64_t r = rng();
      for (int64_t j = 0; j < 4 && i + j < n; ++j) out[i + j] = pool[(r >> (16 * j)) & 0x3fff];
    }
  }
};

// E experts of [N, K]: codes [E, N, K], checkpoint scales [E, n_nb, n_kb] (powers of two
// around 2^-6 / sqrt(K), so that W x has unit scale), padded CUDA scales [E, n_nb, ld].
struct Experts {
  int64_t E, N, K, n_nb, n_kb, ld;
  std::vector<uint8_t> q;
  std::vector<float> s, s_pad;
  Experts(std::mt19937_64& rng, const CodePool& pool, int64_t e, int64_t n, int64_t k)
      : E(e), N(n), K(k), n_nb(ceil_div64(n, 128)), n_kb(ceil_div64(k, 128)),
        ld(fp8_weight_scale_ld(k)) {
    q.resize(E * N * K);
    pool.fill(rng, q.data(), static_cast<int64_t>(q.size()));
    const int base = -6 - static_cast<int>(std::round(0.5 * std::log2(static_cast<double>(K))));
    std::uniform_int_distribution<int> jitter(-1, 1);
    s.resize(E * n_nb * n_kb);
    for (auto& v : s) v = std::ldexp(1.0f, base + jitter(rng));
    s_pad.resize(E * n_nb * ld);
    for (int64_t x = 0; x < E; ++x) {
      const auto p = expand_weight_scales_f32(s.data() + x * n_nb * n_kb, N, K);
      std::copy(p.begin(), p.end(), s_pad.begin() + x * n_nb * ld);
    }
  }
  const uint8_t* wq(int64_t e) const { return q.data() + e * N * K; }
  const float* ws(int64_t e) const { return s.data() + e * n_nb * n_kb; }
  std::vector<float> dequant(int64_t e) const {
    std::vector<float> w(N * K);
    parallel_for(N, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        for (int64_t j = 0; j < K; ++j)
          w[i * K + j] = e4m3_to_f32(wq(e)[i * K + j]) * ws(e)[(i / 128) * n_kb + j / 128];
    }, 16);
    return w;
  }
};

// Rows of x gathered, quantised per 1x128 (reference layout) and multiplied by expert e.
std::vector<float> expert_gemm_ref(const std::vector<uint8_t>& xq, const std::vector<float>& sx,
                                   int64_t K, const std::vector<int64_t>& rows, const Experts& w,
                                   int64_t e) {
  const int64_t m = static_cast<int64_t>(rows.size()), n_kb = ceil_div64(K, 128);
  std::vector<uint8_t> aq(m * K);
  std::vector<float> as(m * n_kb), y(m * w.N);
  for (int64_t i = 0; i < m; ++i) {
    std::copy(xq.begin() + rows[i] * K, xq.begin() + (rows[i] + 1) * K, aq.begin() + i * K);
    std::copy(sx.begin() + rows[i] * n_kb, sx.begin() + (rows[i] + 1) * n_kb,
              as.begin() + i * n_kb);
  }
  gemm_fp8_block_ref(aq.data(), as.data(), w.wq(e), w.ws(e), m, w.N, K, y.data());
  return y;
}

// Block-major copy [n_kb, m] of row-major scales [m, n_kb].
std::vector<float> block_major(const std::vector<float>& s, int64_t m, int64_t n_kb) {
  std::vector<float> out(n_kb * m);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t b = 0; b < n_kb; ++b) out[b * m + i] = s[i * n_kb + b];
  return out;
}

// One grouped GEMM (k = 1: token t -> expert assign[t]) against the per-expert reference.
// With `dual`, a second weight set runs in the same launch (w_b) and is checked too.
void check_grouped_gemm(std::mt19937_64& rng, const CodePool& pool,
                        const std::vector<int64_t>& rows_per_expert, int64_t N, int64_t K,
                        double max_nmse, bool dual = false) {
  const int64_t E = static_cast<int64_t>(rows_per_expert.size());
  SCOPED_TRACE(testing::Message() << "E " << E << " N " << N << " K " << K);
  std::vector<int32_t> assign;
  for (int64_t e = 0; e < E; ++e)
    assign.insert(assign.end(), rows_per_expert[e], static_cast<int32_t>(e));
  std::shuffle(assign.begin(), assign.end(), rng);
  const int64_t T = static_cast<int64_t>(assign.size()), n_kb = ceil_div64(K, 128);
  const auto x = test::randn(rng, T * K);
  std::vector<uint8_t> xq(T * K);
  std::vector<float> sx(T * n_kb);
  act_quant_ref(x.data(), T, K, 128, xq.data(), sx.data());
  const Experts w(rng, pool, E, N, K);
  const Experts wb(rng, pool, dual ? E : 1, dual ? N : 1, dual ? K : 16);

  AlignDev al(T, 1, E);
  Tensor ids_d = upload_i32(assign);
  moe_align_cuda(nullptr, ids_d.data<int32_t>(), T, 1, E, al.buf);
  const int64_t cap = moe_rows_cap(T, 1, E);
  Tensor xq_d = upload_u8(xq), sx_d = upload_f32(block_major(sx, T, n_kb));
  Tensor w_d = upload_u8(w.q), sw_d = upload_f32(w.s_pad);
  Tensor c_d = test::poisoned_f32(cap * N), cb_d = test::poisoned_f32(cap * N);
  Tensor wb_d = upload_u8(wb.q), swb_d = upload_f32(wb.s_pad);
  GroupedGemmFp8Params p;
  p.a = xq_d.data<uint8_t>();
  p.sa = sx_d.data<float>();
  p.sa_ld = T;
  p.a_rows = al.buf.row_slot;
  p.a_rows_div = 1;
  p.w = w_d.data<uint8_t>();
  p.sw = sw_d.data<float>();
  p.c = c_d.data<float>();
  p.ldc = N;
  p.n = N;
  p.k = K;
  p.tile_expert = al.buf.tile_expert;
  p.tile_row0 = al.buf.tile_row0;
  p.n_tiles_cap = moe_tiles_cap(T, 1, E);
  if (dual) {
    p.w_b = wb_d.data<uint8_t>();
    p.sw_b = swb_d.data<float>();
    p.c_b = cb_d.data<float>();
  }
  grouped_gemm_fp8_cuda(nullptr, p);
  for (int pass = 0; pass < (dual ? 2 : 1); ++pass) {
    SCOPED_TRACE(pass == 0 ? "first weight" : "second weight (w_b)");
    const Experts& we = pass == 0 ? w : wb;
    const auto c = download_f32(pass == 0 ? c_d : cb_d);
    const auto slot_row = download_i32(al.buf.slot_row, T);
    const auto offsets = download_i32(al.buf.offsets, E + 1);
    const auto row_slot = download_i32(al.buf.row_slot, offsets[E]);
    // Every row of the padded total written: real rows compared below, padding rows zero.
    for (int64_t r = 0; r < offsets[E]; ++r) {
      if (row_slot[r] >= 0) continue;
      for (int64_t n = 0; n < N; ++n) ASSERT_EQ(c[r * N + n], 0.0f) << "padding row " << r;
    }
    for (int64_t e = 0; e < E; ++e) {
      std::vector<int64_t> rows;
      for (int64_t t = 0; t < T; ++t)
        if (assign[t] == e) rows.push_back(t);
      if (rows.empty()) continue;
      const auto ref = expert_gemm_ref(xq, sx, K, rows, we, e);
      std::vector<float> got(rows.size() * N);
      for (size_t i = 0; i < rows.size(); ++i)
        std::copy(c.begin() + slot_row[rows[i]] * N, c.begin() + (slot_row[rows[i]] + 1) * N,
                  got.begin() + i * N);
      EXPECT_LT(test::nmse(got.data(), ref.data(), static_cast<int64_t>(got.size())), max_nmse)
          << "expert " << e << " (" << rows.size() << " rows)";
    }
  }
}

TEST(MoeGroupedCuda, GroupedGemmMatchesReference) {
  auto rng = test::fresh_rng();
  const CodePool pool(rng);
  // Experts with 0, 1, 3, 65 and 200 rows; N with a partial 64-column tile and 128-row scale
  // block, K with a partial 128 block; then K a multiple of 128, N a multiple of 64.
  // Bound: products are exact and the reference sums in fp32; the MMA may sum a 128-K block
  // with less precision (DeepGEMM promotes for that reason), so allow ~3e-4 relative rms.
  check_grouped_gemm(rng, pool, {0, 1, 3, 65, 200}, 200, 336, 1e-7, /*dual=*/true);
  check_grouped_gemm(rng, pool, {200, 3, 0, 1, 65, 0}, 256, 512, 1e-7);
  check_grouped_gemm(rng, pool, {1}, 8, 16, 1e-7);
}

TEST(MoeGroupedCuda, GroupedGemmV4FlashShapes) {
  auto rng = test::fresh_rng();
  const CodePool pool(rng);
  // 256 experts x [2048, 4096] (W1 of V4-Flash); 256 tokens top-1 spread unevenly.
  std::vector<int64_t> rows(256, 0);
  std::uniform_int_distribution<int> e(0, 255);
  for (int i = 0; i < 256 * 6; ++i) ++rows[e(rng) % (i % 3 == 0 ? 16 : 256)];
  check_grouped_gemm(rng, pool, rows, 2048, 4096, 1e-7);
}

// ---- the layer ----

struct Layer {
  int64_t E, D, I, k;
  float limit;
  Experts w1, w3, w2;
  Tensor w1_d, s1_d, w3_d, s3_d, w2_d, s2_d;
  Layer(std::mt19937_64& rng, const CodePool& pool, int64_t e, int64_t d, int64_t i, int64_t top,
        float lim)
      : E(e), D(d), I(i), k(top), limit(lim), w1(rng, pool, e, i, d), w3(rng, pool, e, i, d),
        w2(rng, pool, e, d, i) {
    w1_d = upload_u8(w1.q);
    s1_d = upload_f32(w1.s_pad);
    w3_d = upload_u8(w3.q);
    s3_d = upload_f32(w3.s_pad);
    w2_d = upload_u8(w2.q);
    s2_d = upload_f32(w2.s_pad);
  }
  MoeExpertsFp8Weights weights() const {
    return {w1_d.data<uint8_t>(), s1_d.data<float>(), w3_d.data<uint8_t>(), s3_d.data<float>(),
            w2_d.data<uint8_t>(), s2_d.data<float>()};
  }
  MoeExpertsShape shape(int64_t T) const { return {T, k, E, D, I, limit}; }
  // Stand-in for the shared expert's output: any per-token function of x, small enough not
  // to hide errors of the routed part in the NMSE, large enough that dropping it fails.
  std::vector<float> shared_out(const std::vector<float>& x, int64_t T) const {
    std::vector<float> y(T * D);
    for (int64_t i = 0; i < T * D; ++i) y[i] = 0.1f * x[i];
    return y;
  }

  std::vector<float> run_cuda(const std::vector<float>& x, const std::vector<int32_t>& ids,
                              const std::vector<float>& rw, int64_t T,
                              bool with_shared = true) const {
    const MoeExpertsShape s = shape(T);
    Tensor ws = cuda::device_filled(DType::U8, {workspace_elems(s)}, 0xff);
    Tensor x_d = upload_f32(x), ids_d = upload_i32(ids), rw_d = upload_f32(rw);
    Tensor shared_d = upload_f32(shared_out(x, T));
    Tensor out = test::poisoned_f32(T * D);
    moe_experts_fp8_cuda(nullptr, s, x_d.data<float>(), ids_d.data<int32_t>(), rw_d.data<float>(),
                         weights(), with_shared ? shared_d.data<float>() : nullptr, ws.raw(),
                         out.data<float>());
    return download_f32(out);
  }

  // Mean time of one layer call (printed, never asserted) and the weight bytes it must read.
  void report_time(const std::vector<float>& x, const std::vector<int32_t>& ids,
                   const std::vector<float>& rw, int64_t T) const {
    const MoeExpertsShape s = shape(T);
    Tensor ws = cuda::device_empty(DType::U8, {workspace_elems(s)});
    Tensor x_d = upload_f32(x), ids_d = upload_i32(ids), rw_d = upload_f32(rw);
    Tensor out = cuda::device_empty(DType::F32, {T * D});
    auto run = [&] {
      moe_experts_fp8_cuda(nullptr, s, x_d.data<float>(), ids_d.data<int32_t>(),
                           rw_d.data<float>(), weights(), nullptr, ws.raw(), out.data<float>());
    };
    const double ms = test::mean_ms(run, 20);
    std::vector<bool> used(E, false);
    for (int32_t e : ids) used[e] = true;
    const int64_t n_used = std::count(used.begin(), used.end(), true);
    const double us = 1e3 * ms;
    const double bytes = static_cast<double>(n_used) * 3 * I * D;
    const double flops = 2.0 * 3 * I * D * static_cast<double>(T * k);
    std::printf("  T %ld: %.1f us per layer, %ld experts used, weights %.1f GB/s, %.1f TFLOP/s\n",
                static_cast<long>(T), us, static_cast<long>(n_used), bytes / us * 1e-3,
                flops / us * 1e-6);
  }

  // (a) the FP8 recipe on the CPU; (b) the fp32 reference on dequantised weights.
  void run_refs(const std::vector<float>& x, const std::vector<int32_t>& ids,
                const std::vector<float>& rw, int64_t T, std::vector<float>* fp8_ref,
                std::vector<float>* f32_ref) const {
    const int64_t kb_d = ceil_div64(D, 128), kb_i = ceil_div64(I, 128);
    std::vector<uint8_t> xq(T * D);
    std::vector<float> sx(T * kb_d);
    act_quant_ref(x.data(), T, D, 128, xq.data(), sx.data());
    // y[slot] for every slot, then summed per token in slot order.
    std::vector<float> y_slot(T * k * D, 0.0f);
    f32_ref->assign(T * D, 0.0f);
    for (int64_t e = 0; e < E; ++e) {
      std::vector<int64_t> slots, rows;
      std::vector<float> wts;
      for (int64_t s = 0; s < T * k; ++s) {
        if (ids[s] != e) continue;
        slots.push_back(s);
        rows.push_back(s / k);
        wts.push_back(rw[s]);
      }
      if (slots.empty()) continue;
      const int64_t m = static_cast<int64_t>(slots.size());
      const auto g = expert_gemm_ref(xq, sx, D, rows, w1, e);
      const auto u = expert_gemm_ref(xq, sx, D, rows, w3, e);
      std::vector<float> h(m * I);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < I; ++j) {
          float gate = g[i * I + j], up = u[i * I + j];
          if (limit > 0) {
            gate = std::min(gate, limit);
            up = std::min(limit, std::max(-limit, up));
          }
          h[i * I + j] = gate / (1.0f + std::exp(-gate)) * up * wts[i];
        }
      }
      std::vector<uint8_t> hq(m * I);
      std::vector<float> sh(m * kb_i), y(m * D);
      act_quant_ref(h.data(), m, I, 128, hq.data(), sh.data());
      gemm_fp8_block_ref(hq.data(), sh.data(), w2.wq(e), w2.ws(e), m, D, I, y.data());
      for (int64_t i = 0; i < m; ++i)
        std::copy(y.begin() + i * D, y.begin() + (i + 1) * D, y_slot.begin() + slots[i] * D);
      const auto f1 = w1.dequant(e), f3 = w3.dequant(e), f2 = w2.dequant(e);
      expert_ffn_accumulate_ref(x.data(), D, rows, wts, {f1.data(), f3.data(), f2.data()}, I,
                                limit, f32_ref->data());
    }
    fp8_ref->assign(T * D, 0.0f);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t d = 0; d < D; ++d) (*fp8_ref)[t * D + d] += y_slot[(t * k + j) * D + d];
    const auto shared = shared_out(x, T);
    for (int64_t i = 0; i < T * D; ++i) {
      (*fp8_ref)[i] += shared[i];
      (*f32_ref)[i] += shared[i];
    }
  }
};

struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Distinct experts per token in ascending order (as route_cuda gives); even tokens draw from a
// hot set of 24 experts, odd ones from all, so some experts get many rows, most few.
Routing random_routing(std::mt19937_64& rng, const Layer& L, int64_t T) {
  Routing r{std::vector<int32_t>(T * L.k), std::vector<float>(T * L.k)};
  std::vector<int32_t> all(L.E), hot(std::min<int64_t>(L.E, 24));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::copy(all.begin(), all.begin() + static_cast<int64_t>(hot.size()), hot.begin());
  std::uniform_real_distribution<float> wd(0.05f, 1.0f);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t>& from = t % 2 == 0 ? hot : all;
    std::shuffle(from.begin(), from.end(), rng);
    std::vector<int32_t> pick(from.begin(), from.begin() + L.k);
    std::sort(pick.begin(), pick.end());
    for (int64_t j = 0; j < L.k; ++j) {
      r.ids[t * L.k + j] = pick[j];
      r.weights[t * L.k + j] = wd(rng);
    }
  }
  return r;
}

void check_layer(std::mt19937_64& rng, const Layer& L, int64_t T, float x_std,
                 bool timed = false) {
  SCOPED_TRACE(testing::Message() << "T " << T << " E " << L.E << " D " << L.D << " I " << L.I
                                  << " k " << L.k);
  const auto x = test::randn(rng, T * L.D, x_std);
  const Routing routing = random_routing(rng, L, T);
  const std::vector<int32_t>& ids = routing.ids;
  const std::vector<float>& rw = routing.weights;
  const auto out = L.run_cuda(x, ids, rw, T);
  std::vector<float> fp8_ref, f32_ref;
  L.run_refs(x, ids, rw, T, &fp8_ref, &f32_ref);
  const double e_fp8 = test::nmse(out.data(), fp8_ref.data(), T * L.D);
  const double e_f32 = test::nmse(out.data(), f32_ref.data(), T * L.D);
  std::printf("  T %ld: NMSE vs FP8 recipe %.3g, vs fp32 experts %.3g\n", static_cast<long>(T),
              e_fp8, e_f32);
  EXPECT_LT(e_fp8, 1e-4);  // MMA sums in another order: rare 1-ulp flips in h's e4m3 codes
  EXPECT_LT(e_f32, 1e-2);

  // Batch invariance: the last token alone gives the same bits as inside the batch.
  const int64_t t = T - 1;
  const std::vector<float> x1(x.begin() + t * L.D, x.end());
  const std::vector<int32_t> ids1(ids.begin() + t * L.k, ids.end());
  const std::vector<float> rw1(rw.begin() + t * L.k, rw.end());
  const auto out1 = L.run_cuda(x1, ids1, rw1, 1);
  EXPECT_EQ(0, std::memcmp(out1.data(), out.data() + t * L.D, L.D * sizeof(float)))
      << "token " << t << " differs alone vs in a batch of " << T;
  if (timed) L.report_time(x, ids, rw, T);
}

TEST(MoeGroupedCuda, LayerSmallShapes) {
  auto rng = test::fresh_rng();
  const CodePool pool(rng);
  const Layer L(rng, pool, 12, 272, 208, 3, 10.0f);  // partial 128 blocks in D and I
  for (int64_t T : {1, 5, 70, 300}) check_layer(rng, L, T, 1.0f);
  const Layer clamped(rng, pool, 8, 256, 128, 2, 1.0f);  // clamp active on most values
  check_layer(rng, clamped, 40, 3.0f);
}

TEST(MoeGroupedCuda, LayerV4FlashShapes) {
  auto rng = test::fresh_rng();
  const CodePool pool(rng);
  const Layer L(rng, pool, 256, 4096, 2048, 6, 10.0f);
  for (int64_t T : {1, 16, 256}) check_layer(rng, L, T, 1.0f, /*timed=*/true);
}

// The layer captured once into a CUDA graph (capture fails on any host synchronisation or
// allocation inside it) and replayed with new routing and inputs written into the same
// buffers: the same bits as direct runs.
TEST(MoeGroupedCuda, LayerReplaysFromACudaGraph) {
  auto rng = test::fresh_rng();
  const CodePool pool(rng);
  const Layer L(rng, pool, 12, 272, 208, 3, 10.0f);
  const int64_t T = 70;
  const MoeExpertsShape shape = L.shape(T);
  Tensor ws = cuda::device_empty(DType::U8, {workspace_elems(shape)});
  Tensor x_d = cuda::device_empty(DType::F32, {T * L.D}), out = test::poisoned_f32(T * L.D);
  Tensor ids_d = cuda::device_empty(DType::I32, {T * L.k});
  Tensor rw_d = cuda::device_empty(DType::F32, {T * L.k});
  cuda::Stream stream = cuda::Stream::create();
  const cuda::Graph graph = cuda::Graph::capture(stream, [&] {
    moe_experts_fp8_cuda(stream, shape, x_d.data<float>(), ids_d.data<int32_t>(),
                         rw_d.data<float>(), L.weights(), nullptr, ws.raw(), out.data<float>());
  });
  for (int round = 0; round < 2; ++round) {
    const auto x = test::randn(rng, T * L.D);
    const Routing r = random_routing(rng, L, T);
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
