// apply_token_bitmask_cuda vs apply_token_bitmask_ref: bitwise equal logits (allowed ones
// untouched, disallowed -inf) at awkward vocabularies and V4's 129,280, all-allowed /
// none-allowed / sparse / random mask words, garbage bits past the vocabulary, row indices,
// guard values after the last row. Prints the time per call for 64 rows of 129,280.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cuda/event.h"
#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/sampling/token_bitmask.h"
#include "ops/sampling/token_bitmask_cuda.h"

namespace deepinfer {
namespace {

std::vector<int32_t> random_mask_words(std::mt19937_64& rng, int64_t n_rows, int64_t vocab) {
  const int64_t n_words = token_bitmask_words(vocab);
  std::vector<int32_t> m(size_t(n_rows * n_words));
  for (auto& w : m) {
    const uint64_t kind = (rng() >> 7) % 4;
    const uint32_t bits = kind == 0 ? ~0u : kind == 1 ? 0u : kind == 2 ? 1u << (rng() % 32) : uint32_t(rng());
    std::memcpy(&w, &bits, sizeof(bits));
  }
  return m;
}

void check(std::mt19937_64& rng, int64_t n_logit_rows, int64_t vocab, bool indexed) {
  SCOPED_TRACE(testing::Message() << "rows " << n_logit_rows << " vocab " << vocab
                                  << (indexed ? " indexed" : ""));
  std::vector<int32_t> rows;
  if (indexed) {  // every other row, in reverse order
    for (int64_t r = n_logit_rows - 1; r >= 0; r -= 2) rows.push_back(int32_t(r));
  }
  const int64_t n_rows = indexed ? int64_t(rows.size()) : n_logit_rows;
  const int64_t n_guard = 64;
  std::vector<float> logits = test::randn(rng, n_logit_rows * vocab + n_guard, 2.0f);
  logits[0] = -0.0f;
  if (logits.size() > 3) logits[2] = INFINITY;
  const auto mask = random_mask_words(rng, n_rows, vocab);
  std::vector<float> ref = logits;
  apply_token_bitmask_ref(ref.data(), reinterpret_cast<const uint32_t*>(mask.data()),
                          indexed ? rows.data() : nullptr, n_rows, vocab);
  Tensor ld = test::upload_f32(logits), md = test::upload_i32(mask);
  Tensor rd = test::upload_i32(indexed ? rows : std::vector<int32_t>{0});
  apply_token_bitmask_cuda(nullptr, ld.data<float>(), reinterpret_cast<const uint32_t*>(md.data<int32_t>()),
                           indexed ? rd.data<int32_t>() : nullptr, n_rows, vocab);
  const auto out = test::download_f32(ld);
  ASSERT_EQ(out.size(), ref.size());
  EXPECT_EQ(std::memcmp(out.data(), ref.data(), out.size() * sizeof(float)), 0);
  // The reference masked exactly the disallowed (row, token < vocab) bits: the random logits
  // hold no -inf (one +inf at [2], which a disallowed bit turns into -inf like any logit), the
  // bits past the vocabulary and the guard values stay untouched. (A random mask may allow
  // everything at tiny vocabularies, so the count may be 0.)
  int64_t n_masked = 0, n_disallowed = 0;
  for (float v : ref) n_masked += v == -INFINITY;
  const int64_t n_words = token_bitmask_words(vocab);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t t = 0; t < vocab; ++t) {
      const uint32_t word = static_cast<uint32_t>(mask[size_t(r * n_words + t / 32)]);
      n_disallowed += ((word >> (t % 32)) & 1u) == 0;
    }
  }
  EXPECT_EQ(n_masked, n_disallowed);
}

TEST(TokenBitmaskCuda, MatchesReference) {
  auto rng = test::fresh_rng();
  for (int64_t vocab : {int64_t(1), int64_t(31), int64_t(32), int64_t(33), int64_t(255), int64_t(1001),
                        int64_t(4097), int64_t(129280)}) {
    for (int64_t rows : {int64_t(1), int64_t(3), int64_t(17), int64_t(64)}) {
      for (bool indexed : {false, true}) check(rng, rows, vocab, indexed);
    }
  }
}

TEST(TokenBitmaskCuda, ReportsTimePerCall) {
  auto rng = test::fresh_rng();
  const int64_t vocab = 129280, n_rows = 64;
  const std::vector<float> logits = test::randn(rng, n_rows * vocab);
  const auto mask = random_mask_words(rng, n_rows, vocab);
  Tensor ld = test::upload_f32(logits), md = test::upload_i32(mask);
  const auto* m = reinterpret_cast<const uint32_t*>(md.data<int32_t>());
  apply_token_bitmask_cuda(nullptr, ld.data<float>(), m, nullptr, n_rows, vocab);
  cuda::Event start, stop;
  constexpr int kIters = 50;
  start.record(nullptr);
  for (int i = 0; i < kIters; ++i) apply_token_bitmask_cuda(nullptr, ld.data<float>(), m, nullptr, n_rows, vocab);
  stop.record(nullptr);
  stop.synchronize();
  const double us = 1e3 * cuda::Event::elapsed_ms(start, stop) / kIters;
  const double bytes = double(n_rows) * (double(vocab) * sizeof(float) + double(token_bitmask_words(vocab)) * 4);
  std::printf("apply_token_bitmask %lld x %lld: %.1f us per call, %.1f GB/s (mask + every logit once)\n",
              (long long)n_rows, (long long)vocab, us, bytes / us * 1e-3);
}

}  // namespace
}  // namespace deepinfer
