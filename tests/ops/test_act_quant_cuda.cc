// act_quant_cuda vs act_quant_ref: codes and scales must be bitwise equal (same formula,
// exact arithmetic), for bf16 and f32 inputs, both scale layouts, blocks 128 and 32, and
// awkward sizes. Outputs are poisoned before each run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cuda/device_tensor.h"
#include "op_test_util.h"
#include "ops/quant/act_quant.h"

namespace deepinfer {
namespace {

void run_case(std::mt19937_64& rng, int64_t m, int64_t k, int64_t block, bool bf16,
              ScaleLayout layout) {
  SCOPED_TRACE(testing::Message() << "M=" << m << " K=" << k << " block=" << block
                                  << (bf16 ? " bf16" : " f32") << " layout="
                                  << (layout == ScaleLayout::kRowMajor ? "row" : "block"));
  auto x = test::randn(rng, m * k);
  std::uniform_int_distribution<int> exp_dist(-20, 20);
  for (int64_t r = 0; r < m; ++r) {
    const float f = std::ldexp(1.0f, exp_dist(rng));
    for (int64_t i = 0; i < k; ++i) x[r * k + i] *= f;
  }
  for (int64_t i = 0; i < std::min<int64_t>(k, 2 * block); ++i) x[i] = 0.0f;
  const int64_t n_kb = (k + block - 1) / block;
  std::vector<uint8_t> q_ref(m * k);
  std::vector<float> s_ref(m * n_kb);
  Tensor x_dev;
  if (bf16) {
    const auto xb = test::to_bf16(x);
    act_quant_bf16_ref(xb.data(), m, k, block, q_ref.data(), s_ref.data(), layout);
    x_dev = cuda::device_empty(DType::BF16, {m, k});
    cuda::copy_h2d(x_dev.raw(), xb.data(), xb.size() * 2);
  } else {
    act_quant_ref(x.data(), m, k, block, q_ref.data(), s_ref.data(), layout);
    x_dev = cuda::device_empty(DType::F32, {m, k});
    cuda::copy_h2d(x_dev.raw(), x.data(), x.size() * 4);
  }
  Tensor q_dev = cuda::device_filled(DType::U8, {m, k}, 0x7f);  // 0x7f is the e4m3 NaN
  Tensor s_dev = cuda::device_filled(DType::F32, {m * n_kb}, 0xff);
  act_quant_cuda(nullptr, x_dev.raw(), bf16 ? DType::BF16 : DType::F32, m, k, block,
                 q_dev.data<uint8_t>(), s_dev.data<float>(), layout);
  const Tensor q = cuda::to_host(q_dev), s = cuda::to_host(s_dev);
  int64_t bad_q = 0, bad_s = 0;
  for (int64_t i = 0; i < m * k; ++i) bad_q += q.data<uint8_t>()[i] != q_ref[i];
  for (int64_t i = 0; i < m * n_kb; ++i)
    bad_s += std::memcmp(&s.data<float>()[i], &s_ref[i], 4) != 0;
  EXPECT_EQ(bad_q, 0) << "codes differ";
  EXPECT_EQ(bad_s, 0) << "scales differ";
}

TEST(ActQuantCuda, MatchesReferenceBitwise) {
  auto rng = test::fresh_rng();
  for (int64_t m : {1, 3, 17, 257})
    for (int64_t k : {128, 336, 1000, 4096})
      for (int64_t block : {128, 32})
        for (bool bf16 : {true, false})
          for (ScaleLayout layout : {ScaleLayout::kRowMajor, ScaleLayout::kBlockMajor})
            run_case(rng, m, k, block, bf16, layout);
}

TEST(ActQuantCuda, V4FlashShapes) {
  auto rng = test::fresh_rng();
  for (int64_t m : {1, 64, 4096}) run_case(rng, m, 4096, 128, true, ScaleLayout::kBlockMajor);
  run_case(rng, 64, 8192, 128, true, ScaleLayout::kBlockMajor);
  run_case(rng, 64, 5120, 32, true, ScaleLayout::kBlockMajor);  // V4.1 blocks
}

TEST(ActQuantCuda, RejectsBadArguments) {
  EXPECT_THROW(act_quant_cuda(nullptr, nullptr, DType::F16, 1, 128, 128, nullptr, nullptr), Error);
  EXPECT_THROW(act_quant_cuda(nullptr, nullptr, DType::BF16, 1, 128, 0, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace deepinfer
