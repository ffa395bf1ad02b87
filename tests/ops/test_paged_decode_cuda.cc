// sm90_paged_decode_cuda (kv_cache_cuda.h: bf16 tensor-core sparse decode over the paged
// K=V cache) against the CPU reference paged_attention_ref, and a report-only benchmark at
// the FlashMLA anchor's problem (../shared/anchors/anchor_flashmla.py).
//
// Bound (bf16 numerics, "option (a)"): q and the softmax weights P are rounded to bf16 once
// (unit roundoff u = 2^-9, relative error uniform in +-u, std u / sqrt(3)); keys are exact.
// A logit moves by scale * sum_d dq_d k_d (std ~ u / sqrt(3) for unit-RMS q and keys), each
// weight by a factor 1 + eta with std ~ u, so the output's expected nmse is ~ u^2 ~ 4e-6
// (the mma kernel's comment measured 1.6e-6 for a bf16 q alone). Asserted: the whole call
// nmse < (4u)^2 = 6.1e-5 and every (row, head) nmse < (8u)^2 = 2.4e-4. A wrong kernel is far
// outside: one dropped key of 640 gives a head nmse ~ 1/640 = 1.6e-3, a wrong column or head
// O(1). The first failing (row, head) is printed with its worst column. A numpy emulation of
// the kernel's arithmetic (bf16 q, 64-key tiles, exp2 online softmax, bf16 P, fp32 sums; keys
// 1, 7, 33, 640, 2100, sinks x0.1 / x1 / x20) gave call nmse <= 4.8e-6 and worst head
// <= 2.2e-5, 11-13x inside the bounds.
// Also: NaN-poisoned outputs (every element written), split-K (a workspace) against the
// reference and deterministic, a row alone bitwise equal to the same row inside a batch of 64
// (no workspace: never split), refusals of unsupported shapes. Every case runs on V4's MODEL1
// fp8 entries, bf16, and V4.1's pair of formats (window e4m3 / 32, 528 B; compressed e2m1 +
// e4m3 / 16, 288 B; both dequantise exactly to bf16, so the same bound holds), with a key
// list that crosses from one V4.1 format to the other inside a 64-key tile.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "cuda/device_tensor.h"
#include "cuda/event.h"
#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/kv_cache/kv_cache.h"
#include "ops/kv_cache/kv_cache_cuda.h"

namespace deepinfer {
namespace {

constexpr double kU = 1.0 / 512.0;                 // bf16 unit roundoff 2^-9
constexpr double kCallBound = (4 * kU) * (4 * kU);  // 6.1e-5
constexpr double kHeadBound = (8 * kU) * (8 * kU);  // 2.4e-4

Tensor upload_bytes(const std::vector<uint8_t>& v) { return test::upload_vec(v, DType::U8); }

// A pool of n_slots random entries (unit normal, stored with kv_store_ref).
std::vector<uint8_t> make_pool(std::mt19937_64& rng, const KvCacheLayout& l, int64_t n_blocks) {
  const int64_t n = n_blocks * l.block_size, d = l.head_dim;
  const auto x = test::randn(rng, n * d, 1.0f);
  std::vector<int32_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  std::vector<uint8_t> bytes(n_blocks * l.block_bytes(), 0);
  kv_store_ref(l, x.data(), n, d, all.data(), bytes.data(), n_blocks);
  return bytes;
}

// Compares out with ref over n_rows x n_heads x d; prints and asserts the bounds, naming the
// first (row, head) over the head bound and its worst column.
void check_bounds(const char* what, const std::vector<float>& out, const std::vector<float>& ref,
                  int64_t n_rows, int64_t n_heads, int64_t d) {
  const double call = test::nmse(out.data(), ref.data(), n_rows * n_heads * d);
  double worst = 0.0;
  int64_t worst_r = -1, worst_h = -1;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t o = (r * n_heads + h) * d;
      const double e = test::nmse(out.data() + o, ref.data() + o, d);
      if (!(e <= worst)) worst = e, worst_r = r, worst_h = h;  // NaN / inf count as worst
    }
  }
  std::printf("  %s: nmse %.3g (bound %.2g), worst (row %lld, head %lld) %.3g (bound %.2g)\n", what, call,
              kCallBound, static_cast<long long>(worst_r), static_cast<long long>(worst_h), worst, kHeadBound);
  EXPECT_LT(call, kCallBound) << what;
  if (!(worst < kHeadBound) && worst_r >= 0) {
    const int64_t o = (worst_r * n_heads + worst_h) * d;
    int64_t col = 0;
    double big = -1.0;
    for (int64_t c = 0; c < d; ++c) {
      const double diff = std::isfinite(out[o + c]) ? std::fabs(out[o + c] - ref[o + c]) : INFINITY;
      if (diff > big) big = diff, col = c;
    }
    ADD_FAILURE() << what << ": row " << worst_r << " head " << worst_h << " nmse " << worst
                  << " over the bound " << kHeadBound << "; worst column " << col << ": got " << out[o + col]
                  << ", reference " << ref[o + col];
  }
}

struct DecodeCase {
  KvCacheDtype dtype;  // kFp8 with v41: V4.1's window / compressed formats
  int64_t n_heads;
  std::vector<int64_t> keys;  // total listed keys per row (window part first, up to 128)
  bool use_window = true, use_cmp = true;
  float sink_scale = 1.0f;  // sinks ~ N(0, sink_scale^2)
  int64_t block_size = 64;
  bool v41 = false;
};

void run_decode_case(std::mt19937_64& rng, const DecodeCase& c) {
  const int64_t B = static_cast<int64_t>(c.keys.size()), H = c.n_heads, d = 512, W = 128;
  SCOPED_TRACE(testing::Message() << kv_cache_dtype_name(c.dtype) << (c.v41 ? " V4.1 formats" : "") << " H " << H
                                  << " B " << B << " window " << c.use_window << " cmp " << c.use_cmp << " sinks x"
                                  << c.sink_scale);
  const KvCacheLayout win_l = c.v41 ? KvCacheLayout::v41_window(c.dtype, c.block_size)
                                    : KvCacheLayout{c.dtype, d, 64, c.block_size};
  // Block sizes may differ between pools.
  KvCacheLayout cmp_l = c.v41 ? KvCacheLayout::v41_compressed(c.dtype, c.block_size + 3) : win_l;
  cmp_l.block_size = c.block_size + 3;
  int64_t most = 1;
  for (int64_t k : c.keys) most = std::max(most, k);
  const int64_t win_blocks = (2 * W + win_l.block_size - 1) / win_l.block_size + 1;
  const int64_t cmp_blocks = (most + 300) / cmp_l.block_size + 2;
  const auto win = make_pool(rng, win_l, win_blocks);
  const auto cmp = make_pool(rng, cmp_l, cmp_blocks);
  const int64_t max_cmp = most + 1;  // room for the hole
  std::vector<int32_t> win_idx(B * W, -1), cmp_idx(B * max_cmp, -1), n_cmp(B, 0);
  for (int64_t r = 0; r < B; ++r) {
    const int64_t n = c.keys[r];
    const int64_t n_w = c.use_window ? std::min(n, W) : 0;
    const int64_t n_c = c.use_cmp ? n - n_w : 0;
    // Window: distinct random slots in a random subset of the 128 positions (-1 elsewhere).
    std::vector<int32_t> ws(win_blocks * win_l.block_size);
    std::iota(ws.begin(), ws.end(), 0);
    std::shuffle(ws.begin(), ws.end(), rng);
    std::vector<int64_t> pos(W);
    std::iota(pos.begin(), pos.end(), 0);
    std::shuffle(pos.begin(), pos.end(), rng);
    for (int64_t j = 0; j < n_w; ++j) win_idx[r * W + pos[j]] = ws[j];
    // Compressed: n_c distinct random slots, plus a -1 hole in the middle of longer lists
    // (counted in n_indices, so the row lists n_c + 1 entries).
    std::vector<int32_t> cs(cmp_blocks * cmp_l.block_size);
    std::iota(cs.begin(), cs.end(), 0);
    std::shuffle(cs.begin(), cs.end(), rng);
    int64_t at = 0;
    for (int64_t j = 0; j < n_c && at < max_cmp; ++j) {
      if (n_c > 4 && j == n_c / 2 && at + 1 < max_cmp) cmp_idx[r * max_cmp + at++] = -1;
      cmp_idx[r * max_cmp + at++] = cs[j];
    }
    n_cmp[r] = static_cast<int32_t>(at);
  }
  const auto q = test::randn(rng, B * H * d, 1.0f);
  const auto sinks = test::randn(rng, H, c.sink_scale);
  std::vector<float> ref(B * H * d);
  PagedAttentionParams p;
  p.q = q.data();
  p.out = ref.data();
  p.sinks = sinks.data();
  p.n_rows = B;
  p.n_heads = H;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  if (c.use_window) p.sources[0] = {win.data(), win_l, win_blocks, win_idx.data(), nullptr, W};
  if (c.use_cmp) p.sources[1] = {cmp.data(), cmp_l, cmp_blocks, cmp_idx.data(), n_cmp.data(), max_cmp};
  paged_attention_ref(p);

  Tensor qd = test::upload_f32(q), sd = test::upload_f32(sinks), wcd = upload_bytes(win), ccd = upload_bytes(cmp);
  Tensor wid = test::upload_i32(win_idx), cid = test::upload_i32(cmp_idx), ncd = test::upload_i32(n_cmp);
  Tensor od = test::poisoned_f32(B * H * d);
  PagedAttentionParams pd = p;
  pd.q = qd.data<float>();
  pd.out = od.data<float>();
  pd.sinks = sd.data<float>();
  if (c.use_window) {
    pd.sources[0].cache = wcd.data<uint8_t>();
    pd.sources[0].indices = wid.data<int32_t>();
  }
  if (c.use_cmp) {
    pd.sources[1].cache = ccd.data<uint8_t>();
    pd.sources[1].indices = cid.data<int32_t>();
    pd.sources[1].n_indices = ncd.data<int32_t>();
  }
  ASSERT_TRUE(sm90_paged_decode_supported(pd));
  sm90_paged_decode_cuda(nullptr, pd);
  const auto out = test::download_f32(od);
  std::printf("sm90 decode %s%s H %lld B %lld keys %lld..%lld sinks x%g:\n", kv_cache_dtype_name(c.dtype),
              c.v41 ? " (V4.1 formats)" : "",
              static_cast<long long>(H), static_cast<long long>(B),
              static_cast<long long>(*std::min_element(c.keys.begin(), c.keys.end())),
              static_cast<long long>(most), c.sink_scale);
  check_bounds("unsplit", out, ref, B, H, d);

  // Split-K with a NaN-poisoned workspace: bound, and two calls give the same bits.
  const int64_t max_keys = (c.use_window ? W : 0) + (c.use_cmp ? max_cmp : 0);
  const int64_t ws_bytes = sm90_paged_decode_workspace_bytes(B, H, d, max_keys);
  if (ws_bytes > 0) {
    Tensor ws = cuda::device_filled(DType::U8, {ws_bytes}, 0xff);
    Tensor o1 = test::poisoned_f32(B * H * d), o2 = test::poisoned_f32(B * H * d);
    PagedAttentionParams ps = pd;
    ps.workspace = ws.raw();
    ps.workspace_bytes = ws_bytes;
    ps.out = o1.data<float>();
    sm90_paged_decode_cuda(nullptr, ps);
    ps.out = o2.data<float>();
    sm90_paged_decode_cuda(nullptr, ps);
    const auto s1 = test::download_f32(o1), s2 = test::download_f32(o2);
    std::printf("  split-K: %lld splits, workspace %lld B\n",
                static_cast<long long>(sm90_paged_decode_splits(B, H, max_keys)), static_cast<long long>(ws_bytes));
    check_bounds("split-K", s1, ref, B, H, d);
    for (int64_t i = 0; i < B * H * d; ++i) ASSERT_EQ(s1[i], s2[i]) << "split-K not deterministic at " << i;
    if (sm90_paged_decode_splits(B, H, max_keys) > 1) {
      PagedAttentionParams short_ws = ps;
      short_ws.workspace_bytes = ws_bytes - 1;
      if (ws_bytes > sm90_paged_decode_workspace_bytes(B - 1, H, d, max_keys)) {
        EXPECT_THROW(sm90_paged_decode_cuda(nullptr, short_ws), Error);
      }
    }
  }

  // The last row alone (shifted index pointers, no workspace) gives the bits it gets in the batch.
  const int64_t r = B - 1;
  Tensor o1 = test::poisoned_f32(H * d);
  PagedAttentionParams p1 = pd;
  p1.n_rows = 1;
  p1.q = qd.data<float>() + r * H * d;
  p1.out = o1.data<float>();
  if (c.use_window) p1.sources[0].indices = wid.data<int32_t>() + r * W;
  if (c.use_cmp) {
    p1.sources[1].indices = cid.data<int32_t>() + r * max_cmp;
    p1.sources[1].n_indices = ncd.data<int32_t>() + r;
  }
  sm90_paged_decode_cuda(nullptr, p1);
  const auto alone = test::download_f32(o1);
  for (int64_t i = 0; i < H * d; ++i) {
    ASSERT_EQ(alone[i], out[r * H * d + i]) << "row " << r << " alone differs at head " << i / d << " col " << i % d;
  }
}

std::vector<int64_t> cycle_keys(int64_t B, std::vector<int64_t> sizes) {
  std::vector<int64_t> v(B);
  for (int64_t i = 0; i < B; ++i) v[i] = sizes[i % sizes.size()];
  return v;
}

TEST(PagedDecodeCuda, AwkwardSizesAgainstTheReference) {
  auto rng = test::fresh_rng();
  const std::vector<int64_t> sizes = {1, 7, 33, 640, 2100};
  for (KvCacheDtype dt : {KvCacheDtype::kFp8, KvCacheDtype::kBf16}) {
    for (int64_t k : sizes) run_decode_case(rng, {dt, 64, {k}});  // B = 1
    run_decode_case(rng, {dt, 64, cycle_keys(3, {2100, 7, 640}), true, true, 0.1f});
    run_decode_case(rng, {dt, 64, cycle_keys(3, {33, 1, 640}), true, true, 20.0f});  // sinks dominate
  }
  // One source only (window-only layer; compressed only), a block size that is not 64.
  run_decode_case(rng, {KvCacheDtype::kFp8, 64, cycle_keys(3, {128, 5, 77}), true, false});
  run_decode_case(rng, {KvCacheDtype::kFp8, 64, cycle_keys(3, {640, 9, 300}), false, true, 1.0f, 61});
  // Heads not a multiple of 64 (two groups, the second partial) and V4-Pro's 128.
  run_decode_case(rng, {KvCacheDtype::kFp8, 96, cycle_keys(3, {640, 33, 1})});
  run_decode_case(rng, {KvCacheDtype::kFp8, 128, cycle_keys(2, {640, 2100})});
}

// V4.1's formats: the window's e4m3 / 32 entries and the compressed e2m1 + e4m3 / 16 entries
// in one key list (rows of 100 or 130 keys cross from one format to the other inside a tile),
// each source alone, sinks small and dominant, 64 heads and a partial second group.
TEST(PagedDecodeCuda, V41FormatsAgainstTheReference) {
  auto rng = test::fresh_rng();
  const KvCacheDtype f8 = KvCacheDtype::kFp8;
  for (int64_t k : {1, 7, 100, 130, 640}) run_decode_case(rng, {f8, 64, {k}, true, true, 1.0f, 64, true});
  run_decode_case(rng, {f8, 64, cycle_keys(3, {2100, 7, 640}), true, true, 0.1f, 64, true});
  run_decode_case(rng, {f8, 64, cycle_keys(3, {33, 1, 640}), true, true, 20.0f, 64, true});
  run_decode_case(rng, {f8, 64, cycle_keys(3, {128, 5, 77}), true, false, 1.0f, 64, true});
  run_decode_case(rng, {f8, 64, cycle_keys(3, {640, 9, 300}), false, true, 1.0f, 61, true});
  run_decode_case(rng, {f8, 96, cycle_keys(3, {640, 33, 1}), true, true, 1.0f, 64, true});
  run_decode_case(rng, {f8, 64, cycle_keys(64, {640, 1, 7, 33, 2100, 640, 640}), true, true, 1.0f, 64, true});
}

TEST(PagedDecodeCuda, BatchOf64) {
  auto rng = test::fresh_rng();
  for (KvCacheDtype dt : {KvCacheDtype::kFp8, KvCacheDtype::kBf16}) {
    run_decode_case(rng, {dt, 64, cycle_keys(64, {640, 1, 7, 33, 2100, 640, 640})});
  }
}

TEST(PagedDecodeCuda, RefusesUnsupportedShapes) {
  PagedAttentionParams p;
  std::vector<uint8_t> cache(1 << 16);
  std::vector<int32_t> idx(4, 0);
  std::vector<float> q(64 * 256), out(64 * 256), sinks(64);
  p.q = q.data();
  p.out = out.data();
  p.sinks = sinks.data();
  p.n_rows = 1;
  p.n_heads = 1;
  p.sources[0] = {cache.data(), KvCacheLayout{KvCacheDtype::kBf16, 256, 64, 16}, 4, idx.data(), nullptr, 4};
  EXPECT_FALSE(sm90_paged_decode_supported(p));
  EXPECT_THROW(sm90_paged_decode_cuda(nullptr, p), Error);
  // Formats are V4's or V4.1's, never mixed; V4.1's carry no bf16 RoPE dims.
  p.sources[0] = {cache.data(), KvCacheLayout::v4(KvCacheDtype::kFp8, 16), 4, idx.data(), nullptr, 4};
  EXPECT_TRUE(sm90_paged_decode_supported(p));
  p.sources[1] = {cache.data(), KvCacheLayout::v41_compressed(KvCacheDtype::kFp8, 16), 4, idx.data(), nullptr, 4};
  EXPECT_FALSE(sm90_paged_decode_supported(p));
  p.sources[0] = {cache.data(), KvCacheLayout::v41_window(KvCacheDtype::kFp8, 16), 4, idx.data(), nullptr, 4};
  EXPECT_TRUE(sm90_paged_decode_supported(p));
  KvCacheLayout roped = KvCacheLayout::v41_window(KvCacheDtype::kFp8, 16);
  roped.rope_dim = 64;
  p.sources[0].layout = roped;
  EXPECT_FALSE(sm90_paged_decode_supported(p));
}

// ------------------------------------------------------------------------------- benchmark
// Report only (nothing timed is asserted; the kernels' agreement is). The anchor's problem:
// 64 heads x 512, FP8 MODEL1-layout cache (584 B per entry, page blocks of 64 padded to
// 37,440 B), one query token per row, sinks, window: a ring of 128 slots over 2 pages per
// sequence (pages shuffled), compressed: ctx / 4 entries per sequence in pages of 64
// (shuffled), top-512 distinct random entries; the window as source 0 and the compressed list
// as source 1 (the anchor's "2list" call). Differences: q and out are fp32 here (the anchor's
// bf16: +64 KB read and +64 KB written per row), cache contents are one random 64-block chunk
// repeated (the bytes read are the same). Timing as the anchor: L2 flushed (256 MiB memset)
// before each call, CUDA events around each call, median of 30 after 3 warm-ups.
double median_us(const std::function<void()>& call, void* flush, size_t flush_bytes) {
  for (int i = 0; i < 3; ++i) call();
  std::vector<double> ts;
  for (int i = 0; i < 30; ++i) {
    CUDA_CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes, nullptr));
    cuda::Event a, b;
    a.record(nullptr);
    call();
    b.record(nullptr);
    b.synchronize();
    ts.push_back(1e3 * cuda::Event::elapsed_ms(a, b));
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

TEST(PagedDecodeCuda, AnchorBenchmark) {
  auto rng = test::fresh_rng();
  const int64_t H = 64, d = 512, W = 128, topk = 512, page = 64;
  const size_t flush_bytes = size_t{256} << 20;
  Tensor flush = cuda::device_empty(DType::U8, {static_cast<int64_t>(flush_bytes)});
  const auto sinks = test::randn(rng, H, 1.0f);
  Tensor sd = test::upload_f32(sinks);
  // V4-Flash: MODEL1 entries in both pools, compressed ctx / 4 (the anchor's problem); V4.1-Flash:
  // e4m3 / 32 window entries, e2m1 + e4m3 / 16 compressed entries, ctx / 2 (its ratio-2 layers).
  struct Shape {
    const char* name;
    KvCacheLayout win, cmp;
    int64_t ratio;
  };
  for (const Shape& sh : {Shape{"V4 MODEL1", KvCacheLayout::v4(KvCacheDtype::kFp8, page),
                                KvCacheLayout::v4(KvCacheDtype::kFp8, page), 4},
                          Shape{"V4.1 e4m3/32 + e2m1/16", KvCacheLayout::v41_window(KvCacheDtype::kFp8, page),
                                KvCacheLayout::v41_compressed(KvCacheDtype::kFp8, page), 2}}) {
    const int64_t wbb = sh.win.block_bytes(), cbb = sh.cmp.block_bytes();
    // 64 random blocks of each layout, repeated over the pools.
    Tensor wchunk = upload_bytes(make_pool(rng, sh.win, 64)), cchunk = upload_bytes(make_pool(rng, sh.cmp, 64));
    std::printf("\n%s\n| ctx | B | k | sm90 us | sm90 TB/s KV | sm90 TFLOP/s | splits | simt us | mma us | "
                "sm90 nmse vs simt |\n|---|---|---|---|---|---|---|---|---|---|\n", sh.name);
    for (int64_t ctx : {4096, 32768}) {
      for (int64_t B : {1, 16, 64, 256}) {
        const int64_t n_c = ctx / sh.ratio, cpp = (n_c + page - 1) / page, wpp = (W + page - 1) / page;
        const int64_t cblocks = B * cpp, wblocks = B * wpp;
        Tensor cc = cuda::device_empty(DType::U8, {cblocks * cbb}), wc = cuda::device_empty(DType::U8, {wblocks * wbb});
        for (int64_t b0 = 0; b0 < cblocks; b0 += 64) {
          cuda::copy_d2d_async(cc.data<uint8_t>() + b0 * cbb, cchunk.raw(), std::min<int64_t>(64, cblocks - b0) * cbb,
                               nullptr);
        }
        for (int64_t b0 = 0; b0 < wblocks; b0 += 64) {
          cuda::copy_d2d_async(wc.data<uint8_t>() + b0 * wbb, wchunk.raw(), std::min<int64_t>(64, wblocks - b0) * wbb,
                               nullptr);
        }
        std::vector<int32_t> wperm(wblocks), cperm(cblocks);
        std::iota(wperm.begin(), wperm.end(), 0);
        std::iota(cperm.begin(), cperm.end(), 0);
        std::shuffle(wperm.begin(), wperm.end(), rng);
        std::shuffle(cperm.begin(), cperm.end(), rng);
        std::vector<int32_t> win(B * W), cmp(B * topk), ncmp(B, static_cast<int32_t>(topk));
        std::vector<int64_t> ent(n_c);
        for (int64_t r = 0; r < B; ++r) {
          for (int64_t s = 0; s < W; ++s) win[r * W + s] = static_cast<int32_t>(wperm[r * wpp + s / page] * page + s % page);
          std::iota(ent.begin(), ent.end(), 0);
          for (int64_t j = 0; j < topk; ++j) {  // partial Fisher-Yates: topk distinct entries
            std::uniform_int_distribution<int64_t> pick(j, n_c - 1);
            std::swap(ent[j], ent[pick(rng)]);
            cmp[r * topk + j] = static_cast<int32_t>(cperm[r * cpp + ent[j] / page] * page + ent[j] % page);
          }
        }
        const auto q = test::randn(rng, B * H * d, 1.0f);
        Tensor qd = test::upload_f32(q), wd = test::upload_i32(win), kd = test::upload_i32(cmp), nd = test::upload_i32(ncmp);
        Tensor o_fast = test::poisoned_f32(B * H * d), o_simt = test::poisoned_f32(B * H * d);
        Tensor o_mma = test::poisoned_f32(B * H * d);
        PagedAttentionParams p;
        p.q = qd.data<float>();
        p.sinks = sd.data<float>();
        p.n_rows = B;
        p.n_heads = H;
        p.scale = 1.0f / std::sqrt(static_cast<float>(d));
        p.sources[0] = {wc.data<uint8_t>(), sh.win, wblocks, wd.data<int32_t>(), nullptr, W};
        p.sources[1] = {cc.data<uint8_t>(), sh.cmp, cblocks, kd.data<int32_t>(), nd.data<int32_t>(), topk};
        const int64_t ws_fast = sm90_paged_decode_workspace_bytes(B, H, d, W + topk);
        const int64_t ws_simt = paged_attention_workspace_bytes(B, H, d, W + topk);
        Tensor wsf = cuda::device_empty(DType::U8, {std::max<int64_t>(ws_fast, 16)});
        Tensor wss = cuda::device_empty(DType::U8, {std::max<int64_t>(ws_simt, 16)});
        PagedAttentionParams pf = p, ps = p, pm = p;
        pf.out = o_fast.data<float>();
        pf.workspace = ws_fast > 0 ? wsf.raw() : nullptr;
        pf.workspace_bytes = ws_fast;
        ps.out = o_simt.data<float>();
        ps.workspace = ws_simt > 0 ? wss.raw() : nullptr;
        ps.workspace_bytes = ws_simt;
        pm.out = o_mma.data<float>();
        const double t_fast = median_us([&] { sm90_paged_decode_cuda(nullptr, pf); }, flush.raw(), flush_bytes);
        const double t_simt = median_us([&] { paged_attention_cuda(nullptr, ps); }, flush.raw(), flush_bytes);
        const double t_mma = median_us([&] { paged_attention_mma_cuda(nullptr, pm); }, flush.raw(), flush_bytes);
        const auto a = test::download_f32(o_fast), s = test::download_f32(o_simt);
        const double err = test::nmse(a.data(), s.data(), B * H * d);
        const double k = static_cast<double>(W + topk);
        const double kv_bytes = B * (W * sh.win.entry_bytes() + topk * sh.cmp.entry_bytes());
        std::printf("| %lldK | %lld | %g | %.1f | %.2f | %.0f | %lld | %.1f | %.1f | %.2g |\n",
                    static_cast<long long>(ctx / 1024), static_cast<long long>(B), k, t_fast,
                    kv_bytes / (t_fast * 1e-6) / 1e12, 2.0 * B * H * (d + d) * k / (t_fast * 1e-6) / 1e12,
                    static_cast<long long>(sm90_paged_decode_splits(B, H, W + topk)), t_simt, t_mma, err);
        EXPECT_LT(err, kCallBound) << sh.name << " ctx " << ctx << " B " << B;  // the SIMT kernel is fp32-level
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer
