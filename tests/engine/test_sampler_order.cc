// sample_token orders its candidates with a key radix sort (or a partial sort of keys for a short
// top-k). The draws must equal those of the contract in sampler.h computed the plain way: every
// token with logit > -inf stably sorted by logit descending (ids ascending among ties), the
// first top_k kept, softmax(l/T), min-p, top-p, inverse CDF at sample_uniform(seed, position).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/sampler.h"

namespace deepinfer {
namespace {

int32_t reference_sample(const std::vector<float>& logits, const SamplingParams& p, int64_t position) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] > -INFINITY) ids.push_back(int32_t(i));
  if (ids.empty()) return 0;
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (p.top_k > 0 && size_t(p.top_k) < ids.size()) ids.resize(size_t(p.top_k));
  const size_t k = ids.size();
  std::vector<double> probs(k);
  double total = 0;
  for (size_t i = 0; i < k; ++i) {
    probs[i] = std::exp((double(logits[ids[i]]) - logits[ids[0]]) / p.temperature);
    total += probs[i];
  }
  size_t keep = k;
  for (size_t i = 0; i < k; ++i) {
    probs[i] /= total;
    if (p.min_p > 0 && probs[i] < p.min_p * probs[0]) keep = std::min(keep, i);
  }
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += probs[i];
    if (cum >= p.top_p) {
      keep = i + 1;
      break;
    }
  }
  keep = std::max<size_t>(keep, 1);
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += probs[i];
  const double u = sample_uniform(p.seed, position) * mass;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (u < acc) return ids[i];
  }
  return ids[keep - 1];
}

// Logits with ties, both zeros, masked (-inf) entries and a wide spread of exponents.
std::vector<float> awkward_logits(size_t n, uint32_t seed, double masked_share) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<float> v(n);
  for (float& x : v) {
    const double r = unit(gen);
    if (r < masked_share) x = -INFINITY;
    else if (r < masked_share + 0.05) x = 0.0f;
    else if (r < masked_share + 0.10) x = -0.0f;
    else if (r < masked_share + 0.30) x = std::round(normal(gen) * 4) / 4;  // many ties
    else x = normal(gen) * (r < 0.9 ? 1.0f : 1e-6f);
  }
  return v;
}

TEST(SamplerOrder, DrawsEqualThePlainStableSort) {
  int n_cases = 0;
  for (size_t n : {size_t(1), size_t(2), size_t(17), size_t(300), size_t(4099)}) {
    for (double masked : {0.0, 0.5, 0.97}) {
      const std::vector<float> logits = awkward_logits(n, uint32_t(n * 31 + masked * 100), masked);
      for (int64_t top_k : {int64_t(0), int64_t(2), int64_t(7), int64_t(n / 2), int64_t(n)}) {
        for (float top_p : {1.0f, 0.9f, 0.3f}) {
          for (float min_p : {0.0f, 0.05f}) {
            for (float temperature : {0.5f, 1.0f, 2.5f}) {
              SamplingParams p;
              p.temperature = temperature;
              p.top_k = top_k;
              p.top_p = top_p;
              p.min_p = min_p;
              for (uint64_t seed : {0ull, 11ull}) {
                p.seed = seed;
                for (int64_t pos = 0; pos < 3; ++pos) {
                  ASSERT_EQ(sample_token(logits, p, pos), reference_sample(logits, p, pos))
                      << "n " << n << " masked " << masked << " top_k " << top_k << " top_p " << top_p
                      << " min_p " << min_p << " T " << temperature << " seed " << seed << " pos " << pos;
                  ++n_cases;
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(n_cases, 1000);
}

// The model's vocabulary size, a grammar-like mask (a contiguous allowed block plus scattered
// ids) and all-equal logits (the order is then the id order).
TEST(SamplerOrder, FullVocabularyAndEqualLogits) {
  const size_t n = 129280;
  const std::vector<float> logits = awkward_logits(n, 5, 0.0);
  const std::vector<float> masked = [&] {
    std::vector<float> m(n, -INFINITY);
    for (size_t i = 1000; i < 1400; ++i) m[i] = logits[i];
    for (size_t i = 7; i < n; i += 997) m[i] = logits[i];
    return m;
  }();
  const std::vector<float> equal(n, 0.25f);
  for (const std::vector<float>* v : {&logits, &masked, &equal}) {
    for (float top_p : {1.0f, 0.95f}) {
      for (int64_t top_k : {int64_t(0), int64_t(40)}) {
        SamplingParams p;
        p.top_p = top_p;
        p.top_k = top_k;
        for (uint64_t seed = 0; seed < 8; ++seed) {
          p.seed = seed;
          EXPECT_EQ(sample_token(*v, p, int64_t(seed)), reference_sample(*v, p, int64_t(seed)));
        }
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer
