#include <algorithm>
#include <numeric>

#include "ops/indexer/indexer.h"

namespace deepinfer {

void indexer_scores_ref(const float* q, const float* g, int64_t n_heads, int64_t head_dim,
                        const float* keys, int64_t n_keys, float scale, float* scores) {
  for (int64_t s = 0; s < n_keys; ++s) {
    const float* key = keys + s * head_dim;
    float total = 0.0f;
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* qh = q + h * head_dim;
      float dot = 0.0f;
      for (int64_t i = 0; i < head_dim; ++i) dot += qh[i] * key[i];
      total += g[h] * (std::max(dot, 0.0f) * scale);
    }
    scores[s] = total;
  }
}

std::vector<int64_t> topk_indices(const float* scores, int64_t n, int64_t k) {
  k = std::min(k, n);
  std::vector<int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace deepinfer
