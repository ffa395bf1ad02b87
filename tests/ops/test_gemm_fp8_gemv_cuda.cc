// The decode-sized block-scaled FP8 GEMM (ops/gemm/gemm_fp8_gemv_cuda.h) vs gemm_fp8_block_ref
// and vs the SIMT kernel, block 32 and 128. What it proves:
//  * Values at awkward sizes: M 1, 3, 17, 64 (1, 2, 4 and 8 activation tiles of 8 rows, each
//    but 64 with a ragged last tile), N 1, 7, 100, 1280 (a partial 64-row CTA tile and a partial
//    16-row warp tile), K 32, 48, 1008 (a partial last K block for both block sizes and a
//    partial 128-byte chunk), 5120. Activations: random e4m3 codes (no NaN) with a random
//    power-of-two scale per 1 x b block over 2^-10..2^-2, weights with one per b x b block over
//    2^-12..2^-4: a wrong scale, or a fragment element of another row / column / K block, is off
//    by O(1) relative and fails at once. Outputs are NaN-poisoned, so an unwritten element fails.
//    Bound: e4m3 products are exact in fp32; the F32 output differs from the reference only by
//    fp32 summation order (inside a block in the tensor core, and the split-K subtotals added
//    in rank order): relative error ~ sqrt(K) 2^-24 for random signs, NMSE ~1e-13; asserted
//    < 1e-9 (a single wrong product among K >= 32 gives NMSE >~ 1e-3). BF16 output: rounding
//    adds 2^-9 relative, NMSE ~1e-6; asserted < 1e-5 against the bf16-rounded reference.
//  * The split-K cluster path is exercised: asserted fp8_gemv_split > 1 for (N 100, K 5120) and
//    (N 1280, K 1008), and == 1 for K 48.
//  * V4.1-Flash / V4-Flash decode shapes at M = 4 and 64 match the SIMT kernel (NMSE < 1e-9).
//  * Batch invariance (by design: split count and tiling depend on N, K only; each mma output
//    element is its own dot product): a row computed alone (M = 1) and inside M = 17 and M = 64
//    batches gives the same bits.
//  * gemm_fp8_gemv_grouped_cuda (G GEMMs in one launch, a grouped output projection): every
//    group's columns vs gemm_fp8_block_ref on that group's operands (same bound), at G 1, 3, 8
//    and the V4.1 / V4 wo_a shapes (8 x 1024 x 4096, block 32 and 128), M 1, 5, 64, NaN-poisoned
//    output; row 0 alone gives its bits inside the batch; K not whole blocks is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "cuda/device_context.h"
#include "cuda/device_tensor.h"
#include "op_test_util.h"
#include "gemm_fp8_test_util.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_fp8_gemv_cuda.h"

namespace deepinfer {
namespace {

using namespace gemm_fp8_test;

// Rows [r0, r0 + count) of p as a problem of their own (same weight).
Problem rows_of(const Problem& p, int64_t r0, int64_t count) {
  Problem q = p;
  q.m = count;
  const int64_t n_kb = ceil_div64(p.k, p.b);
  q.xq.assign(p.xq.begin() + r0 * p.k, p.xq.begin() + (r0 + count) * p.k);
  q.sx_row.assign(p.sx_row.begin() + r0 * n_kb, p.sx_row.begin() + (r0 + count) * n_kb);
  q.sx_blk.resize(count * n_kb);
  for (int64_t r = 0; r < count; ++r)
    for (int64_t kb = 0; kb < n_kb; ++kb) q.sx_blk[kb * count + r] = p.sx_row[(r0 + r) * n_kb + kb];
  return q;
}

std::vector<float> run_gemv(const Problem& p, const DeviceProblem& d, DType y_dtype) {
  Tensor y = cuda::device_filled(y_dtype, {p.m, p.n}, 0xff, ctx().stream());  // NaN poison
  gemm_fp8_gemv_cuda(ctx().stream(), d.xq.raw(), d.sx.data<float>(), d.wq.raw(),
                     d.sw.data<float>(), p.m, p.n, p.k, y.raw(), y_dtype, p.b);
  return download(y, y_dtype);
}

std::vector<float> run_simt(const Problem& p, const DeviceProblem& d) {
  Tensor y = cuda::device_filled(DType::F32, {p.m, p.n}, 0xff, ctx().stream());
  gemm_fp8_block_cuda(ctx(), d.xq.raw(), d.sx.data<float>(), d.wq.raw(), d.sw.data<float>(), p.m,
                      p.n, p.k, y.raw(), DType::F32, Fp8GemmImpl::kSimt, p.b);
  return download(y, DType::F32);
}

void check_ref(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k, int64_t b) {
  SCOPED_TRACE(testing::Message() << "block " << b << " M=" << m << " N=" << n << " K=" << k);
  const Problem p = make(rng, m, n, k, b);
  const DeviceProblem d(p);
  std::vector<float> ref(m * n);
  gemm_fp8_block_ref(p.xq.data(), p.sx_row.data(), p.wq.data(), p.sw_grid.data(), m, n, k,
                     ref.data(), b);
  const auto y = run_gemv(p, d, DType::F32);
  const double e = test::nmse(y.data(), ref.data(), m * n);
  EXPECT_LT(e, 1e-9) << "F32 nmse vs ref " << e;
  for (auto& v : ref) v = round_bf16(v);
  const auto yb = run_gemv(p, d, DType::BF16);
  const double eb = test::nmse(yb.data(), ref.data(), m * n);
  EXPECT_LT(eb, 1e-5) << "BF16 nmse " << eb;
}

// G groups of one shape: xq [M, G K] (group g in columns g K ..), sx block-major [G n_kb, M],
// weights per group; y [M, G N].
struct Grouped {
  std::vector<Problem> groups;
  Tensor xq, sx, y;
  std::vector<DeviceProblem> dev;
  Grouped(std::mt19937_64& rng, int g, int64_t m, int64_t n, int64_t k, int64_t b) {
    for (int i = 0; i < g; ++i) groups.push_back(make(rng, m, n, k, b));
    const int64_t n_kb = k / b;
    std::vector<uint8_t> x(m * g * k);
    std::vector<float> sxv(g * n_kb * m);
    for (int i = 0; i < g; ++i) {
      const Problem& p = groups[i];
      for (int64_t r = 0; r < m; ++r)
        std::memcpy(&x[(r * g + i) * k], &p.xq[r * k], k);
      std::memcpy(&sxv[i * n_kb * m], p.sx_blk.data(), n_kb * m * sizeof(float));
      dev.emplace_back(p);
    }
    xq = upload(x.data(), DType::F8_E4M3, {m, g * k});
    sx = upload(sxv.data(), DType::F32, {g * n_kb, m});
  }
  std::vector<float> run(int64_t m, DType y_dtype) {
    const int g = static_cast<int>(groups.size());
    const int64_t n = groups[0].n, k = groups[0].k, b = groups[0].b;
    std::vector<const void*> w;
    std::vector<const float*> sw;
    for (const auto& d : dev) {
      w.push_back(d.wq.raw());
      sw.push_back(d.sw.data<float>());
    }
    y = cuda::device_filled(y_dtype, {m, g * n}, 0xff, ctx().stream());  // NaN poison
    gemm_fp8_gemv_grouped_cuda(ctx().stream(), xq.raw(), sx.data<float>(), g, w.data(), sw.data(),
                               m, n, k, y.raw(), y_dtype, b);
    return download(y, y_dtype);
  }
};

void check_grouped(std::mt19937_64& rng, int g, int64_t m, int64_t n, int64_t k, int64_t b) {
  SCOPED_TRACE(testing::Message() << "grouped G=" << g << " block " << b << " M=" << m << " N="
                                  << n << " K=" << k);
  Grouped gp(rng, g, m, n, k, b);
  const auto y = gp.run(m, DType::F32);
  for (int i = 0; i < g; ++i) {
    const Problem& p = gp.groups[i];
    std::vector<float> ref(m * n), got(m * n);
    gemm_fp8_block_ref(p.xq.data(), p.sx_row.data(), p.wq.data(), p.sw_grid.data(), m, n, k,
                       ref.data(), b);
    for (int64_t r = 0; r < m; ++r)
      std::memcpy(&got[r * n], &y[(r * g + i) * n], n * sizeof(float));
    const double e = test::nmse(got.data(), ref.data(), m * n);
    EXPECT_LT(e, 1e-9) << "group " << i << " F32 nmse vs ref " << e;
  }
  if (m > 1) {  // row 0 alone: the same bits (its sx run is rebuilt for M = 1)
    Grouped one = gp;
    const int64_t n_kb = k / b;
    std::vector<float> sx1(g * n_kb);
    for (int i = 0; i < g; ++i)
      for (int64_t kb = 0; kb < n_kb; ++kb) sx1[i * n_kb + kb] = gp.groups[i].sx_row[kb];
    one.sx = upload(sx1.data(), DType::F32, {g * n_kb, 1});
    const auto y1 = one.run(1, DType::F32);
    EXPECT_EQ(0, std::memcmp(y1.data(), y.data(), g * n * sizeof(float))) << "row 0 alone";
  }
}

TEST(GemmFp8GemvCuda, GroupedMatchesReferencePerGroup) {
  auto rng = test::fresh_rng();
  for (int64_t b : {32, 128}) {
    for (int64_t m : {1, 5, 64}) {
      check_grouped(rng, 1, m, 100, 1024, b);
      check_grouped(rng, 3, m, 100, 1024, b);
      check_grouped(rng, 8, m, 1024, 4096, b);  // V4.1 / V4-Flash wo_a
    }
  }
  Grouped gp(rng, 2, 4, 64, 256, 32);
  const void* w[2] = {gp.dev[0].wq.raw(), gp.dev[1].wq.raw()};
  const float* sw[2] = {gp.dev[0].sw.data<float>(), gp.dev[1].sw.data<float>()};
  Tensor y = cuda::device_empty(DType::F32, {4, 128});
  EXPECT_THROW(gemm_fp8_gemv_grouped_cuda(ctx().stream(), gp.xq.raw(), gp.sx.data<float>(), 2, w,
                                          sw, 4, 64, 240, y.raw(), DType::F32, 32),
               Error);  // K 240: 7.5 blocks of 32
}

TEST(GemmFp8GemvCuda, SplitDependsOnShape) {
  EXPECT_GT(fp8_gemv_split(100, 5120), 1);
  EXPECT_GT(fp8_gemv_split(1280, 1008), 1);
  EXPECT_EQ(fp8_gemv_split(1280, 48), 1);
  EXPECT_EQ(fp8_gemv_split(32768, 1280), 1);
}

TEST(GemmFp8GemvCuda, AwkwardSizesMatchReference) {
  auto rng = test::fresh_rng();
  for (int64_t b : {32, 128}) {
    for (int64_t m : {1, 3, 17, 64}) {
      for (int64_t n : {1, 7, 100, 1280})
        for (int64_t k : {32, 48, 1008}) check_ref(rng, m, n, k, b);
      check_ref(rng, m, 100, 5120, b);
      check_ref(rng, m, 1280, 5120, b);
    }
  }
}

TEST(GemmFp8GemvCuda, DecodeShapesMatchSimt) {
  auto rng = test::fresh_rng();
  struct Shape2 { int64_t n, k, b; };
  const Shape2 shapes[] = {{32768, 1280, 32}, {5120, 8192, 32}, {1280, 5120, 32},
                           {1024, 4096, 32},  {2304, 5120, 32}, {5120, 2304, 32},
                           {32768, 1024, 128}, {4096, 8192, 128}, {1024, 4096, 128}};
  for (const auto& s : shapes) {
    for (int64_t m : {4, 64}) {
      SCOPED_TRACE(testing::Message() << "block " << s.b << " M=" << m << " N=" << s.n
                                      << " K=" << s.k);
      const Problem p = make(rng, m, s.n, s.k, s.b);
      const DeviceProblem d(p);
      const auto y = run_gemv(p, d, DType::F32);
      const auto ys = run_simt(p, d);
      const double e = test::nmse(y.data(), ys.data(), m * s.n);
      EXPECT_LT(e, 1e-9) << "F32 nmse vs simt " << e;
    }
  }
}

TEST(GemmFp8GemvCuda, RowAloneEqualsRowInBatchBitwise) {
  auto rng = test::fresh_rng();
  for (int64_t b : {32, 128}) {
    for (const auto& nk : {std::pair<int64_t, int64_t>{100, 5120}, {1280, 1008}, {640, 48}}) {
      SCOPED_TRACE(testing::Message() << "block " << b << " N=" << nk.first << " K=" << nk.second);
      const Problem p = make(rng, 64, nk.first, nk.second, b);
      const auto y64 = run_gemv(p, DeviceProblem(p), DType::F32);
      const Problem p17 = rows_of(p, 40, 17);
      const auto y17 = run_gemv(p17, DeviceProblem(p17), DType::F32);
      EXPECT_EQ(0, std::memcmp(y17.data(), y64.data() + 40 * p.n, y17.size() * sizeof(float)))
          << "rows 40..56 alone vs in M = 64";
      for (int64_t r : {0, 45, 63}) {
        const Problem p1 = rows_of(p, r, 1);
        const auto y1 = run_gemv(p1, DeviceProblem(p1), DType::F32);
        EXPECT_EQ(0, std::memcmp(y1.data(), y64.data() + r * p.n, p.n * sizeof(float)))
            << "row " << r << " alone vs in M = 64";
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer
