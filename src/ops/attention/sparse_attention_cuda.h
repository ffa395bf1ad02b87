// CUDA entry of sparse attention with a sink (contract of the math in sparse_attention.h):
// for every query row and head, one softmax over the row's sliding-window keys and its
// compressed keys, plus the per-head sink logit. fp32 throughout (online softmax per warp,
// merged in a fixed order), one block per (head, row); serves decode (one row per
// sequence, batched) and prefill (many rows) alike.
//
// Where a row's keys live (all device pointers; rows index the batch):
//  * window: positions p in [max(0, pos - window + 1), pos], pos = positions[r]. A position
//    of the current chunk (p >= chunk_start[r]) is row chunk_row0[r] + p - chunk_start[r] of
//    chunk_kv [n_rows, head_dim]; an older one is slot p % window of the sequence's ring,
//    ring + (slot[r] * window + p % window) * head_dim.
//  * compressed: entries + (slot[r] * max_entries + e) * head_dim for
//      e = selected[r * max_selected + j], j < n_selected[r]   when selected != nullptr
//      e in [0, (pos + 1) / ratio)                             when selected == nullptr
//    (ratio 0 or entries == nullptr: no compressed keys).
// q, out [n_rows, n_heads, head_dim] (out may not alias q); sinks [n_heads].
// head_dim must be a multiple of 32 and at most 512. Runs on `stream`; never allocates or
// synchronises; graph capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

struct SparseAttentionParams {
  const float* q = nullptr;
  float* out = nullptr;
  const float* sinks = nullptr;
  int64_t n_rows = 0, n_heads = 0, head_dim = 0;
  float scale = 1.0f;
  // Per-row metadata [n_rows], int32.
  const int32_t* positions = nullptr;
  const int32_t* slot = nullptr;
  const int32_t* chunk_start = nullptr;
  const int32_t* chunk_row0 = nullptr;
  // Window keys.
  const float* chunk_kv = nullptr;
  const float* ring = nullptr;
  int64_t window = 0;
  // Compressed keys.
  const float* entries = nullptr;
  int64_t max_entries = 0;
  int64_t ratio = 0;
  const int32_t* selected = nullptr;
  const int32_t* n_selected = nullptr;
  int64_t max_selected = 0;
};

void sparse_attention_cuda(cudaStream_t stream, const SparseAttentionParams& p);

}  // namespace deepinfer
