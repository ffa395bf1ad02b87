// Mixture of experts (MODEL_SPEC §A.8): sqrtsoftplus router with selection-only bias or
// hash routing, clamped SwiGLU experts, shared expert. fp32 throughout.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/linear/linear.h"

namespace deepinfer {

struct RouterParams {
  int64_t n_experts = 0;
  int64_t top_k = 0;
  float routed_scale = 1.0f;
  float inv_temp = 1.0f;  // logits are multiplied by 1 / gate_temp (V4.1; 1 for V4)
  float sum_eps = 0.0f;   // added to sum(scores[sel]) before dividing (V4.1: 1e-20)
  bool normalize = true;  // false: weights = scores[sel] * routed_scale (norm_topk_prob off,
                          // or top_k == 1, as the V4.1 reference and mlx-lm do)
};

// For N tokens: router logits = (gate_w [E, D] . x) * inv_temp, scores = sqrt(softplus(logits)).
// Selection: top_k of (scores + bias) (bias may be null), or tid2eid[token] [V, top_k]
// when tid2eid is non-null. Weights = scores[sel] / (sum(scores[sel]) + sum_eps) * routed_scale
// (without the division when !normalize).
// Outputs expert ids [N, top_k] and weights [N, top_k].
void route_ref(const float* x, int64_t n_rows, int64_t dim, const float* gate_w,
               const float* bias, const int32_t* tid2eid, const int32_t* token_ids,
               const RouterParams& p, int32_t* expert_ids, float* weights,
               GemmMode mode = GemmMode::kBlas);

struct ExpertWeights {
  const float* w1 = nullptr;  // [I, D] gate
  const float* w3 = nullptr;  // [I, D] up
  const float* w2 = nullptr;  // [D, I] down
};

// y[n] += weight[n] * W2 (silu(min(W1 x, limit)) * clamp(W3 x, -limit, limit)) for the
// rows `rows` of x (the routing weight multiplies the activation before W2).
// limit <= 0 disables the clamp.
void expert_ffn_accumulate_ref(const float* x, int64_t dim, const std::vector<int64_t>& rows,
                               const std::vector<float>& row_weights, const ExpertWeights& w,
                               int64_t inter, float limit, float* y, GemmMode mode = GemmMode::kBlas);

}  // namespace deepinfer
