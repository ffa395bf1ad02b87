// Top-k selection of compressed entries by an index source (MODEL_SPEC §A.6, §C.7):
// index queries from q_r (RoPE; official: Hadamard for V4, then FP4), head weights from x,
// scores I[t,s] = sum_h g_h ReLU(q_h . k_s) over the visible index keys of the layer's
// key owner, optionally restricted to the candidate blocks of an earlier layer, and the
// top min(index_topk, visible) entries. The candidate source (V4.1 layer 20) also
// publishes its candidate blocks from its unrestricted scores: the newest block always,
// then the best blocks by max score, min(candidate_topk_blocks, blocks) of them.
#include <cmath>

#include "base/parallel.h"
#include "model/model_batch.h"
#include "ops/indexer/indexer.h"
#include "ops/quant/qat.h"

namespace deepinfer {
namespace {

// Boolean mask over the n entries: the blocks (of `block` entries) picked by max score,
// the one holding the newest entry first.
std::vector<uint8_t> candidate_mask(const float* scores, int64_t n, int64_t block, int64_t n_pick) {
  std::vector<uint8_t> mask(n, 0);
  if (n == 0) return mask;
  const int64_t n_blocks = (n + block - 1) / block;
  std::vector<float> block_max(n_blocks, -INFINITY);
  for (int64_t s = 0; s < n; ++s) block_max[s / block] = std::max(block_max[s / block], scores[s]);
  block_max[(n - 1) / block] = INFINITY;
  for (int64_t b : topk_indices(block_max.data(), n_blocks, n_pick)) {
    if (block_max[b] == -INFINITY) continue;
    for (int64_t s = b * block; s < std::min(n, (b + 1) * block); ++s) mask[s] = 1;
  }
  return mask;
}

}  // namespace

void Model::select_entries(int64_t layer, Batch& batch, const float* x, const float* q_r) const {
  const ModelConfig& cfg = config_;
  const LayerPlan& plan = cfg.plan[layer];
  const IndexerWeights& w = weights_.layers[layer].attn.indexer;
  const int64_t N = batch.n_rows(), D = cfg.hidden_size, Rq = cfg.q_lora_rank;
  const int64_t HI = cfg.index_n_heads, dI = cfg.index_head_dim;
  const bool official = options_.numerics == Numerics::kOfficial;

  std::vector<float> qi(N * HI * dI), gi(N * HI);
  linear_ref(q_r, N, Rq, w.wq_b.f32(), HI * dI, qi.data(), gemm_mode_);
  linear_ref(x, N, D, w.weights_proj.f32(), HI, gi.data(), gemm_mode_);
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(HI));
  for (int64_t row = 0; row < N; ++row) {
    rope_compress_.apply_heads(&qi[row * HI * dI], HI, dI, batch.positions[row]);
    for (int64_t h = 0; h < HI; ++h) {
      if (official) {
        if (cfg.traits.indexer_hadamard) hadamard_transform(&qi[(row * HI + h) * dI], dI);
        fp4_roundtrip(&qi[(row * HI + h) * dI], dI, 32);
      }
      gi[row * HI + h] *= head_scale;
    }
  }

  Batch::Selection& sel = batch.selections[layer];
  sel.picks.assign(N, {});
  if (plan.candidate_source) sel.candidates.assign(N, {});
  const Batch::Selection* restrict_to =
      plan.candidates_from >= 0 ? &batch.selections[plan.candidates_from] : nullptr;
  const float index_scale = 1.0f / std::sqrt(static_cast<float>(dI));
  parallel_for(N, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t row = begin; row < end; ++row) {
      const Batch::Segment& seg = batch.segments[batch.segment_of_row[row]];
      const SequenceLayerState& owner = seg.state->layers[plan.index_keys_from];
      const int64_t pos = batch.positions[row], n_visible = (pos + 1) / plan.ratio;
      scores.resize(n_visible);
      indexer_scores_ref(&qi[row * HI * dI], &gi[row * HI], HI, dI, owner.index_keys.data(),
                         n_visible, index_scale, scores.data());
      if (plan.candidate_source) {
        sel.candidates[row] = candidate_mask(scores.data(), n_visible, cfg.candidate_block_size,
                                             cfg.candidate_topk_blocks);
      }
      if (restrict_to != nullptr) {
        const std::vector<uint8_t>& mask = restrict_to->candidates[row];
        ICHECK(static_cast<int64_t>(mask.size()) == n_visible);
        for (int64_t s = 0; s < n_visible; ++s) {
          if (!mask[s]) scores[s] = -INFINITY;
        }
      }
      std::vector<int64_t>& picks = sel.picks[row];
      for (int64_t e : topk_indices(scores.data(), n_visible, cfg.index_topk)) {
        if (scores[e] != -INFINITY) picks.push_back(e);
      }
      if (trace_ != nullptr) {  // one sequence: each row writes its own position
        if (int32_t* rec = trace_->picks_at(layer, pos)) {
          for (size_t j = 0; j < picks.size(); ++j) rec[j] = static_cast<int32_t>(picks[j]);
        }
      }
    }
  });
}

}  // namespace deepinfer
