// Lightning indexer scoring and top-k selection (MODEL_SPEC §A.6).
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

// scores[s] = sum_h g[h] * ReLU(q_h . keys[s]) * scale   for s in [0, n_keys)
// q [n_heads, head_dim], g [n_heads], keys [n_keys, head_dim] contiguous.
void indexer_scores_ref(const float* q, const float* g, int64_t n_heads, int64_t head_dim,
                        const float* keys, int64_t n_keys, float scale, float* scores);

// Indices of the k largest scores (k clamped to n), ordered by descending score; ties
// broken by the lower index. The result is sorted ascending by index for a stable
// attention order.
std::vector<int64_t> topk_indices(const float* scores, int64_t n, int64_t k);

}  // namespace deepinfer
