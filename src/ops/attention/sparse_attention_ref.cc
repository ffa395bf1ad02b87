#include <cmath>
#include <vector>

#include "ops/attention/sparse_attention.h"

namespace deepinfer {

void sparse_attention_row_ref(const float* q, int64_t n_heads, int64_t head_dim,
                              const float* const* kv, int64_t n_kv, const float* sinks, float scale,
                              float* out) {
  std::vector<float> scores(n_kv);
  for (int64_t h = 0; h < n_heads; ++h) {
    const float* qh = q + h * head_dim;
    float mu = sinks[h];
    for (int64_t j = 0; j < n_kv; ++j) {
      float dot = 0.0f;
      for (int64_t i = 0; i < head_dim; ++i) dot += qh[i] * kv[j][i];
      scores[j] = dot * scale;
      mu = std::max(mu, scores[j]);
    }
    double denom = std::exp(static_cast<double>(sinks[h]) - mu);
    for (int64_t j = 0; j < n_kv; ++j) {
      scores[j] = std::exp(scores[j] - mu);
      denom += scores[j];
    }
    float* oh = out + h * head_dim;
    for (int64_t i = 0; i < head_dim; ++i) oh[i] = 0.0f;
    for (int64_t j = 0; j < n_kv; ++j) {
      const float w = static_cast<float>(scores[j] / denom);
      for (int64_t i = 0; i < head_dim; ++i) oh[i] += w * kv[j][i];
    }
  }
}

}  // namespace deepinfer
