// CUDA entries of the lightning indexer (math in indexer.h).
//
// indexer_scores_cuda: for every query row r and visible entry s < n_keys(r) = (pos_r + 1) /
// ratio,
//   scores[r * score_stride + s] = sum_h (g[r, h] * head_scale) * (ReLU(q[r, h] . key_s) * scale)
// with key_s = keys + (slot[r] * max_entries + s) * head_dim (the sequence's compressed indexer
// entries). q [n_rows, n_heads, head_dim], g [n_rows, n_heads], positions/slot int32 [n_rows].
// Entries s >= n_keys(r) are left untouched. fp32.
//
// topk_rows_cuda: for every row, the indices of the k largest of scores[r * score_stride +
// s], s < n_keys(r) (ties: lower index first, as topk_indices), written ascending by index
// to selected[r * k + j], j < min(k, n_keys(r)), with n_selected[r] = min(k, n_keys(r)).
// Exact radix select on the fp32 bit patterns (4 passes of 8 bits) then an ordered
// collection pass, one block per row; any n_keys, k <= n_keys or not.
//
// Device pointers; run on `stream`; never allocate or synchronise; graph capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

struct IndexerScoresParams {
  const float* q = nullptr;
  const float* g = nullptr;
  int64_t n_rows = 0, n_heads = 0, head_dim = 0;
  float head_scale = 1.0f, scale = 1.0f;
  const int32_t* positions = nullptr;
  const int32_t* slot = nullptr;
  int64_t ratio = 4;
  const float* keys = nullptr;
  int64_t max_entries = 0;
  float* scores = nullptr;
  int64_t score_stride = 0;
};

void indexer_scores_cuda(cudaStream_t stream, const IndexerScoresParams& p);

// n_keys(r) = (positions[r] + 1) / ratio when n_keys == nullptr, else n_keys[r].
void topk_rows_cuda(cudaStream_t stream, const float* scores, int64_t n_rows, int64_t score_stride,
                    const int32_t* positions, int64_t ratio, const int32_t* n_keys, int64_t k,
                    int32_t* selected, int32_t* n_selected);

}  // namespace deepinfer
