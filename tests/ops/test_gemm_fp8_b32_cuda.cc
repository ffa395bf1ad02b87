// The block-32 FP8 GEMM (DeepSeek-V4.1: 32x32 weight blocks, 1x32 activation blocks, MODEL_SPEC
// §B.4 b = b_a = 32) on the device vs gemm_fp8_block_ref(..., block 32). What it proves:
//  * Values: the SIMT kernel (kSimt) and kAuto (whichever kernel gemm.h's policy picks: kSimt,
//    kGemv or kMma; kMma and kGemv also have their own tests) against the CPU
//    reference at awkward sizes (M 1, 3, 17, 64, 300; N not a multiple of 32; K a multiple of
//    16 but not of 32, so the last K block is half) and at V4.1-Flash shapes (wq_b, wo_b, wkv,
//    wq_a). Weights: random e4m3 codes (no NaN code) with a random power-of-two scale per
//    32x32 block spread over 2^-12..2^-4, so a kernel reading the scales on a 128 grid (or the
//    activation scales of another block) is off by factors of up to 256 and fails the bound.
//    Bound: NMSE < 1e-6 for F32 output (exact e4m3 products, fp32 sums in another order:
//    measured ~1e-13 on the 128 path of test_gemm_cuda), 1e-5 for BF16 output (rounding).
//  * Batch invariance: each row's outputs for M = 300 are bitwise the outputs of that row run
//    alone (M = 1) and in a tile of 3: the property GpuModel's batch_invariant relies on.
//  * Refusals: block 32 with Fp8GemmImpl::kCublasLt, and a block other than 128 / 32, are
//    kUnsupported.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "cuda/device_context.h"
#include "cuda/device_tensor.h"
#include "op_test_util.h"
#include "ops/gemm/gemm.h"
#include "ops/quant/act_quant.h"

namespace deepinfer {
namespace {

constexpr int64_t kB = 32;

cuda::DeviceContext& ctx() {
  static cuda::DeviceContext context;
  return context;
}

Tensor upload(const void* data, DType dtype, Shape shape) {
  Tensor t = cuda::device_empty(dtype, shape);
  cuda::copy_h2d(t.raw(), data, t.nbytes(), ctx().stream());
  return t;
}

struct Problem {
  int64_t m, n, k;
  std::vector<uint8_t> xq, wq;
  std::vector<float> sx_row, sx_blk, sw_grid, sw_pad;
};

Problem make(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k) {
  Problem p{m, n, k, {}, {}, {}, {}, {}, {}};
  const std::vector<float> x = test::randn(rng, m * k);
  const int64_t n_kb = ceil_div64(k, kB), n_nb = ceil_div64(n, kB);
  p.xq.resize(m * k);
  p.sx_row.resize(m * n_kb);
  p.sx_blk.resize(m * n_kb);
  act_quant_ref(x.data(), m, k, kB, p.xq.data(), p.sx_row.data(), ScaleLayout::kRowMajor);
  act_quant_ref(x.data(), m, k, kB, p.xq.data(), p.sx_blk.data(), ScaleLayout::kBlockMajor);
  p.wq.resize(n * k);
  std::uniform_int_distribution<int> code(0, 255);
  for (auto& c : p.wq) {
    int v = code(rng);
    while ((v & 0x7f) == 0x7f) v = code(rng);  // e4m3's NaN codes
    c = static_cast<uint8_t>(v);
  }
  std::uniform_int_distribution<int> e2(-12, -4);
  p.sw_grid.resize(n_nb * n_kb);
  for (auto& s : p.sw_grid) s = std::ldexp(1.0f, e2(rng));
  p.sw_pad = expand_weight_scales_f32(p.sw_grid.data(), n, k, kB);
  EXPECT_EQ(static_cast<int64_t>(p.sw_pad.size()), fp8_weight_scale_count(n, k, kB));
  return p;
}

std::vector<float> run(const Problem& p, DType y_dtype, Fp8GemmImpl impl) {
  const Tensor xq = upload(p.xq.data(), DType::F8_E4M3, {p.m, p.k});
  const Tensor wq = upload(p.wq.data(), DType::F8_E4M3, {p.n, p.k});
  const Tensor sx = upload(p.sx_blk.data(), DType::F32, {ceil_div64(p.k, kB), p.m});
  const Tensor sw = upload(p.sw_pad.data(), DType::F32,
                           {ceil_div64(p.n, kB), fp8_weight_scale_ld(p.k, kB)});
  Tensor y = cuda::device_filled(y_dtype, {p.m, p.n}, 0xff, ctx().stream());  // NaN poison
  gemm_fp8_block_cuda(ctx(), xq.raw(), sx.data<float>(), wq.raw(), sw.data<float>(), p.m, p.n,
                      p.k, y.raw(), y_dtype, impl, kB);
  const Tensor h = cuda::to_host(y, ctx().stream());
  std::vector<float> out(h.numel());
  for (int64_t i = 0; i < h.numel(); ++i)
    out[i] = y_dtype == DType::BF16 ? bf16_to_f32(h.data<uint16_t>()[i]) : h.data<float>()[i];
  return out;
}

void check(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k) {
  SCOPED_TRACE(testing::Message() << "block 32 M=" << m << " N=" << n << " K=" << k);
  const Problem p = make(rng, m, n, k);
  std::vector<float> ref(m * n);
  gemm_fp8_block_ref(p.xq.data(), p.sx_row.data(), p.wq.data(), p.sw_grid.data(), m, n, k,
                     ref.data(), kB);
  for (Fp8GemmImpl impl : {Fp8GemmImpl::kSimt, Fp8GemmImpl::kAuto}) {
    const auto y = run(p, DType::F32, impl);
    const double e = test::nmse(y.data(), ref.data(), m * n);
    EXPECT_LT(e, 1e-6) << "F32 nmse " << e;
  }
  std::vector<float> ref_bf16 = ref;
  for (auto& v : ref_bf16) v = round_bf16(v);
  const auto yb = run(p, DType::BF16, Fp8GemmImpl::kAuto);
  const double eb = test::nmse(yb.data(), ref_bf16.data(), m * n);
  EXPECT_LT(eb, 1e-5) << "BF16 nmse " << eb;
}

TEST(GemmFp8Block32Cuda, AwkwardSizes) {
  auto rng = test::fresh_rng();
  for (int64_t m : {1, 3, 17, 64, 300}) {
    check(rng, m, 77, 336);   // N % 32 != 0, K = 10.5 blocks
    check(rng, m, 200, 1008);  // K = 31.5 blocks, more than one SIMT step
    check(rng, m, 32, 16);     // one half block
    check(rng, m, 33, 2064);   // a row of N past the last whole block
  }
}

TEST(GemmFp8Block32Cuda, V41FlashShapes) {
  auto rng = test::fresh_rng();
  for (int64_t m : {1, 17, 64}) {
    check(rng, m, 64 * 512, 1280);  // wq_b [H * d, q_lora]
    check(rng, m, 5120, 8 * 1024);  // wo_b [D, o_groups * o_lora]
    check(rng, m, 512, 5120);       // wkv [d, D]
    check(rng, m, 1280, 5120);      // wq_a [q_lora, D]
  }
}

TEST(GemmFp8Block32Cuda, RowsAreBatchInvariant) {
  auto rng = test::fresh_rng();
  const int64_t m = 300, n = 200, k = 1008;
  const Problem all = make(rng, m, n, k);
  const auto y_all = run(all, DType::F32, Fp8GemmImpl::kSimt);
  for (int64_t rows : {1, 3}) {
    for (int64_t r0 : {int64_t{0}, int64_t{5}, m - rows}) {
      Problem part = all;
      part.m = rows;
      part.xq.assign(all.xq.begin() + r0 * k, all.xq.begin() + (r0 + rows) * k);
      const int64_t n_kb = ceil_div64(k, kB);
      part.sx_blk.assign(n_kb * rows, 0.0f);
      for (int64_t kb = 0; kb < n_kb; ++kb)
        for (int64_t r = 0; r < rows; ++r) part.sx_blk[kb * rows + r] = all.sx_blk[kb * m + r0 + r];
      const auto y = run(part, DType::F32, Fp8GemmImpl::kSimt);
      EXPECT_EQ(0, std::memcmp(y.data(), y_all.data() + r0 * n, rows * n * sizeof(float)))
          << "rows [" << r0 << ", " << r0 + rows << ") differ from the M=" << m << " run";
    }
  }
}

TEST(GemmFp8Block32Cuda, Refusals) {
  auto rng = test::fresh_rng();
  const Problem p = make(rng, 4, 64, 64);
  try {
    run(p, DType::F32, Fp8GemmImpl::kCublasLt);
    ADD_FAILURE() << "block 32 through cuBLASLt was not refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
  }
  EXPECT_FALSE(fp8_gemm_block_ok(64));
  EXPECT_THROW(gemm_fp8_block_cuda(ctx(), nullptr, nullptr, nullptr, nullptr, 1, 1, 16, nullptr,
                                   DType::F32, Fp8GemmImpl::kAuto, 64),
               Error);
}

}  // namespace
}  // namespace deepinfer
