// The tensor-core block-scaled FP8 GEMM (Fp8GemmImpl::kMma, ops/gemm/gemm_fp8_mma.cu) vs
// gemm_fp8_block_ref and vs the SIMT kernel, block 32 and 128. What it proves:
//  * Values at awkward sizes: M 16, 17, 100, 300 (and 1024 at the largest K), N 8, 100, 1280
//    (plus 77 / 333: not a multiple of the 8-column mma tile nor of a weight block), K 32, 48
//    (a partial last block for both block sizes), 1280, 5120, 8192, 1040 / 2064 (partial last
//    block). Activations: random e4m3 codes (no NaN) with a random power-of-two scale per 1 x b
//    block over 2^-10..2^-2, weights with one per b x b block over 2^-12..2^-4: a kernel that
//    reads the scale of another block, or a fragment element of another row / column / K, is
//    off by O(1) relative and fails at once.
//    Bound: e4m3 products are exact in fp32, so an F32 output differs from the reference only by
//    fp32 summation order (inside a block, and the block promotions' rounding): per output the
//    relative error is ~ sqrt(K) * 2^-24 for random signs, NMSE ~1e-13; we assert NMSE < 1e-9
//    against the reference and against kSimt. BF16 output: round-to-nearest adds 2^-9
//    relative, NMSE ~1e-6; asserted < 1e-5 against the bf16-rounded reference.
//  * V4.1-Flash shapes at M = 4096 (wq_a, wq_b, wkv, wo_a group, wo_b, shared expert w1 / w2):
//    kMma vs kSimt (the CPU reference is too slow at these sizes; kSimt is checked against it
//    by test_gemm_fp8_b32_cuda), plus one against the reference at M = 64.
//  * kMmaSplit (the decode variant, block 32, M <= 64): the same bounds at awkward sizes, a
//    row's result bitwise independent of M (a row alone equals its row in a batch of 64: the
//    K split comes from N and K only), two runs bitwise equal (fixed reduction order), the
//    refusals; and a report-only timing of gemv / mma / mma-split at V4.1 decode shapes.
//  * kWgmma (native FP8 wgmma, block 32 and 128; its F32 bound is 1e-6, see f32_bound) and
//    kWgmmaF16 (f16 wgmma, fp32 sums, block 32; bound 1e-9; with each of its two decode
//    loaders, the lean one also bitwise against the measured one): the same checks at awkward
//    sizes in both configurations (M <= 64 at block 32: the decode tiles with a K split;
//    otherwise 128 x 128 tiles), V4.1 shapes at M 64 and 4096, a row's result bitwise independent of M within a
//    configuration and two runs bitwise equal; report-only timings next to gemv / mma /
//    mma-split at decode and next to mma / cuBLASLt at M 4096.
//  * Dispatch: kAuto gives the bits of the kernel fp8_auto_impl names (gemm.h), and
//    fp8_auto_impl follows the measured policy: block 32 M 1 -> kSimt, 2..32 -> kGemv (kMma for
//    N >= kFp8MmaWideN past M 16), 33..64 -> kWgmmaF16 (kMma for N >= kFp8MmaWideN), beyond ->
//    kMma;
//    block 128 -> kCublasLt when it has one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "cuda/device_context.h"
#include "cuda/device_tensor.h"
#include "cuda/event.h"
#include "op_test_util.h"
#include "gemm_fp8_test_util.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_fp8_kernels.h"

namespace deepinfer {
namespace {

using namespace gemm_fp8_test;

std::vector<float> run(const Problem& p, const DeviceProblem& d, DType y_dtype,
                       Fp8GemmImpl impl) {
  Tensor y = cuda::device_filled(y_dtype, {p.m, p.n}, 0xff, ctx().stream());  // NaN poison
  gemm_fp8_block_cuda(ctx(), d.xq.raw(), d.sx.data<float>(), d.wq.raw(), d.sw.data<float>(), p.m,
                      p.n, p.k, y.raw(), y_dtype, impl, p.b);
  return download(y, y_dtype);
}

// F32 bound: fp32 summation order only (1e-9), except kWgmma: Hopper's FP8 wgmma adds the
// products inside the tensor core with fewer than fp32's mantissa bits (about 14 by the
// DeepSeek-V3 technical report, "Increasing Accumulation Precision"), which is why every kernel here promotes per K block; relative error per
// output ~2^-14, NMSE ~1e-8 at worst. 1e-6 still fails at once on a wrong scale or element
// (O(1) relative).
// kWgmmaF16 sums in fp32 like the others (1e-9).
double f32_bound(Fp8GemmImpl impl) { return impl == Fp8GemmImpl::kWgmma ? 1e-6 : 1e-9; }

// The wgmma kernels under test: FP8 wgmma, and f16 wgmma with each decode loader (the lean one
// is process-wide state: set for the variant, back to the default lean one after).
struct WgVariant {
  Fp8GemmImpl impl;
  bool lean;
};
constexpr WgVariant kWgVariants[] = {
    {Fp8GemmImpl::kWgmma, false}, {Fp8GemmImpl::kWgmmaF16, false}, {Fp8GemmImpl::kWgmmaF16, true}};
struct LeanScope {
  explicit LeanScope(bool on) { gemm_detail::fp8_wgmma_f16_set_lean(on); }
  ~LeanScope() { gemm_detail::fp8_wgmma_f16_set_lean(true); }
};

void check_ref(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k, int64_t b,
               Fp8GemmImpl impl = Fp8GemmImpl::kMma) {
  SCOPED_TRACE(testing::Message() << fp8_impl_name(impl) << " block " << b << " M=" << m << " N=" << n
                                  << " K=" << k);
  const Problem p = make(rng, m, n, k, b);
  const DeviceProblem d(p);
  std::vector<float> ref(m * n);
  gemm_fp8_block_ref(p.xq.data(), p.sx_row.data(), p.wq.data(), p.sw_grid.data(), m, n, k,
                     ref.data(), b);
  const auto y = run(p, d, DType::F32, impl);
  const double bound = f32_bound(impl);
  const double e = test::nmse(y.data(), ref.data(), m * n);
  EXPECT_LT(e, bound) << "F32 nmse vs ref " << e;
  if (impl == Fp8GemmImpl::kWgmma || impl == Fp8GemmImpl::kWgmmaF16)
    std::printf("%s block %lld M=%lld N=%lld K=%lld: F32 nmse vs ref %.3g\n", fp8_impl_name(impl),
                (long long)b, (long long)m, (long long)n, (long long)k, e);
  const auto ys = run(p, d, DType::F32, Fp8GemmImpl::kSimt);
  const double es = test::nmse(y.data(), ys.data(), m * n);
  EXPECT_LT(es, bound) << "F32 nmse vs simt " << es;
  for (auto& v : ref) v = round_bf16(v);
  const auto yb = run(p, d, DType::BF16, impl);
  const double eb = test::nmse(yb.data(), ref.data(), m * n);
  EXPECT_LT(eb, 1e-5) << "BF16 nmse " << eb;
}

void check_simt(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k, int64_t b) {
  SCOPED_TRACE(testing::Message() << "block " << b << " M=" << m << " N=" << n << " K=" << k);
  const Problem p = make(rng, m, n, k, b);
  const DeviceProblem d(p);
  const auto y = run(p, d, DType::F32, Fp8GemmImpl::kMma);
  const auto ys = run(p, d, DType::F32, Fp8GemmImpl::kSimt);
  const double e = test::nmse(y.data(), ys.data(), m * n);
  EXPECT_LT(e, 1e-9) << "F32 nmse vs simt " << e;
}

TEST(GemmFp8MmaCuda, AwkwardSizes) {
  auto rng = test::fresh_rng();
  for (int64_t b : {32, 128}) {
    for (int64_t m : {16, 17, 100, 300}) {
      check_ref(rng, m, 8, 32, b);
      check_ref(rng, m, 100, 48, b);     // partial last K block
      check_ref(rng, m, 77, 1040, b);    // partial last block (b 32: half; b 128: 1/8)
      check_ref(rng, m, 1280, 1280, b);
    }
    check_ref(rng, 100, 333, 5120, b);
    check_ref(rng, 1024, 100, 8192, b);
    check_ref(rng, 65, 1000, 2064, b);   // just past the 64-row tile
  }
}

TEST(GemmFp8MmaCuda, V41FlashShapesMatchSimt) {
  auto rng = test::fresh_rng();
  const int64_t shapes[][2] = {{1280, 5120}, {32768, 1280}, {512, 5120}, {1024, 4096},
                               {5120, 8192}, {2304, 5120},  {5120, 2304}};
  for (const auto& s : shapes) check_simt(rng, 4096, s[0], s[1], kFp8GemmBlockV41);
  check_ref(rng, 64, 5120, 8192, kFp8GemmBlockV41);  // wo_b at M = 64 vs the reference
}

TEST(GemmFp8MmaCuda, MmaSplitAwkwardSizes) {
  auto rng = test::fresh_rng();
  const Fp8GemmImpl sp = Fp8GemmImpl::kMmaSplit;
  for (int64_t m : {1, 3, 16, 17, 64}) {
    check_ref(rng, m, 8, 32, kFp8GemmBlockV41, sp);      // one K stage: no split
    check_ref(rng, m, 100, 48, kFp8GemmBlockV41, sp);    // partial last K block
    check_ref(rng, m, 77, 1040, kFp8GemmBlockV41, sp);   // ragged N tile, partial last block
    check_ref(rng, m, 1280, 1280, kFp8GemmBlockV41, sp);
    check_ref(rng, m, 333, 5120, kFp8GemmBlockV41, sp);  // a split of 8 over 40 stages
  }
  check_ref(rng, 64, 5120, 8192, kFp8GemmBlockV41, sp);  // wo_b at M = 64
  check_ref(rng, 2, 512, 5120, kFp8GemmBlockV41, sp);    // wkv
}

// The K split depends on N and K only and the partials are added in one order: a row alone is
// bitwise its row in a batch of 64, and a second run is bitwise the first.
TEST(GemmFp8MmaCuda, MmaSplitRowsDoNotDependOnTheBatch) {
  auto rng = test::fresh_rng();
  for (const auto& nk : {std::pair<int64_t, int64_t>{1280, 5120}, {5120, 8192}, {77, 1040}}) {
    const int64_t m = 64, n = nk.first, k = nk.second;
    SCOPED_TRACE(testing::Message() << "N=" << n << " K=" << k);
    const Problem p = make(rng, m, n, k, kFp8GemmBlockV41);
    const DeviceProblem d(p);
    const auto y = run(p, d, DType::F32, Fp8GemmImpl::kMmaSplit);
    const auto y2 = run(p, d, DType::F32, Fp8GemmImpl::kMmaSplit);
    EXPECT_EQ(0, std::memcmp(y.data(), y2.data(), y.size() * sizeof(float))) << "two runs differ";
    for (int64_t r : {int64_t{0}, int64_t{37}, int64_t{63}}) {
      Problem one = p;
      one.m = 1;
      const int64_t n_kb = ceil_div64(k, p.b);
      one.xq.assign(p.xq.begin() + r * k, p.xq.begin() + (r + 1) * k);
      one.sx_row.assign(p.sx_row.begin() + r * n_kb, p.sx_row.begin() + (r + 1) * n_kb);
      one.sx_blk = one.sx_row;  // M = 1: block-major is row-major
      const DeviceProblem d1(one);
      const auto y1 = run(one, d1, DType::F32, Fp8GemmImpl::kMmaSplit);
      EXPECT_EQ(0, std::memcmp(y1.data(), y.data() + r * n, n * sizeof(float))) << "row " << r;
    }
  }
}

TEST(GemmFp8MmaCuda, MmaSplitRefusesWhatItDoesNotServe) {
  auto rng = test::fresh_rng();
  const Problem big = make(rng, 65, 64, 256, kFp8GemmBlockV41);
  const DeviceProblem db(big);
  EXPECT_THROW(run(big, db, DType::F32, Fp8GemmImpl::kMmaSplit), Error);  // M > 64
  const Problem b128 = make(rng, 4, 256, 256, kFp8GemmBlock);
  const DeviceProblem d128(b128);
  EXPECT_THROW(run(b128, d128, DType::F32, Fp8GemmImpl::kMmaSplit), Error);  // block 128
  EXPECT_STREQ(fp8_impl_name(Fp8GemmImpl::kMmaSplit), "mma-split");
  EXPECT_THROW(run(b128, d128, DType::F32, Fp8GemmImpl::kWgmmaF16), Error);  // block 128
  EXPECT_STREQ(fp8_impl_name(Fp8GemmImpl::kWgmmaF16), "wgmma-f16");
}

// Report only (no timing is asserted): the decode-sized V4.1 projections under the three
// kernels that serve them. CUDA events around each call, L2 flushed (256 MiB) before each,
// median of 20 after 3 warm-ups; GB/s = weight bytes (codes + scales) / time.
TEST(GemmFp8MmaCuda, DecodeShapesBenchmark) {
  auto rng = test::fresh_rng();
  Tensor flush = cuda::device_empty(DType::U8, {int64_t{256} << 20});
  const struct { const char* name; int64_t n, k; } shapes[] = {
      {"wq_a", 1280, 5120}, {"wq_b", 32768, 1280}, {"wkv", 512, 5120}, {"wo_a group", 1024, 4096},
      {"wo_b", 5120, 8192}, {"shared w1", 2304, 5120}, {"shared w2", 5120, 2304}};
  std::printf("| shape | N | K | M | gemv us | mma us | mma-split us | wgmma us | wgmma-f16 us | wgmma-f16 lean us | gemv GB/s | wgmma-f16 GB/s | lean GB/s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& sh : shapes) {
    for (int64_t m : {1, 4, 16, 32, 48, 64}) {
      const Problem p = make(rng, m, sh.n, sh.k, kFp8GemmBlockV41);
      const DeviceProblem d(p);
      Tensor y = cuda::device_empty(DType::BF16, {m, sh.n});
      double us[6];
      const Fp8GemmImpl impls[6] = {Fp8GemmImpl::kGemv,  Fp8GemmImpl::kMma,      Fp8GemmImpl::kMmaSplit,
                                    Fp8GemmImpl::kWgmma, Fp8GemmImpl::kWgmmaF16, Fp8GemmImpl::kWgmmaF16};
      for (int i = 0; i < 6; ++i) {
        const LeanScope lean(i == 5);
        auto call = [&] {
          gemm_fp8_block_cuda(ctx(), d.xq.raw(), d.sx.data<float>(), d.wq.raw(), d.sw.data<float>(), m, sh.n,
                              sh.k, y.raw(), DType::BF16, impls[i], kFp8GemmBlockV41);
        };
        for (int w = 0; w < 3; ++w) call();
        std::vector<double> ts;
        for (int it = 0; it < 20; ++it) {
          CUDA_CHECK(cudaMemsetAsync(flush.raw(), it & 0xff, flush.nbytes(), ctx().stream()));
          cuda::Event a, b;
          a.record(ctx().stream());
          call();
          b.record(ctx().stream());
          b.synchronize();
          ts.push_back(1e3 * cuda::Event::elapsed_ms(a, b));
        }
        std::sort(ts.begin(), ts.end());
        us[i] = ts[ts.size() / 2];
      }
      const double bytes = double(sh.n) * sh.k + 4.0 * ceil_div64(sh.n, 32) * ceil_div64(sh.k, 32);
      std::printf("| %s | %lld | %lld | %lld | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f | %.0f | %.0f |\n",
                  sh.name, (long long)sh.n, (long long)sh.k, (long long)m, us[0], us[1], us[2], us[3], us[4],
                  us[5], bytes / us[0] * 1e-3, bytes / us[4] * 1e-3, bytes / us[5] * 1e-3);
    }
  }
}

// kWgmma (block 32 and 128) and kWgmmaF16 (block 32) at awkward sizes in both configurations.
TEST(GemmFp8MmaCuda, WgmmaAwkwardSizes) {
  auto rng = test::fresh_rng();
  for (const WgVariant v : kWgVariants) {
    const Fp8GemmImpl wg = v.impl;
    const LeanScope lean(v.lean);
    SCOPED_TRACE(testing::Message() << "lean loader " << v.lean);
    for (int64_t b : {32, 128}) {
      if (wg == Fp8GemmImpl::kWgmmaF16 && b != kFp8GemmBlockV41) continue;
      for (int64_t m : {1, 3, 16, 17, 64, 65, 100, 300}) {
        check_ref(rng, m, 8, 32, b, wg);
        check_ref(rng, m, 100, 48, b, wg);     // partial last K block
        check_ref(rng, m, 77, 1040, b, wg);    // ragged N tile, partial last block
        check_ref(rng, m, 1280, 1280, b, wg);
      }
      check_ref(rng, 100, 333, 5120, b, wg);
      check_ref(rng, 1024, 100, 8192, b, wg);
      check_ref(rng, 33, 333, 5120, b, wg);    // decode tiles, a K split
    }
    check_ref(rng, 64, 5120, 8192, kFp8GemmBlockV41, wg);  // wo_b at M = 64
    check_ref(rng, 2, 512, 5120, kFp8GemmBlockV41, wg);    // wkv
    // The tiny golden checkpoints' projections (tests/data/golden_v41: K 32 / 64, N 32..256).
    const int64_t tiny[][2] = {{32, 32}, {64, 32}, {64, 64}, {32, 64}, {128, 32}, {256, 32}};
    for (const auto& t : tiny)
      for (int64_t m : {1, 2, 80, 160}) check_ref(rng, m, t[0], t[1], kFp8GemmBlockV41, wg);
  }
}

TEST(GemmFp8MmaCuda, WgmmaV41FlashShapesMatchSimt) {
  auto rng = test::fresh_rng();
  const int64_t shapes[][2] = {{1280, 5120}, {32768, 1280}, {512, 5120}, {1024, 4096},
                               {5120, 8192}, {2304, 5120},  {5120, 2304}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message() << "N=" << s[0] << " K=" << s[1]);
    for (int64_t m : {64, 4096}) {
      const Problem p = make(rng, m, s[0], s[1], kFp8GemmBlockV41);
      const DeviceProblem d(p);
      const auto ys = run(p, d, DType::F32, Fp8GemmImpl::kSimt);
      for (const WgVariant v : kWgVariants) {
        const Fp8GemmImpl wg = v.impl;
        const LeanScope lean(v.lean);
        const auto y = run(p, d, DType::F32, wg);
        const double e = test::nmse(y.data(), ys.data(), y.size());
        EXPECT_LT(e, f32_bound(wg)) << fp8_impl_name(wg) << (v.lean ? " lean" : "") << " M=" << m
                                    << " F32 nmse vs simt " << e;
        std::printf("%s V4.1 N=%lld K=%lld M=%lld: F32 nmse vs simt %.3g\n", fp8_impl_name(wg), (long long)s[0],
                    (long long)s[1], (long long)m, e);
      }
    }
  }
}

// Within a configuration a row's result is bitwise the same at every M (decode: M 1..64 at
// block 32; tiles: M > 64, or block 128), and a second run is bitwise the first.
TEST(GemmFp8MmaCuda, WgmmaRowsDoNotDependOnTheBatch) {
  auto rng = test::fresh_rng();
  struct Case { int64_t m_big, m_small, n, k, b; };
  const Case cases[] = {{64, 1, 1280, 5120, 32}, {64, 1, 5120, 8192, 32}, {64, 1, 77, 1040, 32},
                        {300, 65, 1280, 5120, 32}, {300, 1, 333, 2064, 128}};
  for (const WgVariant v : kWgVariants)
  for (const Case& c : cases) {
    const Fp8GemmImpl wg = v.impl;
    const LeanScope lean(v.lean);
    if (wg == Fp8GemmImpl::kWgmmaF16 && c.b != kFp8GemmBlockV41) continue;
    SCOPED_TRACE(testing::Message() << fp8_impl_name(wg) << (v.lean ? " lean" : "") << " M=" << c.m_big << " N=" << c.n << " K=" << c.k
                                    << " block " << c.b);
    const Problem p = make(rng, c.m_big, c.n, c.k, c.b);
    const DeviceProblem d(p);
    const auto y = run(p, d, DType::F32, wg);
    const auto y2 = run(p, d, DType::F32, wg);
    EXPECT_EQ(0, std::memcmp(y.data(), y2.data(), y.size() * sizeof(float))) << "two runs differ";
    const int64_t n_kb = ceil_div64(c.k, c.b);
    // The first m_small rows of the batch, as a batch of their own (block-major scales rebuilt).
    Problem few = p;
    few.m = c.m_small;
    few.xq.assign(p.xq.begin(), p.xq.begin() + c.m_small * c.k);
    few.sx_row.assign(p.sx_row.begin(), p.sx_row.begin() + c.m_small * n_kb);
    few.sx_blk.assign(n_kb * c.m_small, 0.0f);
    for (int64_t r = 0; r < c.m_small; ++r)
      for (int64_t kb = 0; kb < n_kb; ++kb) few.sx_blk[kb * c.m_small + r] = few.sx_row[r * n_kb + kb];
    const DeviceProblem d1(few);
    const auto y1 = run(few, d1, DType::F32, wg);
    EXPECT_EQ(0, std::memcmp(y1.data(), y.data(), y1.size() * sizeof(float)));
  }
}

// The lean loader feeds the same operand values as the measured one: bitwise the same y at
// decode M and in the 128 x 128 tiles, ragged M / N / K included.
TEST(GemmFp8MmaCuda, WgmmaF16LeanLoaderGivesTheSameBits) {
  auto rng = test::fresh_rng();
  const int64_t shapes[][2] = {{5120, 8192}, {1280, 5120}, {77, 1040}, {100, 48}, {32, 64}, {2304, 5120}};
  for (const auto& sh : shapes) {
    for (int64_t m : {1, 2, 17, 33, 64, 65, 300}) {
      SCOPED_TRACE(testing::Message() << "M=" << m << " N=" << sh[0] << " K=" << sh[1]);
      const Problem p = make(rng, m, sh[0], sh[1], kFp8GemmBlockV41);
      const DeviceProblem d(p);
      std::vector<float> y[2];
      for (int lean = 0; lean < 2; ++lean) {
        const LeanScope scope(lean == 1);
        y[lean] = run(p, d, DType::F32, Fp8GemmImpl::kWgmmaF16);
      }
      EXPECT_EQ(0, std::memcmp(y[0].data(), y[1].data(), y[0].size() * sizeof(float)));
    }
  }
}

// Report only: kWgmma at prefill size next to kMma (block 32) and cuBLASLt (block 128).
TEST(GemmFp8MmaCuda, PrefillShapesBenchmark) {
  auto rng = test::fresh_rng();
  const struct { const char* name; int64_t n, k; } shapes[] = {
      {"wq_a", 1280, 5120}, {"wq_b", 32768, 1280}, {"wo_b", 5120, 8192}, {"shared w1", 2304, 5120}};
  std::printf("| shape | N | K | M | block | mma TFLOP/s | cublaslt TFLOP/s | wgmma TFLOP/s | wgmma-f16 TFLOP/s |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& sh : shapes) {
    for (int64_t b : {32, 128}) {
      const int64_t m = 4096;
      const Problem p = make(rng, m, sh.n, sh.k, b);
      const DeviceProblem d(p);
      Tensor y = cuda::device_empty(DType::BF16, {m, sh.n});
      double tf[4] = {0, 0, 0, 0};
      const Fp8GemmImpl impls[4] = {Fp8GemmImpl::kMma, Fp8GemmImpl::kCublasLt, Fp8GemmImpl::kWgmma,
                                    Fp8GemmImpl::kWgmmaF16};
      for (int i = 0; i < 4; ++i) {
        if (impls[i] == Fp8GemmImpl::kCublasLt && b != 128) continue;
        if (impls[i] == Fp8GemmImpl::kWgmmaF16 && b != 32) continue;
        auto call = [&] {
          gemm_fp8_block_cuda(ctx(), d.xq.raw(), d.sx.data<float>(), d.wq.raw(), d.sw.data<float>(), m, sh.n,
                              sh.k, y.raw(), DType::BF16, impls[i], b);
        };
        for (int w = 0; w < 3; ++w) call();
        std::vector<double> ts;
        for (int it = 0; it < 10; ++it) {
          cuda::Event a, e;
          a.record(ctx().stream());
          call();
          e.record(ctx().stream());
          e.synchronize();
          ts.push_back(cuda::Event::elapsed_ms(a, e));
        }
        std::sort(ts.begin(), ts.end());
        tf[i] = 2.0 * m * sh.n * sh.k / (ts[ts.size() / 2] * 1e-3) * 1e-12;
      }
      std::printf("| %s | %lld | %lld | %lld | %lld | %.0f | %.0f | %.0f | %.0f |\n", sh.name, (long long)sh.n,
                  (long long)sh.k, (long long)m, (long long)b, tf[0], tf[1], tf[2], tf[3]);
    }
  }
}

// kAuto runs exactly the kernel fp8_auto_impl names, and that follows gemm.h's policy.
TEST(GemmFp8MmaCuda, AutoRunsTheKernelThePolicyNames) {
  using I = Fp8GemmImpl;
  constexpr int64_t kShortK = 2304, kLongK = 5120;
  EXPECT_EQ(fp8_auto_impl(1, 1280, kLongK, kFp8GemmBlockV41, false), I::kSimt);
  EXPECT_EQ(fp8_auto_impl(2, 1280, kLongK, kFp8GemmBlockV41, false), I::kGemv);
  EXPECT_EQ(fp8_auto_impl(32, 5120, kLongK, kFp8GemmBlockV41, false), I::kGemv);
  EXPECT_EQ(fp8_auto_impl(33, 5120, kLongK, kFp8GemmBlockV41, false), I::kWgmmaF16);
  EXPECT_EQ(fp8_auto_impl(64, 5120, kLongK, kFp8GemmBlockV41, false), I::kWgmmaF16);
  EXPECT_EQ(fp8_auto_impl(64, 5120, kShortK, kFp8GemmBlockV41, false), I::kWgmmaF16);
  EXPECT_EQ(fp8_auto_impl(64, 5120, kLongK, kFp8GemmBlock, false), I::kGemv);  // wgmma-f16: block 32
  EXPECT_EQ(fp8_auto_impl(16, 32768, kShortK, kFp8GemmBlockV41, false), I::kGemv);
  EXPECT_EQ(fp8_auto_impl(17, 32768, kShortK, kFp8GemmBlockV41, false), I::kMma);
  EXPECT_EQ(fp8_auto_impl(64, 32768, kLongK, kFp8GemmBlockV41, false), I::kMma);
  EXPECT_EQ(fp8_auto_impl(65, 1280, kLongK, kFp8GemmBlockV41, false), I::kMma);
  EXPECT_EQ(fp8_auto_impl(64, 1280, kShortK, kFp8GemmBlockV41, true), I::kWgmmaF16);  // no cuBLASLt at 32
  EXPECT_EQ(fp8_auto_impl(16, 1280, kShortK, kFp8GemmBlockV41, true), I::kGemv);
  EXPECT_EQ(fp8_auto_impl(64, 1280, kLongK, kFp8GemmBlock, true), I::kCublasLt);
  EXPECT_EQ(fp8_auto_impl(5, 1280, kLongK, kFp8GemmBlock, false), I::kGemv);
  EXPECT_EQ(fp8_auto_impl(4097, 1280, kLongK, kFp8GemmBlock, false), I::kMma);
  auto rng = test::fresh_rng();
  for (int64_t block : {kFp8GemmBlockV41, kFp8GemmBlock}) {
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{64}, int64_t{65}, int64_t{200}}) {
      for (int64_t n : {int64_t{96}, kFp8MmaWideN}) {
        for (int64_t k : {int64_t{1040}, int64_t{4096}}) {
          if (n == kFp8MmaWideN && k == 4096 && m > 64) continue;  // kMma: covered
          const Problem p = make(rng, m, n, k, block);
          const DeviceProblem d(p);
          const bool lt = fp8_block_cublaslt_supported(ctx(), m, n, k, DType::F32);
          const auto y_auto = run(p, d, DType::F32, I::kAuto);
          const auto y_want = run(p, d, DType::F32, fp8_auto_impl(m, n, k, block, lt));
          EXPECT_EQ(0, std::memcmp(y_auto.data(), y_want.data(), y_auto.size() * sizeof(float)))
              << "block " << block << " M=" << m << " N=" << n << " K=" << k;
        }
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer
