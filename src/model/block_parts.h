// Pieces of a transformer block shared by the backbone layers (Model) and the drafter
// stages (DsparkDrafter): the MoE of one layer and the attention projections. Internal to
// model/; plain fp32 host arrays.
#pragma once

#include <cstdint>
#include <vector>

#include "io/model_config.h"
#include "model/weights.h"
#include "ops/linear/linear.h"
#include "ops/rope/rope.h"

namespace deepinfer {

// MoE of one layer (MODEL_SPEC §A.8, §C.9): routing (hash layers: tid2eid[token]), each
// expert over its rows, then the shared expert; accumulation per row in expert-index order,
// then the shared expert, whatever the batch. `ids_out` [N, top_k] receives the chosen
// experts (may be null).
struct MoeShape {
  int64_t n_experts = 0, top_k = 0, dim = 0, inter = 0, shared_inter = 0;
  float limit = 0.0f;
  float routed_scale = 1.0f, inv_temp = 1.0f, sum_eps = 0.0f;
  bool normalize_always = true;  // normalise the chosen scores (V4); else ...
  bool norm_topk_prob = true;    // ... only when this and top_k > 1 (V4.1)
  bool hash = false;
};
MoeShape moe_shape(const ModelConfig& cfg, bool hash);
void moe_forward(const MoeWeights& w, const MoeShape& s, const float* x, int64_t n_rows,
                 const int32_t* tokens, float* out, GemmMode mode, int32_t* ids_out = nullptr);

// moe_forward's three stages, shared with expert parallelism (parallel/expert_parallel.h runs
// stage 2 on the ranks holding the experts; stages 1 and 3 stay on the row's home rank):
// 1. routing: ids / weights [N, top_k];
void moe_route(const MoeWeights& w, const MoeShape& s, const float* x, int64_t n_rows,
               const int32_t* tokens, int32_t* ids, float* weights, GemmMode mode);
// 2. the routed contributions: contrib [N * top_k, D], row r's weighted output of expert
//    ids[r, j] at r * top_k + j; each expert runs once over its rows in row order (w.experts);
void moe_local_contributions(const MoeWeights& w, const MoeShape& s, const float* x,
                             int64_t n_rows, const int32_t* ids, const float* weights,
                             float* contrib, GemmMode mode);
// 3. out [N, D] = per row, from zero, the contributions in ascending (expert id, j), then the
//    shared expert of x.
void moe_ordered_sum(const MoeWeights& w, const MoeShape& s, const float* x, int64_t n_rows,
                     const int32_t* ids, const float* contrib, float* out, GemmMode mode);

// q [N, H*d] = wq_b . q_norm(wq_a x) (per-head RMS norm when the family has it), q_r [N, R_q]
// (the indexer's input) and kv [N, d] = kv_norm(wkv x); no RoPE.
void attention_projections(const ModelConfig& cfg, const AttentionWeights& w, const float* x,
                           int64_t n_rows, GemmMode mode, std::vector<float>& q_r,
                           std::vector<float>& q, std::vector<float>& kv);

// DSpark taps (MODEL_SPEC §D.1): for each dspark target layer equal to `layer`, the mean over
// the hc streams of X [N, hc, D] into taps [N, n_taps, D] (tap t at taps[(row * n_taps + t) * D]).
// The forward calls it with the streams entering each layer (after Engram, `after_block` false)
// and with the streams after it (true); it records only at the site the family taps
// (ModelTraits::dspark_taps_block_output: V4-DSpark after the block, V4.1 entering it).
void record_dspark_taps(const ModelConfig& cfg, int64_t layer, bool after_block, const float* X,
                        int64_t n_rows, float* taps);

// out [N, D] = wo_b . concat_g(wo_a[g] . o_g) for o [N, H*d] (MODEL_SPEC §A.3).
void attention_output(const ModelConfig& cfg, const AttentionWeights& w, const float* o,
                      int64_t n_rows, GemmMode mode, float* out);

}  // namespace deepinfer
