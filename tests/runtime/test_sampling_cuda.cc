// sample_cuda vs the engine's CPU sampler (src/engine/sampler.cc, compiled into this test):
// the same token for every row — greedy (with tied maxima), temperature, top-k, top-p,
// min-p and their combinations, many (seed, position) pairs — at a small vocabulary and at
// V4's 129,280, including logits with many exact ties.
#include <gtest/gtest.h>

#include <random>

#include "cuda/device_tensor.h"
#include "engine/sampler.h"
#include "ops/sampling/sampling_cuda.h"

namespace deepinfer {
namespace {

void check(std::mt19937_64& rng, int64_t n_rows, int64_t vocab, bool ties) {
  SCOPED_TRACE(testing::Message() << "rows " << n_rows << " vocab " << vocab << (ties ? " ties" : ""));
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(n_rows * vocab);
  for (auto& v : logits) v = ties ? std::round(nd(rng)) : nd(rng);
  std::vector<SampleRowParams> params(n_rows);
  std::vector<SamplingParams> cpu(n_rows);
  std::uniform_int_distribution<int> kind(0, 7);
  std::uniform_int_distribution<uint64_t> seed;
  std::uniform_int_distribution<int64_t> position(0, 100000);
  for (int64_t r = 0; r < n_rows; ++r) {
    SamplingParams& c = cpu[r];
    switch (kind(rng)) {
      case 0: c.temperature = 0.0f; break;
      case 1: c.top_k = 1; break;
      case 2: c.temperature = 0.7f; break;
      case 3: c.temperature = 1.3f; c.top_k = 50; break;
      case 4: c.top_p = 0.9f; break;
      case 5: c.min_p = 0.05f; c.temperature = 0.9f; break;
      case 6: c.top_k = 200; c.top_p = 0.8f; c.min_p = 0.01f; c.temperature = 1.1f; break;
      default: c.temperature = 2.5f; c.top_p = 0.99f; break;
    }
    c.seed = seed(rng);
    const int64_t pos = position(rng);
    params[r] = {c.temperature, static_cast<int32_t>(c.top_k), c.top_p, c.min_p, c.seed, pos};
  }
  Tensor ld = cuda::device_empty(DType::F32, {n_rows, vocab});
  cuda::copy_h2d(ld.raw(), logits.data(), logits.size() * sizeof(float));
  Tensor pd = cuda::device_empty(DType::U8, {static_cast<int64_t>(n_rows * sizeof(SampleRowParams))});
  cuda::copy_h2d(pd.raw(), params.data(), n_rows * sizeof(SampleRowParams));
  Tensor td = cuda::device_filled(DType::I32, {n_rows}, 0xff);
  SamplingWorkspace ws(n_rows, vocab);
  sample_cuda(nullptr, ld.data<float>(), n_rows, vocab, static_cast<const SampleRowParams*>(pd.raw()),
              ws, td.data<int32_t>());
  std::vector<int32_t> got(n_rows);
  cuda::copy_d2h(got.data(), td.raw(), n_rows * sizeof(int32_t));
  int n_diff = 0, n_not_argmax = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    std::span<const float> row(&logits[r * vocab], vocab);
    const int32_t want = sample_token(row, cpu[r], params[r].position);
    n_not_argmax += want != static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    if (got[r] != want && ++n_diff <= 5) {
      ADD_FAILURE() << "row " << r << ": GPU " << got[r] << ", CPU " << want << " (T "
                    << cpu[r].temperature << ", top_k " << cpu[r].top_k << ", top_p " << cpu[r].top_p
                    << ", min_p " << cpu[r].min_p << ")";
    }
  }
  EXPECT_EQ(n_diff, 0);
  // The sampled (non-greedy) rows really sample: most do not pick the arg-max.
  EXPECT_GT(n_not_argmax, 0);
  std::printf("sampling rows %lld vocab %lld%s: %d differ from the CPU sampler, %d not the argmax\n",
              static_cast<long long>(n_rows), static_cast<long long>(vocab), ties ? " (ties)" : "",
              n_diff, n_not_argmax);
}

TEST(SamplingCuda, MatchesCpuSampler) {
  uint64_t s = std::random_device{}();
  std::printf("[seed %llu]\n", static_cast<unsigned long long>(s));
  std::mt19937_64 rng(s);
  check(rng, 300, 1000, false);
  check(rng, 300, 1000, true);
  check(rng, 64, 129280, false);
  check(rng, 16, 129280, true);
}

}  // namespace
}  // namespace deepinfer
