#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace deepinfer {

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int64_t k) {
  double max = -INFINITY;
  for (float x : logits) max = std::max(max, double(x));
  double sum = 0.0;
  for (float x : logits) sum += std::exp(double(x) - max);
  const double log_z = max + std::log(sum);
  TokenLogprob out;
  out.token = token;
  out.logprob = float(double(logits[size_t(token)]) - log_z);
  k = std::min<int64_t>(k, int64_t(logits.size()));
  if (k > 0) {
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    });
    for (int64_t i = 0; i < k; ++i) {
      out.top.emplace_back(ids[size_t(i)], float(double(logits[size_t(ids[size_t(i)])]) - log_z));
    }
  }
  return out;
}

}  // namespace deepinfer
