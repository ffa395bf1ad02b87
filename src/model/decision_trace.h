// DecisionTrace: the discrete choices of a forward over ONE sequence, by layer and position.
//  * experts: the routed experts of every score-routed MoE layer (the top-k of score + bias,
//    ascending expert id, as route_ref returns them); hash layers are not recorded (their
//    experts are a function of the token id, which no numeric noise can change).
//  * picks: the compressed entries the lightning indexer selects on every ratio-4 layer
//    (ascending entry index, min(index_topk, visible entries) of them, the rest of the row -1);
//    V4.1: every layer that scores (its LayerPlan), inside its candidates.
// The CPU Model records them (Model::set_decision_trace) and GpuModel replays them
// (GpuModel::force_decisions), so that a test can compare two forwards' continuous math with
// the discrete choices fixed to one side's. A near-tie in a top-k (an expert or an entry
// whose score is within storage-rounding noise of the k-th) can otherwise swap one member,
// which changes that position's output by far more than any numeric bound.
// Test instrumentation: single-threaded setup; the CPU model writes distinct positions from
// its row threads into the preallocated rows.
#pragma once

#include <cstdint>
#include <vector>

#include "io/config_parser.h"
#include "io/model_config.h"

namespace deepinfer {

struct DecisionTrace {
  int64_t top_k = 0;          // experts per token
  int64_t index_topk = 0;     // indexer picks per query
  int64_t max_positions = 0;  // rows per layer (positions 0 .. max_positions - 1)
  // [num_layers], each [max_positions * top_k] / [max_positions * index_topk] int32, -1 where
  // nothing was recorded; empty for a layer without that choice.
  std::vector<std::vector<int32_t>> experts, picks;

  DecisionTrace() = default;
  DecisionTrace(const ModelConfig& config, int64_t max_positions)
      : top_k(config.n_experts_per_tok), index_topk(config.index_topk), max_positions(max_positions),
        experts(config.num_layers), picks(config.num_layers) {
    ModelConfig cfg = config;
    complete_model_config(&cfg);  // the plan of a config built in code
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      if (!cfg.is_hash_layer(l)) experts[l].assign(max_positions * top_k, -1);
      if (cfg.plan[l].scores()) picks[l].assign(max_positions * index_topk, -1);
    }
  }
  int32_t* experts_at(int64_t layer, int64_t pos) {
    return experts[layer].empty() ? nullptr : experts[layer].data() + pos * top_k;
  }
  int32_t* picks_at(int64_t layer, int64_t pos) {
    return picks[layer].empty() ? nullptr : picks[layer].data() + pos * index_topk;
  }
};

}  // namespace deepinfer
