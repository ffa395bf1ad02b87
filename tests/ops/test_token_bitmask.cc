// apply_token_bitmask_ref (the engine's CPU path) against the contract read token by token:
// bit t % 32 of word t / 32 set keeps the logit bit for bit, clear makes it -inf; bits past the
// vocabulary are ignored; with row indices only the named logits rows change.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "op_test_util.h"
#include "ops/sampling/token_bitmask.h"

namespace deepinfer {
namespace {

std::vector<uint32_t> random_mask(std::mt19937_64& rng, int64_t n_rows, int64_t vocab) {
  const int64_t n_words = token_bitmask_words(vocab);
  std::vector<uint32_t> m(size_t(n_rows * n_words));
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t w = 0; w < n_words; ++w) {
      // Mix the shapes grammars produce: all allowed, none allowed, sparse, random.
      const uint64_t kind = (rng() >> 7) % 4;
      m[size_t(r * n_words + w)] = kind == 0 ? ~0u : kind == 1 ? 0u
                                   : kind == 2 ? 1u << (rng() % 32) : uint32_t(rng());
    }
  }
  return m;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST(TokenBitmask, ReferenceFollowsTheContract) {
  auto rng = test::fresh_rng();
  for (int64_t vocab : {int64_t(1), int64_t(31), int64_t(32), int64_t(33), int64_t(1000), int64_t(129280)}) {
    for (bool indexed : {false, true}) {
      const int64_t n_logit_rows = 5, n_rows = indexed ? 3 : n_logit_rows;
      const std::vector<int32_t> rows = {4, 0, 2};
      // 40 guard values after the last row: bits past the vocabulary must not reach them.
      std::vector<float> logits = test::randn(rng, n_logit_rows * vocab + 40);
      logits[0] = -0.0f;
      const std::vector<float> before = logits;
      const auto mask = random_mask(rng, n_rows, vocab);
      apply_token_bitmask_ref(logits.data(), mask.data(), indexed ? rows.data() : nullptr, n_rows, vocab);
      const int64_t n_words = token_bitmask_words(vocab);
      for (int64_t lr = 0; lr < n_logit_rows; ++lr) {
        int64_t mr = indexed ? -1 : lr;
        for (int64_t r = 0; indexed && r < n_rows; ++r)
          if (rows[size_t(r)] == lr) mr = r;
        for (int64_t t = 0; t < vocab; ++t) {
          const float got = logits[size_t(lr * vocab + t)], was = before[size_t(lr * vocab + t)];
          if (mr < 0 || (mask[size_t(mr * n_words + t / 32)] >> (t % 32)) & 1u) {
            ASSERT_TRUE(same_bits(got, was)) << "vocab " << vocab << " row " << lr << " token " << t;
          } else {
            ASSERT_EQ(got, -INFINITY) << "vocab " << vocab << " row " << lr << " token " << t;
          }
        }
      }
      for (int64_t i = n_logit_rows * vocab; i < int64_t(logits.size()); ++i)
        ASSERT_TRUE(same_bits(logits[size_t(i)], before[size_t(i)])) << "guard " << i;
    }
  }
}

}  // namespace
}  // namespace deepinfer
