// Paged K=V cache on the GPU vs the CPU reference (kv_cache.h): kv_store_cuda writes the
// same bytes as kv_store_ref (random entries over many magnitudes, e4m3 rounding ties, the
// 1e-4 amax floor), kv_load_cuda returns the same floats, and paged_attention_cuda matches
// paged_attention_ref over shuffled (non-contiguous) block tables: a window pool and a
// compressed pool (all visible entries or a random top-k with -1 holes) at awkward sizes
// and at V4-Flash shapes (64 heads x 512, window 128, top-512), decode and prefill rows.
// Also: a row alone gives bitwise the same output as inside the batch. NaN-poisoned outputs.
// Split-K (a workspace): every case again with the workspace (NaN-poisoned) against the
// reference and the unsplit kernel, deterministic, a short workspace refused; decode batches
// of 1, 2, 4 at V4-Flash shapes (CSA top-512, HCA-all up to 2048); us per call for B = 1,
// 16, 64 (report only). The tensor-core kernel (paged_attention_mma_cuda) on every supported
// case against the reference (check_mma). Indexer scores: 1 and 4 rows bitwise equal to the 12-row call.
// FP8 indexer keys (index_cache.h): store/load vs the CPU, and the paged indexer scores vs
// index_load_ref + indexer_scores_ref over shuffled block tables at V4-Flash shapes; the same
// for V4.1's 68-B FP4 keys. V4.1's 528 / 288-B K=V formats: store/load and paged attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include "base/error.h"
#include "cuda/device_tensor.h"
#include "cuda/event.h"
#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/quant/qat.h"
#include "ops/indexer/indexer.h"
#include "ops/kv_cache/index_cache.h"
#include "ops/kv_cache/index_cache_cuda.h"
#include "ops/kv_cache/kv_cache.h"
#include "ops/kv_cache/kv_cache_cuda.h"

namespace deepinfer {
namespace {

Tensor upload_bytes(const std::vector<uint8_t>& v) { return test::upload_vec(v, DType::U8); }

std::vector<uint8_t> download_bytes(const Tensor& t) {
  std::vector<uint8_t> v(t.numel());
  cuda::copy_d2h(v.data(), t.raw(), t.nbytes());
  return v;
}

// Elements that differ (by value: -0 == 0; NaN only equals NaN).
template <typename T>
int64_t count_differences(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return -1;
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += !(a[i] == b[i]) && !(a[i] != a[i] && b[i] != b[i]);
  return n;
}

void check_store_and_load(std::mt19937_64& rng, const KvCacheLayout& l, int64_t n, int64_t n_blocks) {
  SCOPED_TRACE(testing::Message() << kv_cache_dtype_name(l.dtype) << " d " << l.head_dim << " rope "
                                  << l.rope_dim << " block " << l.block_size);
  const int64_t d = l.head_dim, stride = d + 5;
  std::vector<float> x(n * stride);
  for (int64_t i = 0; i < n; ++i) {
    const float stddev = std::pow(10.0f, static_cast<float>(i % 9) - 5.0f);  // 1e-5 .. 1e3
    const auto row = test::randn(rng, d, stddev);
    std::copy(row.begin(), row.end(), x.begin() + i * stride);
  }
  // Row 1: values halfway between e4m3 neighbours (scale 1: amax 448) -> ties to even.
  for (int64_t c = 0; c < std::min<int64_t>(d, 64); ++c) {
    x[stride + c] = c == 0 ? 448.0f : (c % 2 ? 1.0625f : 17.0f) * (c % 3 ? 1.0f : -1.0f);
  }
  std::vector<int32_t> all(n_blocks * l.block_size);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int32_t> slots(all.begin(), all.begin() + n);
  slots[n / 2] = -1;
  std::vector<uint8_t> cache(n_blocks * l.block_bytes(), 0xab);
  Tensor cache_d = upload_bytes(cache), x_d = test::upload_f32(x), slots_d = test::upload_i32(slots);
  kv_store_ref(l, x.data(), n, stride, slots.data(), cache.data(), n_blocks);
  kv_store_cuda(nullptr, l, x_d.data<float>(), n, stride, slots_d.data<int32_t>(), cache_d.data<uint8_t>());
  const auto got = download_bytes(cache_d);
  int64_t mismatches = 0, first = -1;
  for (size_t b = 0; b < got.size(); ++b) {
    if (got[b] != cache[b]) {
      if (first < 0) first = static_cast<int64_t>(b);
      ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << "first differing byte " << first;

  std::vector<float> want(n * d);
  kv_load_ref(l, cache.data(), n_blocks, slots.data(), n, want.data());
  Tensor y_d = test::poisoned_f32(n * d);
  kv_load_cuda(nullptr, l, cache_d.data<uint8_t>(), slots_d.data<int32_t>(), n, y_d.data<float>());
  const auto y = test::download_f32(y_d);
  for (int64_t i = 0; i < n * d; ++i) ASSERT_EQ(y[i], want[i]) << "load element " << i;
}

TEST(KvCacheCuda, StoreIsByteIdenticalAndLoadIdentical) {
  auto rng = test::fresh_rng();
  check_store_and_load(rng, KvCacheLayout::v4(KvCacheDtype::kFp8, 64), 300, 7);
  check_store_and_load(rng, KvCacheLayout::v4(KvCacheDtype::kBf16, 64), 300, 7);
  check_store_and_load(rng, KvCacheLayout{KvCacheDtype::kFp8, 128, 64, 5}, 37, 11);
  check_store_and_load(rng, KvCacheLayout{KvCacheDtype::kFp8, 256, 0, 3}, 20, 9);
  check_store_and_load(rng, KvCacheLayout{KvCacheDtype::kBf16, 96, 0, 1}, 13, 17);
}

// One pool: n_blocks blocks holding random entries (stored with kv_store_ref), and per
// sequence a shuffled block table: logical entry e of sequence s is slot
// table[s][e / block_size] * block_size + e % block_size.
struct Pool {
  KvCacheLayout layout;
  int64_t n_blocks = 0;
  std::vector<uint8_t> bytes;
  std::vector<std::vector<int32_t>> tables;

  int32_t slot(int64_t seq, int64_t e) const {
    return static_cast<int32_t>(tables[seq][e / layout.block_size] * layout.block_size +
                                e % layout.block_size);
  }
};

Pool make_pool(std::mt19937_64& rng, KvCacheLayout layout, const std::vector<int64_t>& entries_per_seq) {
  Pool p;
  p.layout = layout;
  std::vector<int64_t> n_tables;
  for (int64_t n : entries_per_seq) {
    n_tables.push_back((n + layout.block_size - 1) / layout.block_size);
    p.n_blocks += n_tables.back();
  }
  p.n_blocks += 3;  // spare blocks nobody owns
  std::vector<int32_t> ids(p.n_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  int64_t next = 0;
  for (int64_t t : n_tables) {
    p.tables.emplace_back(ids.begin() + next, ids.begin() + next + t);
    next += t;
  }
  const int64_t n_slots = p.n_blocks * layout.block_size, d = layout.head_dim;
  const auto x = test::randn(rng, n_slots * d, 1.0f);
  std::vector<int32_t> all(n_slots);
  std::iota(all.begin(), all.end(), 0);
  p.bytes.assign(p.n_blocks * layout.block_bytes(), 0);
  kv_store_ref(layout, x.data(), n_slots, d, all.data(), p.bytes.data(), p.n_blocks);
  return p;
}

// paged_attention_mma_cuda (bf16 tensor cores, q and P as hi + lo bf16 terms) on a case
// run_case built: `pd` the device call, `ref` paged_attention_ref's output. fp32-level
// agreement with the reference: nmse < 1e-10, the SIMT kernel's bound (measured 4e-12 to
// 1.3e-11 on the H200; a plain bf16 q alone measured 1.6e-6 here). A row alone gives the
// bits it gets in the batch.
void check_mma(const PagedAttentionParams& pd, const std::vector<float>& ref) {
  if (!paged_attention_mma_supported(pd)) {
    EXPECT_THROW(paged_attention_mma_cuda(nullptr, pd), Error);
    return;
  }
  const int64_t N = pd.n_rows, H = pd.n_heads, d = pd.sources[0].layout.head_dim;
  Tensor od = test::poisoned_f32(N * H * d);
  PagedAttentionParams pm = pd;
  pm.out = od.data<float>();
  paged_attention_mma_cuda(nullptr, pm);
  const auto out = test::download_f32(od);
  const double err = test::nmse(out.data(), ref.data(), N * H * d);
  std::printf("  mma (bf16 tensor cores, hi + lo terms): nmse %.3g vs the reference\n", err);
  EXPECT_LT(err, 1e-10);
  const int64_t r = N / 2;  // a middle row alone
  Tensor o1 = test::poisoned_f32(H * d);
  PagedAttentionParams p1 = pm;
  p1.n_rows = 1;
  p1.q = pd.q + r * H * d;
  p1.out = o1.data<float>();
  p1.sources[0].indices = pd.sources[0].indices + r * pd.sources[0].max_indices;
  if (pd.sources[1].max_indices > 0) {
    p1.sources[1].indices = pd.sources[1].indices + r * pd.sources[1].max_indices;
    if (pd.sources[1].n_indices != nullptr) p1.sources[1].n_indices = pd.sources[1].n_indices + r;
  }
  paged_attention_mma_cuda(nullptr, p1);
  const auto alone = test::download_f32(o1);
  for (int64_t i = 0; i < H * d; ++i) ASSERT_EQ(alone[i], out[r * H * d + i]) << "mma: element " << i;
  if (H == 64 && d == 512) {  // report only
    const double ms = test::mean_ms([&] { paged_attention_mma_cuda(nullptr, pm); }, 20);
    std::printf("  mma: %.1f us per call\n", 1e3 * ms);
  }
}

struct Case {
  KvCacheDtype dtype;
  int64_t n_heads, head_dim, rope_dim, window, ratio, topk;  // topk 0: all visible entries
  int64_t block_size;
  std::vector<std::pair<int64_t, int64_t>> chunks;  // (start position, length) per sequence
  // V4.1 formats (fp8 dtype): 528-B window pool, 288-B compressed pool (rope_dim unused).
  bool v41 = false;
};

void run_case(std::mt19937_64& rng, const Case& c) {
  SCOPED_TRACE(testing::Message() << kv_cache_dtype_name(c.dtype) << " H " << c.n_heads << " d "
                                  << c.head_dim << " W " << c.window << " ratio " << c.ratio
                                  << " topk " << c.topk << " seqs " << c.chunks.size());
  const int64_t H = c.n_heads, d = c.head_dim, W = c.window, S = static_cast<int64_t>(c.chunks.size());
  KvCacheLayout layout{c.dtype, d, c.rope_dim, c.block_size};
  if (c.v41) {
    layout = KvCacheLayout::v41_window(c.dtype, c.block_size);
    layout.head_dim = d;
  }
  std::vector<int64_t> win_entries, cmp_entries;
  for (const auto& [start, len] : c.chunks) {
    win_entries.push_back(start + len);  // the window pool holds positions 0 .. end-1
    cmp_entries.push_back(c.ratio > 0 ? std::max<int64_t>(1, (start + len) / c.ratio) : 1);
  }
  const Pool win = make_pool(rng, layout, win_entries);
  KvCacheLayout cmp_layout = layout;
  if (c.v41) {
    cmp_layout = KvCacheLayout::v41_compressed(c.dtype, c.block_size);
    cmp_layout.head_dim = d;
  }
  cmp_layout.block_size = c.block_size * 2 + 1;  // block sizes may differ between pools
  const Pool cmp = make_pool(rng, cmp_layout, cmp_entries);

  std::vector<int32_t> win_idx, cmp_idx, n_cmp;
  const int64_t max_cmp = c.topk > 0 ? c.topk : [&] {
    int64_t m = 1;
    for (int64_t e : cmp_entries) m = std::max(m, e);
    return m;
  }();
  int64_t N = 0;
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t i = 0; i < c.chunks[s].second; ++i, ++N) {
      const int64_t pos = c.chunks[s].first + i;
      for (int64_t j = 0; j < W; ++j) {  // window: positions pos-W+1 .. pos, -1 before 0
        const int64_t kp = pos - W + 1 + j;
        win_idx.push_back(kp >= 0 ? win.slot(s, kp) : -1);
      }
      std::vector<int32_t> row(max_cmp, -1);
      int32_t count = 0;
      if (c.ratio > 0) {
        const int64_t n_vis = (pos + 1) / c.ratio;
        std::vector<int64_t> ids(n_vis);
        std::iota(ids.begin(), ids.end(), 0);
        if (c.topk > 0) {
          std::shuffle(ids.begin(), ids.end(), rng);
          ids.resize(std::min(n_vis, c.topk));
        }
        for (size_t j = 0; j < ids.size(); ++j) row[j] = cmp.slot(s, ids[j]);
        count = static_cast<int32_t>(c.topk > 0 ? std::min(c.topk, n_vis + 2) : n_vis);
        if (count > 3) row[count / 2] = -1;  // a hole inside the list
      }
      cmp_idx.insert(cmp_idx.end(), row.begin(), row.end());
      n_cmp.push_back(count);
    }
  }
  const auto q = test::randn(rng, N * H * d, 1.0f);
  const auto sinks = test::randn(rng, H, 1.0f);
  std::vector<float> ref(N * H * d);
  PagedAttentionParams p;
  p.q = q.data();
  p.out = ref.data();
  p.sinks = sinks.data();
  p.n_rows = N;
  p.n_heads = H;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.sources[0] = {win.bytes.data(), win.layout, win.n_blocks, win_idx.data(), nullptr, W};
  if (c.ratio > 0) {
    p.sources[1] = {cmp.bytes.data(), cmp.layout, cmp.n_blocks, cmp_idx.data(), n_cmp.data(), max_cmp};
  }
  paged_attention_ref(p);

  Tensor qd = test::upload_f32(q), sd = test::upload_f32(sinks);
  Tensor wcd = upload_bytes(win.bytes), ccd = upload_bytes(cmp.bytes);
  Tensor wid = test::upload_i32(win_idx), cid = test::upload_i32(cmp_idx), ncd = test::upload_i32(n_cmp);
  Tensor od = test::poisoned_f32(N * H * d);
  PagedAttentionParams pd = p;
  pd.q = qd.data<float>();
  pd.out = od.data<float>();
  pd.sinks = sd.data<float>();
  pd.sources[0].cache = wcd.data<uint8_t>();
  pd.sources[0].indices = wid.data<int32_t>();
  if (c.ratio > 0) {
    pd.sources[1].cache = ccd.data<uint8_t>();
    pd.sources[1].indices = cid.data<int32_t>();
    pd.sources[1].n_indices = ncd.data<int32_t>();
  }
  paged_attention_cuda(nullptr, pd);
  const auto out = test::download_f32(od);
  const double err = test::nmse(out.data(), ref.data(), N * H * d);
  std::printf("paged attention %s H %lld d %lld W %lld ratio %lld topk %lld rows %lld: nmse %.3g\n",
              kv_cache_dtype_name(c.dtype), static_cast<long long>(H), static_cast<long long>(d),
              static_cast<long long>(W), static_cast<long long>(c.ratio),
              static_cast<long long>(c.topk), static_cast<long long>(N), err);
  EXPECT_LT(err, 1e-10);

  // Split-K (a workspace; only grids small enough split): against the reference, against the
  // unsplit kernel, and deterministic (two calls give the same bits). The workspace starts
  // NaN-poisoned, so a partial the combine reads but nobody wrote shows.
  const int64_t ws_bytes = paged_attention_workspace_bytes(N, H, d, W + (c.ratio > 0 ? max_cmp : 0));
  Tensor ws = cuda::device_filled(DType::U8, {std::max<int64_t>(ws_bytes, 16)}, 0xff);
  Tensor os = test::poisoned_f32(N * H * d), os2 = test::poisoned_f32(N * H * d);
  PagedAttentionParams ps = pd;
  ps.workspace = ws.raw();
  ps.workspace_bytes = ws_bytes;
  if (ws_bytes > 0) {
    ps.out = os.data<float>();
    paged_attention_cuda(nullptr, ps);
    const auto split = test::download_f32(os);
    ps.out = os2.data<float>();
    paged_attention_cuda(nullptr, ps);
    const auto split2 = test::download_f32(os2);
    const double err_ref = test::nmse(split.data(), ref.data(), N * H * d);
    const double err_unsplit = test::nmse(split.data(), out.data(), N * H * d);
    std::printf("  split-K (workspace %lld B): nmse %.3g vs reference, %.3g vs unsplit\n",
                static_cast<long long>(ws_bytes), err_ref, err_unsplit);
    EXPECT_LT(err_ref, 1e-10);
    EXPECT_LT(err_unsplit, 1e-11);
    EXPECT_EQ(count_differences(split, split2), 0);
    // When N rows need more than N - 1 (so this call splits and needs all of it), a
    // workspace one byte short is refused.
    if (ws_bytes > paged_attention_workspace_bytes(N - 1, H, d, W + (c.ratio > 0 ? max_cmp : 0))) {
      PagedAttentionParams short_ws = ps;
      short_ws.workspace_bytes = ws_bytes - 1;
      EXPECT_THROW(paged_attention_cuda(nullptr, short_ws), Error);
    }
  }

  if (H == 64 && d == 512) {  // report only: time per call and the cache bytes it must read
    auto time_us = [&](const PagedAttentionParams& params) {
      cuda::Event start, stop;
      constexpr int kIters = 20;
      paged_attention_cuda(nullptr, params);
      start.record(nullptr);
      for (int i = 0; i < kIters; ++i) paged_attention_cuda(nullptr, params);
      stop.record(nullptr);
      stop.synchronize();
      return 1e3 * cuda::Event::elapsed_ms(start, stop) / kIters;
    };
    const double us = time_us(pd);
    const double us_split = ws_bytes > 0 ? time_us(ps) : us;
    int64_t listed = 0;
    for (int32_t v : win_idx) listed += v >= 0;
    for (int64_t r = 0; r < N; ++r) {
      for (int64_t j = 0; j < n_cmp[r]; ++j) listed += cmp_idx[r * max_cmp + j] >= 0;
    }
    const double bytes = static_cast<double>(listed) * layout.entry_bytes();
    std::printf("  %.1f us per call unsplit, %.1f us split-K, %lld (row, key) pairs, %.1f GB/s of "
                "listed cache entries (unsplit)\n", us, us_split,
                static_cast<long long>(listed), bytes / (us * 1e3));
  }

  check_mma(pd, ref);

  // The last row alone (shifted index pointers) gives the same bits as inside the batch.
  const int64_t r = N - 1;
  Tensor o1 = test::poisoned_f32(H * d);
  PagedAttentionParams p1 = pd;
  p1.n_rows = 1;
  p1.q = qd.data<float>() + r * H * d;
  p1.out = o1.data<float>();
  p1.sources[0].indices = wid.data<int32_t>() + r * W;
  if (c.ratio > 0) {
    p1.sources[1].indices = cid.data<int32_t>() + r * max_cmp;
    p1.sources[1].n_indices = ncd.data<int32_t>() + r;
  }
  paged_attention_cuda(nullptr, p1);
  const auto alone = test::download_f32(o1);
  for (int64_t i = 0; i < H * d; ++i) ASSERT_EQ(alone[i], out[r * H * d + i]) << "element " << i;
}

TEST(KvCacheCuda, PagedAttentionAwkwardSizes) {
  auto rng = test::fresh_rng();
  run_case(rng, {KvCacheDtype::kFp8, 3, 128, 64, 5, 0, 0, 3, {{0, 11}, {7, 4}, {30, 1}}});
  run_case(rng, {KvCacheDtype::kFp8, 5, 128, 64, 5, 4, 3, 2, {{0, 23}, {9, 6}, {41, 1}, {2, 1}}});
  run_case(rng, {KvCacheDtype::kBf16, 1, 96, 0, 16, 7, 0, 5, {{0, 40}, {50, 9}, {100, 1}}});
  run_case(rng, {KvCacheDtype::kFp8, 17, 256, 64, 3, 4, 50, 4, {{0, 30}, {13, 2}}});
  run_case(rng, {KvCacheDtype::kBf16, 20, 512, 64, 9, 128, 0, 7, {{300, 3}}});
}

TEST(KvCacheCuda, PagedAttentionV4FlashShapes) {
  auto rng = test::fresh_rng();
  for (KvCacheDtype dt : {KvCacheDtype::kFp8, KvCacheDtype::kBf16}) {
    // Decode: one query per sequence, batched; CSA top-512 of ~1000 entries; HCA all entries.
    run_case(rng, {dt, 64, 512, 64, 128, 4, 512, 64, {{4000, 1}, {2100, 1}, {700, 1}, {3, 1}}});
    run_case(rng, {dt, 64, 512, 64, 128, 128, 0, 64, {{8191, 1}, {5000, 1}}});
  }
  // Prefill: a 48-token chunk continuing a sequence plus a fresh one; a window-only layer.
  run_case(rng, {KvCacheDtype::kFp8, 64, 512, 64, 128, 4, 512, 64, {{2200, 48}, {0, 16}}});
  run_case(rng, {KvCacheDtype::kFp8, 64, 512, 64, 128, 0, 0, 64, {{300, 40}}});
  // A prefill chunk big enough for the tensor-core kernel's grid (264 rows), both dtypes;
  // more than 64 heads (two head groups) at an awkward size.
  run_case(rng, {KvCacheDtype::kFp8, 64, 512, 64, 128, 4, 512, 64, {{2000, 300}}});
  run_case(rng, {KvCacheDtype::kBf16, 64, 512, 64, 128, 128, 0, 64, {{5000, 280}}});
  run_case(rng, {KvCacheDtype::kFp8, 70, 128, 64, 20, 4, 40, 16, {{100, 30}, {0, 9}}});
}

// DeepSeek-V4.1's formats (kv_cache.h: e4m3/32 window pool, e2m1 + e4m3/16 compressed pool)
// through the generic kernels: SIMT, split-K, tensor cores, a row alone. V4.1-Flash shapes
// (64 heads x 512, window 128): ratio 2 top-512 decode and prefill, ratio 1 top-512, a
// window-only layer, a prefill chunk large enough for the tensor-core grid.
TEST(KvCacheCuda, PagedAttentionV41Formats) {
  auto rng = test::fresh_rng();
  check_store_and_load(rng, KvCacheLayout::v41_window(KvCacheDtype::kFp8, 64), 300, 7);
  check_store_and_load(rng, KvCacheLayout::v41_compressed(KvCacheDtype::kFp8, 64), 300, 7);
  check_store_and_load(rng, KvCacheLayout::v41_compressed(KvCacheDtype::kFp8, 3), 29, 13);
  const auto fp8 = KvCacheDtype::kFp8;
  run_case(rng, {fp8, 64, 512, 0, 128, 2, 512, 64, {{4000, 1}, {2100, 1}, {700, 1}, {3, 1}}, true});
  run_case(rng, {fp8, 64, 512, 0, 128, 1, 512, 64, {{3000, 1}, {9, 1}}, true});
  run_case(rng, {fp8, 64, 512, 0, 128, 2, 512, 64, {{2200, 48}, {0, 16}}, true});
  run_case(rng, {fp8, 64, 512, 0, 128, 0, 0, 64, {{300, 40}}, true});
  run_case(rng, {fp8, 64, 512, 0, 128, 1, 512, 64, {{2000, 300}}, true});
  run_case(rng, {fp8, 5, 96, 0, 7, 2, 11, 3, {{0, 23}, {40, 2}}, true});
}

// Split-K at decode batches of 1, 2 and 4 rows, V4-Flash shapes (64 heads x 512, window
// 128): CSA top-512 (n_indices shorter than 512 on short rows, -1 holes) and HCA-all lists of
// up to 2048 entries (ratio 4, every visible entry), fp8 and bf16 caches. run_case checks the
// unsplit kernel and the split one against the reference and against each other.
TEST(KvCacheCuda, PagedAttentionSplitKDecode) {
  auto rng = test::fresh_rng();
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> batches = {
      {{4000, 1}}, {{4000, 1}, {700, 1}}, {{8191, 1}, {2100, 1}, {300, 1}, {3, 1}}};
  for (KvCacheDtype dt : {KvCacheDtype::kFp8, KvCacheDtype::kBf16}) {
    for (const auto& chunks : batches) {
      run_case(rng, {dt, 64, 512, 64, 128, 4, 512, 64, chunks});  // CSA top-512
      run_case(rng, {dt, 64, 512, 64, 128, 4, 0, 64, chunks});    // HCA-all, up to 2048
    }
  }
}

// Report only: us per call of the unsplit and the split-K kernel at V4-Flash decode shapes
// (64 heads x 512, fp8, window 128 + top-512 and window 128 + 32 HCA entries of a 4K
// context) for B = 1, 16, 64, with random slots into one pool; split vs unsplit agreement is
// checked where the call splits.
TEST(KvCacheCuda, PagedAttentionSplitKTiming) {
  auto rng = test::fresh_rng();
  const KvCacheLayout layout = KvCacheLayout::v4(KvCacheDtype::kFp8, 64);
  const int64_t H = 64, d = 512, W = 128, n_slots = 8192;
  std::vector<int32_t> all(n_slots);
  std::iota(all.begin(), all.end(), 0);
  std::vector<uint8_t> cache(n_slots / layout.block_size * layout.block_bytes(), 0);
  {
    const auto x = test::randn(rng, n_slots * d, 1.0f);
    kv_store_ref(layout, x.data(), n_slots, d, all.data(), cache.data(), n_slots / layout.block_size);
  }
  Tensor cd = upload_bytes(cache);
  const auto sinks = test::randn(rng, H, 1.0f);
  Tensor sd = test::upload_f32(sinks);
  std::uniform_int_distribution<int32_t> any_slot(0, static_cast<int32_t>(n_slots - 1));
  for (int64_t cmp_keys : {512, 32}) {
    for (int64_t B : {1, 16, 64}) {
      std::vector<int32_t> win(B * W), cmp(B * cmp_keys), n_cmp(B, static_cast<int32_t>(cmp_keys));
      for (auto& v : win) v = any_slot(rng);
      for (auto& v : cmp) v = any_slot(rng);
      const auto q = test::randn(rng, B * H * d, 1.0f);
      Tensor qd = test::upload_f32(q), wd = test::upload_i32(win), kd = test::upload_i32(cmp);
      Tensor nd = test::upload_i32(n_cmp), o1 = test::poisoned_f32(B * H * d), o2 = test::poisoned_f32(B * H * d);
      PagedAttentionParams p;
      p.q = qd.data<float>();
      p.out = o1.data<float>();
      p.sinks = sd.data<float>();
      p.n_rows = B;
      p.n_heads = H;
      p.scale = 1.0f / std::sqrt(static_cast<float>(d));
      p.sources[0] = {cd.data<uint8_t>(), layout, n_slots / layout.block_size, wd.data<int32_t>(), nullptr, W};
      p.sources[1] = {cd.data<uint8_t>(), layout, n_slots / layout.block_size, kd.data<int32_t>(),
                      nd.data<int32_t>(), cmp_keys};
      const int64_t ws_bytes = paged_attention_workspace_bytes(B, H, d, W + cmp_keys);
      Tensor ws = cuda::device_filled(DType::U8, {std::max<int64_t>(ws_bytes, 16)}, 0xff);
      PagedAttentionParams ps = p;
      ps.out = o2.data<float>();
      ps.workspace = ws.raw();
      ps.workspace_bytes = ws_bytes;
      auto time_us = [&](const PagedAttentionParams& params) {
        cuda::Event start, stop;
        constexpr int kIters = 50;
        paged_attention_cuda(nullptr, params);
        start.record(nullptr);
        for (int i = 0; i < kIters; ++i) paged_attention_cuda(nullptr, params);
        stop.record(nullptr);
        stop.synchronize();
        return 1e3 * cuda::Event::elapsed_ms(start, stop) / kIters;
      };
      const double us = time_us(p), us_split = time_us(ps);
      const auto a = test::download_f32(o1), b = test::download_f32(o2);
      const double err = test::nmse(b.data(), a.data(), B * H * d);
      std::printf("paged attention V4-Flash fp8 B %lld keys %lld + %lld: %.1f us unsplit, %.1f us with "
                  "workspace (%lld B), nmse split vs unsplit %.3g\n",
                  static_cast<long long>(B), static_cast<long long>(W), static_cast<long long>(cmp_keys),
                  us, us_split, static_cast<long long>(ws_bytes), err);
      EXPECT_LT(err, 1e-11);
    }
  }
}

TEST(IndexCacheCuda, StoreLoadAndPagedScores) {
  auto rng = test::fresh_rng();
  // fp4: V4.1's 68-B keys (IndexKeyFormat::kE2m1Ue8m0Block32) at ratio 2 (V4.1-Flash: 32
  // heads x 128); the others V4's e4m3 keys at ratio 4.
  for (const auto& [H, d, bs, fp4] :
       {std::tuple<int64_t, int64_t, int64_t, bool>{64, 128, 64, false}, {5, 96, 3, false}, {8, 96, 4, false},
        {32, 128, 64, true}, {5, 96, 3, true}, {8, 64, 4, true}}) {
    SCOPED_TRACE(testing::Message() << "H " << H << " d " << d << " block " << bs << (fp4 ? " fp4" : ""));
    IndexCacheLayout l;
    l.head_dim = d;
    l.block_size = bs;
    if (fp4) l.format = IndexKeyFormat::kE2m1Ue8m0Block32;
    // Sequences (decode rows and a short prefill chunk) as (start, length).
    const std::vector<std::pair<int64_t, int64_t>> chunks = {{8001, 1}, {2050, 1}, {6, 1}, {300, 9}};
    const int64_t ratio = fp4 ? 2 : 4, S = static_cast<int64_t>(chunks.size());
    std::vector<int64_t> n_entries;
    int64_t max_blocks = 0, n_blocks = 2;
    for (const auto& [start, len] : chunks) {
      n_entries.push_back((start + len) / ratio);
      max_blocks = std::max(max_blocks, (n_entries.back() + bs - 1) / bs);
      n_blocks += (n_entries.back() + bs - 1) / bs;
    }
    std::vector<int32_t> ids(n_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int32_t> table(S * max_blocks, -1), key_slots;
    std::vector<float> keys;
    int64_t next = 0;
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t b = 0; b < (n_entries[s] + bs - 1) / bs; ++b) table[s * max_blocks + b] = ids[next++];
      for (int64_t e = 0; e < n_entries[s]; ++e) {
        key_slots.push_back(static_cast<int32_t>(table[s * max_blocks + e / bs] * bs + e % bs));
        auto k = test::randn(rng, d, 1.0f);
        if (e % 2 == 0 && d == 128) {  // official keys: Hadamard + FP4 round trip
          hadamard_transform(k.data(), d);
          fp4_roundtrip(k.data(), d, 32);
        }
        keys.insert(keys.end(), k.begin(), k.end());
      }
    }
    const int64_t n_keys = static_cast<int64_t>(key_slots.size());
    const int32_t skipped_slot = key_slots[n_keys / 3];
    key_slots[n_keys / 3] = -1;  // a skipped row: its slot keeps the poison bytes
    std::vector<uint8_t> cache(n_blocks * l.block_bytes(), 0x3c);
    Tensor cache_d = upload_bytes(cache), keys_d = test::upload_f32(keys), slots_d = test::upload_i32(key_slots);
    index_store_ref(l, keys.data(), n_keys, d, key_slots.data(), cache.data(), n_blocks);
    index_store_cuda(nullptr, l, keys_d.data<float>(), n_keys, d, slots_d.data<int32_t>(), cache_d.data<uint8_t>());
    EXPECT_EQ(count_differences(download_bytes(cache_d), cache), 0);
    std::vector<float> deq(n_keys * d);
    index_load_ref(l, cache.data(), n_blocks, key_slots.data(), n_keys, deq.data());
    Tensor deq_d = test::poisoned_f32(n_keys * d);
    index_load_cuda(nullptr, l, cache_d.data<uint8_t>(), slots_d.data<int32_t>(), n_keys, deq_d.data<float>());
    EXPECT_EQ(count_differences(test::download_f32(deq_d), deq), 0);

    // Scores read every key of a sequence: store the skipped one too (host and device).
    {
      const std::vector<int32_t> one = {skipped_slot};
      Tensor one_d = test::upload_i32(one);
      index_store_ref(l, &keys[(n_keys / 3) * d], 1, d, one.data(), cache.data(), n_blocks);
      index_store_cuda(nullptr, l, keys_d.data<float>() + (n_keys / 3) * d, 1, d, one_d.data<int32_t>(),
                       cache_d.data<uint8_t>());
    }
    std::vector<int32_t> pos, seq;
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t i = 0; i < chunks[s].second; ++i) {
        pos.push_back(static_cast<int32_t>(chunks[s].first + i));
        seq.push_back(static_cast<int32_t>(s));
      }
    }
    const int64_t N = static_cast<int64_t>(pos.size()), stride = max_blocks * bs + 3;
    const auto q = test::randn(rng, N * H * d, 1.0f), g = test::randn(rng, N * H, 1.0f);
    const float head_scale = 1.0f / std::sqrt(static_cast<float>(H)), scale = 1.0f / std::sqrt(static_cast<float>(d));
    // ref: the CPU scores; mag: the same sum with every term's magnitude (sum_h |g_h| * sum_i
    // |q_hi k_i| * scale), the scale of a score's rounding error whatever its cancellation.
    std::vector<float> ref(N * stride, NAN);
    std::vector<double> mag(N * stride, 0.0);
    for (int64_t r = 0; r < N; ++r) {
      const int64_t nk = (pos[r] + 1) / ratio;
      std::vector<int32_t> slots(nk);
      for (int64_t e = 0; e < nk; ++e) slots[e] = table[seq[r] * max_blocks + e / bs] * static_cast<int32_t>(bs) + static_cast<int32_t>(e % bs);
      std::vector<float> k(nk * d), gs(H);
      index_load_ref(l, cache.data(), n_blocks, slots.data(), nk, k.data());
      for (int64_t h = 0; h < H; ++h) gs[h] = g[r * H + h] * head_scale;
      indexer_scores_ref(&q[r * H * d], gs.data(), H, d, k.data(), nk, scale, &ref[r * stride]);
      for (int64_t e = 0; e < nk; ++e) {
        for (int64_t h = 0; h < H; ++h) {
          double dot = 0.0;
          for (int64_t i = 0; i < d; ++i) dot += std::abs(static_cast<double>(q[(r * H + h) * d + i]) * k[e * d + i]);
          mag[r * stride + e] += std::abs(gs[h]) * dot * scale;
        }
      }
    }
    // Every score within tol * mag of the CPU's; entries past a row's keys untouched. fp32
    // bound: both sides sum d products then H heads with fp32 rounding, |error| <= (d + H) *
    // 2^-24 * mag each (plus the weight, ReLU-scale and sum roundings), so tol = 2 (d + H + 4)
    // 2^-24. The tensor-core kernel: twice that (its fp32 accumulation inside the MMA units
    // may round differently) plus 2^-17 for q carried as hi + lo (error <= 2^-18 |q|). Not nmse per row: a row with
    // one key whose heads cancel has an arbitrary relative error at fp32 rounding level.
    auto check_scores = [&](const std::vector<float>& got, double tol, const char* what) {
      double worst = 0.0;
      for (int64_t r = 0; r < N; ++r) {
        const int64_t nk = (pos[r] + 1) / ratio;
        for (int64_t e = 0; e < nk; ++e) {
          const double err = std::abs(static_cast<double>(got[r * stride + e]) - ref[r * stride + e]);
          const double ratio_e = err / std::max(mag[r * stride + e], 1e-30);
          if (!(ratio_e <= worst)) worst = ratio_e;  // NaN propagates
        }
        for (int64_t s2 = nk; s2 < stride; ++s2) {
          EXPECT_TRUE(std::isnan(got[r * stride + s2])) << what << " row " << r << " entry " << s2 << " written";
        }
      }
      std::printf("indexer paged scores %s H %lld d %lld: max |diff| / magnitude %.3g (bound %.3g)\n",
                  what, static_cast<long long>(H), static_cast<long long>(d), worst, tol);
      EXPECT_LE(worst, tol) << what;
    };
    const double tol_fp32 = 2.0 * static_cast<double>(d + H + 4) * std::ldexp(1.0, -24);
    Tensor qd = test::upload_f32(q), gd = test::upload_f32(g), pd = test::upload_i32(pos);
    Tensor sqd = test::upload_i32(seq), td = test::upload_i32(table), scd = test::poisoned_f32(N * stride);
    IndexerPagedScoresParams p;
    p.q = qd.data<float>();
    p.g = gd.data<float>();
    p.n_rows = N;
    p.n_heads = H;
    p.head_scale = head_scale;
    p.scale = scale;
    p.positions = pd.data<int32_t>();
    p.seq = sqd.data<int32_t>();
    p.ratio = ratio;
    p.cache = cache_d.data<uint8_t>();
    p.layout = l;
    p.block_table = td.data<int32_t>();
    p.max_blocks = max_blocks;
    p.scores = scd.data<float>();
    p.score_stride = stride;
    indexer_paged_scores_cuda(nullptr, p);
    const auto got = test::download_f32(scd);
    check_scores(got, tol_fp32, "(SIMT)");
    // Tensor-core scores (indexer_paged_scores_mma_cuda) where supported (5 x 96 with 3-key
    // blocks is not: 300-byte blocks): check_scores' tensor-core bound, and each row alone
    // bitwise equal to the batch.
    if (!indexer_paged_scores_mma_supported(p)) {
      EXPECT_THROW(indexer_paged_scores_mma_cuda(nullptr, p), Error);
    } else {
      Tensor smd = test::poisoned_f32(N * stride);
      IndexerPagedScoresParams pm = p;
      pm.scores = smd.data<float>();
      indexer_paged_scores_mma_cuda(nullptr, pm);
      const auto mm = test::download_f32(smd);
      check_scores(mm, 2.0 * tol_fp32 + std::ldexp(1.0, -17), "(mma)");
      for (int64_t r0 = 0; r0 < N; r0 += 5) {
        IndexerPagedScoresParams pr = pm;
        Tensor sub = test::poisoned_f32(stride);
        pr.q = qd.data<float>() + r0 * H * d;
        pr.g = gd.data<float>() + r0 * H;
        pr.positions = pd.data<int32_t>() + r0;
        pr.seq = sqd.data<int32_t>() + r0;
        pr.n_rows = 1;
        pr.scores = sub.data<float>();
        indexer_paged_scores_mma_cuda(nullptr, pr);
        const auto part = test::download_f32(sub);
        const std::vector<float> want(mm.begin() + r0 * stride, mm.begin() + (r0 + 1) * stride);
        EXPECT_EQ(count_differences(part, want), 0) << "mma row " << r0 << " alone";
      }
      if (H == 64) {  // report only: the 12 rows
        const double ms = test::mean_ms([&] { indexer_paged_scores_mma_cuda(nullptr, pm); }, 50);
        std::printf("indexer paged scores (mma) H 64 d 128, %lld rows: %.1f us per call\n",
                    static_cast<long long>(N), 1e3 * ms);
      }
    }
    // Small batches spread the keys over more blocks (fewer keys per block): each row alone
    // (1 row) and the first 4 rows give bitwise the rows of the 12-row call.
    for (const int64_t n : {int64_t{1}, int64_t{4}}) {
      for (int64_t r0 = 0; r0 + n <= N; r0 += n == 1 ? 1 : N) {
        IndexerPagedScoresParams pr = p;
        Tensor sub = test::poisoned_f32(n * stride);
        pr.q = qd.data<float>() + r0 * H * d;
        pr.g = gd.data<float>() + r0 * H;
        pr.positions = pd.data<int32_t>() + r0;
        pr.seq = sqd.data<int32_t>() + r0;
        pr.n_rows = n;
        pr.scores = sub.data<float>();
        indexer_paged_scores_cuda(nullptr, pr);
        const auto part = test::download_f32(sub);
        const std::vector<float> want(got.begin() + r0 * stride, got.begin() + (r0 + n) * stride);
        EXPECT_EQ(count_differences(part, want), 0) << n << " rows from row " << r0;
      }
    }
    if (H == 64) {  // report only: us per call of one decode row at 8001 (2000 keys)
      IndexerPagedScoresParams p1 = p;
      p1.n_rows = 1;
      cuda::Event start, stop;
      constexpr int kIters = 50;
      indexer_paged_scores_cuda(nullptr, p1);
      start.record(nullptr);
      for (int i = 0; i < kIters; ++i) indexer_paged_scores_cuda(nullptr, p1);
      stop.record(nullptr);
      stop.synchronize();
      std::printf("indexer paged scores H 64 d 128, 1 row of %lld keys: %.1f us per call\n",
                  static_cast<long long>((pos[0] + 1) / ratio),
                  1e3 * cuda::Event::elapsed_ms(start, stop) / kIters);
    }
  }
}

TEST(KvCacheCuda, PagedIndicesMatchTheReference) {
  auto rng = test::fresh_rng();
  const int64_t n_seqs = 5, W = 128, wbs = 64, cbs = 16, ratio = 4, max_sel = 512;
  std::uniform_int_distribution<int32_t> pos_dist(0, 9000);
  std::vector<int32_t> pos, seq;
  for (int64_t r = 0; r < 37; ++r) {
    pos.push_back(r % 6 == 0 ? static_cast<int32_t>(r) : pos_dist(rng));
    seq.push_back(static_cast<int32_t>(r % n_seqs));
  }
  const int64_t wmax = 9001 / wbs + 1, cmax = 9001 / ratio / cbs + 1;
  std::vector<int32_t> wtable(n_seqs * wmax), ctable(n_seqs * cmax);
  std::iota(wtable.begin(), wtable.end(), 0);
  std::iota(ctable.begin(), ctable.end(), 0);
  std::shuffle(wtable.begin(), wtable.end(), rng);
  std::shuffle(ctable.begin(), ctable.end(), rng);
  const int64_t N = static_cast<int64_t>(pos.size());
  std::vector<int32_t> selected(N * max_sel, -1), n_sel(N);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t n_vis = (pos[r] + 1) / ratio;
    n_sel[r] = static_cast<int32_t>(std::min<int64_t>(max_sel, n_vis + 1));
    std::uniform_int_distribution<int32_t> e_dist(-1, static_cast<int32_t>(std::max<int64_t>(n_vis - 1, 0)));
    for (int64_t j = 0; j < n_sel[r]; ++j) selected[r * max_sel + j] = n_vis > 0 ? e_dist(rng) : -1;
  }
  Tensor pd = test::upload_i32(pos), sd = test::upload_i32(seq), wtd = test::upload_i32(wtable);
  Tensor ctd = test::upload_i32(ctable), seld = test::upload_i32(selected), nsd = test::upload_i32(n_sel);
  for (bool hca : {false, true}) {
    const int64_t max_cmp = hca ? 9001 / ratio + 1 : max_sel;
    std::vector<int32_t> win(N * W), cmp(N * max_cmp), n_cmp(N);
    PagedIndexParams p;
    p.n_rows = N;
    p.positions = pos.data();
    p.seq = seq.data();
    p.window_table = wtable.data();
    p.window_max_blocks = wmax;
    p.window_block_size = wbs;
    p.window = W;
    p.window_indices = win.data();
    p.cmp_table = ctable.data();
    p.cmp_max_blocks = cmax;
    p.cmp_block_size = cbs;
    p.ratio = ratio;
    p.selected = hca ? nullptr : selected.data();
    p.n_selected = hca ? nullptr : n_sel.data();
    p.max_selected = max_sel;
    p.cmp_indices = cmp.data();
    p.n_cmp = n_cmp.data();
    p.max_cmp = max_cmp;
    paged_indices_ref(p);
    Tensor wd = test::upload_i32(std::vector<int32_t>(N * W, 77));
    Tensor cd = test::upload_i32(std::vector<int32_t>(N * max_cmp, 77));
    Tensor nd = test::upload_i32(std::vector<int32_t>(N, 77));
    PagedIndexParams pdv = p;
    pdv.positions = pd.data<int32_t>();
    pdv.seq = sd.data<int32_t>();
    pdv.window_table = wtd.data<int32_t>();
    pdv.window_indices = wd.data<int32_t>();
    pdv.cmp_table = ctd.data<int32_t>();
    pdv.selected = hca ? nullptr : seld.data<int32_t>();
    pdv.n_selected = hca ? nullptr : nsd.data<int32_t>();
    pdv.cmp_indices = cd.data<int32_t>();
    pdv.n_cmp = nd.data<int32_t>();
    paged_indices_cuda(nullptr, pdv);
    auto down = [](const Tensor& t) {
      std::vector<int32_t> v(t.numel());
      cuda::copy_d2h(v.data(), t.raw(), t.nbytes());
      return v;
    };
    EXPECT_EQ(count_differences(down(wd), win), 0) << "hca " << hca;
    EXPECT_EQ(count_differences(down(cd), cmp), 0) << "hca " << hca;
    EXPECT_EQ(down(nd), n_cmp) << "hca " << hca;
  }
}

}  // namespace
}  // namespace deepinfer
