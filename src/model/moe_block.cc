// MoE of one backbone layer (model/block_parts.h; MODEL_SPEC §A.8, §C.9: text tokens route
// with `bias`, never `bias_vl`), recording the chosen experts for a DecisionTrace; and the
// expert-parallel form of it (ModelOptions::expert_parallel, parallel/expert_parallel.h): the
// same routing and ordered sum on the home rank, the routed experts' contributions computed
// by the ranks that hold them.
#include <algorithm>
#include <cstring>

#include "model/model_batch.h"
#include "model/block_parts.h"
#include "parallel/expert_parallel.h"

namespace deepinfer {

void Model::moe_block(int64_t layer, const Batch& batch, const float* x, float* out) const {
  const ModelConfig& cfg = config_;
  const int64_t N = batch.n_rows(), k = cfg.n_experts_per_tok;
  const bool hash = cfg.is_hash_layer(layer);
  const MoeWeights& w = weights_.layers[layer].moe;
  const MoeShape shape = moe_shape(cfg, hash);
  std::vector<int32_t> ids(N * k);
  if (ExpertParallel* ep = options_.expert_parallel.get()) {
    std::vector<float> weights(N * k), contrib(N * k * shape.dim);
    if (N > 0) moe_route(w, shape, x, N, batch.tokens.data(), ids.data(), weights.data(), gemm_mode_);
    ep->routed_contributions(layer, x, N, shape.dim, shape.inter, shape.limit, ids.data(),
                             weights.data(), k, contrib.data(), gemm_mode_);
    if (N > 0) moe_ordered_sum(w, shape, x, N, ids.data(), contrib.data(), out, gemm_mode_);
  } else {
    moe_forward(w, shape, x, N, batch.tokens.data(), out, gemm_mode_, ids.data());
  }
  if (trace_ != nullptr && !hash) {  // model/decision_trace.h
    for (int64_t row = 0; row < N; ++row) {
      ICHECK(batch.positions[row] < trace_->max_positions) << "DecisionTrace: position "
                                                           << batch.positions[row];
      std::copy(&ids[row * k], &ids[(row + 1) * k], trace_->experts_at(layer, batch.positions[row]));
    }
  }
}

Tensor Model::forward_expert_parallel(std::span<const SequenceChunk> chunks) const {
  ExpertParallel& ep = *options_.expert_parallel;
  ep.begin_step();
  Tensor logits;
  try {
    logits = forward_rows(chunks);
  } catch (...) {
    // The peers' step must still complete: finish the layers this forward did not reach with
    // zero rows (a broken communicator throws again; the original error is the one to report).
    try {
      ep.end_step();
    } catch (const Error&) {
    }
    throw;
  }
  ep.end_step();
  return logits;
}

void Model::adopt_routed_experts() {
  ExpertParallel& ep = *options_.expert_parallel;
  const ModelConfig& cfg = config_;
  CHECK(ep.n_layers() == cfg.num_layers && ep.n_experts() == cfg.n_routed_experts)
      << "expert parallelism was set up for " << ep.n_layers() << " layers of " << ep.n_experts()
      << " experts, the model has " << cfg.num_layers << " of " << cfg.n_routed_experts;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    std::vector<ExpertWeightsT>& experts = weights_.layers[l].moe.experts;
    for (int64_t e = 0; e < static_cast<int64_t>(experts.size()); ++e) {
      if (ep.keeps(l, e) && experts[e].w1.defined()) {
        ep.set_expert(l, e, {experts[e].w1, experts[e].w3, experts[e].w2});
      }
    }
    experts.clear();  // the model keeps no routed expert; unkept ones are freed here
  }
  ep.check_loaded(cfg.hidden_size, cfg.moe_intermediate_size);
}

}  // namespace deepinfer
