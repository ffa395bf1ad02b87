// MoE of one layer (MODEL_SPEC §A.8, §C.9; text tokens route with `bias`, never `bias_vl`): route, run each expert over its rows, add the
// shared expert. Accumulation per row is in expert-index order, then the shared expert,
// whatever the batch (batch-invariant when the GEMMs are).
#include <algorithm>
#include <cstring>

#include "model/model_batch.h"
#include "ops/moe/moe.h"

namespace deepinfer {

void Model::moe_block(int64_t layer, const Batch& batch, const float* x, float* out) const {
  const ModelConfig& cfg = config_;
  const MoeWeights& w = weights_.layers[layer].moe;
  const int64_t N = batch.n_rows(), D = cfg.hidden_size, k = cfg.n_experts_per_tok;
  const float limit = static_cast<float>(cfg.swiglu_limit);
  std::vector<int32_t> ids(N * k);
  std::vector<float> weights(N * k);
  RouterParams rp{cfg.n_routed_experts, k, static_cast<float>(cfg.routed_scaling_factor),
                  static_cast<float>(1.0 / cfg.gate_temp), static_cast<float>(cfg.traits.route_norm_eps)};
  const bool hash = cfg.is_hash_layer(layer);
  route_ref(x, N, D, w.gate.f32(), hash ? nullptr : w.bias.f32(),
            hash ? w.tid2eid.data<int32_t>() : nullptr, batch.tokens.data(), rp, ids.data(),
            weights.data(), gemm_mode_);
  if (trace_ != nullptr && !hash) {  // model/decision_trace.h
    for (int64_t row = 0; row < N; ++row) {
      ICHECK(batch.positions[row] < trace_->max_positions) << "DecisionTrace: position "
                                                           << batch.positions[row];
      std::copy(&ids[row * k], &ids[(row + 1) * k], trace_->experts_at(layer, batch.positions[row]));
    }
  }

  std::memset(out, 0, N * D * sizeof(float));
  std::vector<std::vector<int64_t>> rows(cfg.n_routed_experts);
  std::vector<std::vector<float>> row_weights(cfg.n_routed_experts);
  for (int64_t row = 0; row < N; ++row) {
    for (int64_t j = 0; j < k; ++j) {
      rows[ids[row * k + j]].push_back(row);
      row_weights[ids[row * k + j]].push_back(weights[row * k + j]);
    }
  }
  for (int64_t e = 0; e < cfg.n_routed_experts; ++e) {
    const ExpertWeightsT& ew = w.experts[e];
    expert_ffn_accumulate_ref(x, D, rows[e], row_weights[e], {ew.w1.f32(), ew.w3.f32(), ew.w2.f32()},
                              cfg.moe_intermediate_size, limit, out, gemm_mode_);
  }
  std::vector<int64_t> all(N);
  for (int64_t row = 0; row < N; ++row) all[row] = row;
  const ExpertWeightsT& sw = w.shared;
  expert_ffn_accumulate_ref(x, D, all, std::vector<float>(N, 1.0f), {sw.w1.f32(), sw.w3.f32(), sw.w2.f32()},
                            cfg.moe_intermediate_size * cfg.n_shared_experts, limit, out, gemm_mode_);
}

}  // namespace deepinfer
