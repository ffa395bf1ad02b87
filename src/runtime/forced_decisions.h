// Replay of recorded discrete choices on the GPU (test instrumentation; model/decision_trace.h,
// GpuModel::force_decisions). Tables are indexed by position: row p of a table holds the
// choices of position p. Device pointers; each runs on `s`, never allocates or synchronises;
// graph capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

// Routed experts replayed from table [max_positions, k] (ascending ids, as route_cuda
// selects them): for row r < n_rows with p = positions[r],
//   ids[r, j] = table[p, j];  weights[r, j] = s_j / sum_j' s_j' * routed_scale,
// s_j = sqrt(softplus(logits[r, ids[r, j]])): route_cuda's weights for the same ids. A
// negative id (position not recorded) stays -1 with weight 0 (no expert).
void replay_routes_cuda(cudaStream_t s, const int32_t* table, const int32_t* positions,
                        int64_t n_rows, const float* logits, int64_t n_experts, int64_t k,
                        float routed_scale, int32_t* ids, float* weights);

// Indexer picks replayed from table [max_positions, k] (valid picks first, ascending, then
// -1): selected[r, j] = table[p, j] for j < k, n_selected[r] = the number of valid picks.
void replay_picks_cuda(cudaStream_t s, const int32_t* table, const int32_t* positions,
                       int64_t n_rows, int64_t k, int32_t* selected, int32_t* n_selected);

}  // namespace deepinfer
