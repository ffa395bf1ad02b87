// MoE of one backbone layer (model/block_parts.h; MODEL_SPEC §A.8, §C.9: text tokens route
// with `bias`, never `bias_vl`), recording the chosen experts for a DecisionTrace.
#include <algorithm>
#include <cstring>

#include "model/model_batch.h"
#include "model/block_parts.h"

namespace deepinfer {

void Model::moe_block(int64_t layer, const Batch& batch, const float* x, float* out) const {
  const ModelConfig& cfg = config_;
  const int64_t N = batch.n_rows(), k = cfg.n_experts_per_tok;
  const bool hash = cfg.is_hash_layer(layer);
  std::vector<int32_t> ids(N * k);
  moe_forward(weights_.layers[layer].moe, moe_shape(cfg, hash), x, N, batch.tokens.data(), out,
              gemm_mode_, ids.data());
  if (trace_ != nullptr && !hash) {  // model/decision_trace.h
    for (int64_t row = 0; row < N; ++row) {
      ICHECK(batch.positions[row] < trace_->max_positions) << "DecisionTrace: position "
                                                           << batch.positions[row];
      std::copy(&ids[row * k], &ids[(row + 1) * k], trace_->experts_at(layer, batch.positions[row]));
    }
  }
}

}  // namespace deepinfer
