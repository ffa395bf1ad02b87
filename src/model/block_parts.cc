#include "model/block_parts.h"

#include <algorithm>
#include <cstring>

#include "ops/moe/moe.h"
#include "ops/rms_norm/rms_norm.h"

namespace deepinfer {

MoeShape moe_shape(const ModelConfig& cfg, bool hash) {
  MoeShape s;
  s.n_experts = cfg.n_routed_experts;
  s.top_k = cfg.n_experts_per_tok;
  s.dim = cfg.hidden_size;
  s.inter = cfg.moe_intermediate_size;
  s.shared_inter = cfg.moe_intermediate_size * cfg.n_shared_experts;
  s.limit = static_cast<float>(cfg.swiglu_limit);
  s.routed_scale = static_cast<float>(cfg.routed_scaling_factor);
  s.inv_temp = static_cast<float>(1.0 / cfg.gate_temp);
  s.sum_eps = static_cast<float>(cfg.traits.route_norm_eps);
  s.norm_topk_prob = cfg.norm_topk_prob;
  s.normalize_always = cfg.traits.route_normalize_always;
  s.hash = hash;
  return s;
}

void moe_route(const MoeWeights& w, const MoeShape& s, const float* x, int64_t N,
               const int32_t* tokens, int32_t* ids, float* weights, GemmMode mode) {
  RouterParams rp{s.n_experts, s.top_k, s.routed_scale, s.inv_temp, s.sum_eps,
                  s.normalize_always || (s.norm_topk_prob && s.top_k > 1)};
  route_ref(x, N, s.dim, w.gate.f32(), s.hash ? nullptr : w.bias.f32(),
            s.hash ? w.tid2eid.data<int32_t>() : nullptr, tokens, rp, ids, weights, mode);
}

void moe_local_contributions(const MoeWeights& w, const MoeShape& s, const float* x, int64_t N,
                             const int32_t* ids, const float* weights, float* contrib,
                             GemmMode mode) {
  const int64_t D = s.dim, k = s.top_k;
  // Per expert, its (row, j) pairs in row order: the batch each expert runs over.
  std::vector<std::vector<int64_t>> pairs(s.n_experts);
  for (int64_t i = 0; i < N * k; ++i) pairs[ids[i]].push_back(i);
  std::vector<float> xs, out, row_weights;
  std::vector<int64_t> rows;
  for (int64_t e = 0; e < s.n_experts; ++e) {
    const int64_t n = static_cast<int64_t>(pairs[e].size());
    if (n == 0) continue;
    xs.resize(n * D);
    out.assign(n * D, 0.0f);
    row_weights.resize(n);
    rows.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pair = pairs[e][i];
      std::memcpy(&xs[i * D], x + (pair / k) * D, D * sizeof(float));
      row_weights[i] = weights[pair];
      rows[i] = i;
    }
    const ExpertWeightsT& ew = w.experts[e];
    expert_ffn_accumulate_ref(xs.data(), D, rows, row_weights,
                              {ew.w1.f32(), ew.w3.f32(), ew.w2.f32()}, s.inter, s.limit,
                              out.data(), mode);
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(contrib + pairs[e][i] * D, &out[i * D], D * sizeof(float));
    }
  }
}

void moe_ordered_sum(const MoeWeights& w, const MoeShape& s, const float* x, int64_t N,
                     const int32_t* ids, const float* contrib, float* out, GemmMode mode) {
  const int64_t D = s.dim, k = s.top_k;
  std::memset(out, 0, N * D * sizeof(float));
  std::vector<int64_t> order(k);
  for (int64_t row = 0; row < N; ++row) {
    for (int64_t j = 0; j < k; ++j) order[j] = j;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return ids[row * k + a] < ids[row * k + b]; });
    float* y = out + row * D;
    for (int64_t j : order) {
      const float* c = contrib + (row * k + j) * D;
      for (int64_t d = 0; d < D; ++d) y[d] += c[d];
    }
  }
  std::vector<int64_t> all(N);
  for (int64_t row = 0; row < N; ++row) all[row] = row;
  const ExpertWeightsT& sw = w.shared;
  expert_ffn_accumulate_ref(x, D, all, std::vector<float>(N, 1.0f),
                            {sw.w1.f32(), sw.w3.f32(), sw.w2.f32()}, s.shared_inter, s.limit, out,
                            mode);
}

void moe_forward(const MoeWeights& w, const MoeShape& s, const float* x, int64_t N,
                 const int32_t* tokens, float* out, GemmMode mode, int32_t* ids_out) {
  const int64_t k = s.top_k;
  std::vector<int32_t> ids(N * k);
  std::vector<float> weights(N * k), contrib(N * k * s.dim);
  moe_route(w, s, x, N, tokens, ids.data(), weights.data(), mode);
  if (ids_out != nullptr) std::copy(ids.begin(), ids.end(), ids_out);
  moe_local_contributions(w, s, x, N, ids.data(), weights.data(), contrib.data(), mode);
  moe_ordered_sum(w, s, x, N, ids.data(), contrib.data(), out, mode);
}

void attention_projections(const ModelConfig& cfg, const AttentionWeights& w, const float* x,
                           int64_t N, GemmMode mode, std::vector<float>& q_r,
                           std::vector<float>& q, std::vector<float>& kv) {
  const int64_t D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim, Rq = cfg.q_lora_rank;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  q_r.resize(N * Rq);
  q.resize(N * H * d);
  kv.resize(N * d);
  linear_ref(x, N, D, w.wq_a.f32(), Rq, q_r.data(), mode);
  rms_norm_ref(q_r.data(), w.q_norm.f32(), N, Rq, Rq, eps, q_r.data());
  linear_ref(q_r.data(), N, Rq, w.wq_b.f32(), H * d, q.data(), mode);
  if (cfg.traits.per_head_q_norm) rms_norm_ref(q.data(), nullptr, N * H, d, d, eps, q.data());
  linear_ref(x, N, D, w.wkv.f32(), d, kv.data(), mode);
  rms_norm_ref(kv.data(), w.kv_norm.f32(), N, d, d, eps, kv.data());
}

void attention_output(const ModelConfig& cfg, const AttentionWeights& w, const float* o,
                      int64_t N, GemmMode mode, float* out) {
  const int64_t H = cfg.num_heads, d = cfg.head_dim, D = cfg.hidden_size;
  const int64_t G = cfg.o_groups, Ro = cfg.o_lora_rank, gw = H * d / G;
  std::vector<float> og(N * gw), zg(N * Ro), z(N * G * Ro);
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t row = 0; row < N; ++row) {
      std::memcpy(&og[row * gw], &o[row * H * d + g * gw], gw * sizeof(float));
    }
    linear_ref(og.data(), N, gw, w.wo_a.f32() + g * Ro * gw, Ro, zg.data(), mode);
    for (int64_t row = 0; row < N; ++row) {
      std::memcpy(&z[row * G * Ro + g * Ro], &zg[row * Ro], Ro * sizeof(float));
    }
  }
  linear_ref(z.data(), N, G * Ro, w.wo_b.f32(), D, out, mode);
}

}  // namespace deepinfer
