// Attention of one query token over an explicit set of K=V vectors with a per-head
// sink logit (MODEL_SPEC §A.3, §A.7): for head h,
//   s_j = (q_h . kv_j) * scale,  o_h = sum_j e^{s_j - mu} kv_j / (sum_j e^{s_j - mu} + e^{sink_h - mu})
// with mu = max(max_j s_j, sink_h). One KV head shared by all query heads; fp32 with
// double accumulation of the softmax denominator.
#pragma once

#include <cstdint>

namespace deepinfer {

// q [n_heads, head_dim]; kv: n_kv pointers to head_dim floats; sinks [n_heads];
// out [n_heads, head_dim]. n_kv may be 0 (output is then 0).
void sparse_attention_row_ref(const float* q, int64_t n_heads, int64_t head_dim,
                              const float* const* kv, int64_t n_kv, const float* sinks, float scale,
                              float* out);

}  // namespace deepinfer
