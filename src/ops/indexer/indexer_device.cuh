// Device helpers shared by the indexer score kernels (ops/indexer/indexer.cu, dense fp32 keys;
// ops/kv_cache/index_cache.cu, paged FP8 keys): the row's q and head weights into shared
// memory, and one key's score with the warp holding the key. Included by .cu files only.
#pragma once

#include <cstdint>

namespace deepinfer::indexer_device {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The whole block copies q[row] ([n_heads * head_dim] = qn floats) to s_q and
// g[row, h] * head_scale to s_g[h]. P: IndexerScoresParams or IndexerPagedScoresParams.
// The caller synchronises the block before reading them.
template <class P>
__device__ __forceinline__ void stage_row(const P& p, int64_t row, int64_t qn, float* s_q,
                                          float* s_g) {
  for (int64_t i = threadIdx.x; i < qn; i += blockDim.x) s_q[i] = p.q[row * qn + i];
  for (int64_t i = threadIdx.x; i < p.n_heads; i += blockDim.x) {
    s_g[i] = p.g[row * p.n_heads + i] * p.head_scale;
  }
}

// sum_h s_g[h] * (ReLU(q_h . key) * scale), q_h = s_q + h * d, the key spread over the warp as
// k[i] = key[i * 32 + lane] for i < per_lane (d = 32 * per_lane). Every lane gets the sum.
template <int kMaxPerLane>
__device__ __forceinline__ float key_score(const float* s_q, const float* s_g,
                                           const float (&k)[kMaxPerLane], int per_lane, int lane,
                                           int64_t n_heads, int64_t d, float scale) {
  float total = 0.0f;
  for (int64_t h = 0; h < n_heads; ++h) {
    const float* qh = s_q + h * d;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      if (i < per_lane) dot += qh[i * 32 + lane] * k[i];
    }
    dot = warp_sum(dot);
    total += s_g[h] * (fmaxf(dot, 0.0f) * scale);
  }
  return total;
}

}  // namespace deepinfer::indexer_device
