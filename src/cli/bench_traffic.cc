#include "cli/bench_traffic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "base/error.h"

namespace deepinfer {

std::string Traffic::label() const {
  if (request_rate == 0) return "concurrency " + std::to_string(max_concurrency);
  char buf[96];
  if (std::isinf(request_rate)) {
    std::snprintf(buf, sizeof(buf), "rate inf");
  } else {
    std::snprintf(buf, sizeof(buf), "rate %g/s", request_rate);
  }
  std::string s = buf;
  if (max_concurrency > 0) s += " (max " + std::to_string(max_concurrency) + ")";
  return s;
}

std::vector<std::vector<int32_t>> random_prompts(int64_t n, int64_t input_len, int64_t vocab, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
  for (auto& p : out) p = random_token_ids(gen, input_len, vocab);
  return out;
}

std::vector<int32_t> random_token_ids(std::mt19937_64& gen, int64_t n, int64_t vocab) {
  CHECK(vocab >= 1) << "the vocabulary is empty";
  const uint64_t range = static_cast<uint64_t>(std::min<int64_t>(vocab, 100000));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& t : ids) t = static_cast<int32_t>(gen() % range);
  return ids;
}

std::vector<double> poisson_arrivals(int64_t n, double rate, uint64_t seed) {
  CHECK(rate > 0) << "--request-rate must be > 0 (or inf)";
  std::vector<double> t(static_cast<size_t>(n), 0.0);
  if (std::isinf(rate)) return t;
  // Its own stream (seed + 1): the prompts stay the same whatever the rate.
  std::mt19937_64 gen(seed + 1);
  std::exponential_distribution<double> gap(rate);
  for (size_t i = 1; i < t.size(); ++i) t[i] = t[i - 1] + gap(gen);
  return t;
}

}  // namespace deepinfer
