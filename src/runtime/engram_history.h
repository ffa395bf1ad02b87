// The n-gram history GpuEngram reads (runtime/gpu_engram.h: history [n_rows, max_ngram], row
// r's token and the max_ngram - 1 before it in its own sequence, -1 before the sequence
// start), built on the device from the forward's resolved tokens (sample references
// included, so the host never needs the tokens of an overlapped decode step) and a
// per-sequence ring of recent raw token ids by position: ring[slot * ring_len + p % ring_len]
// holds position p. ring_len = max_ngram - 1 + max_rollback (at least 1), so a rollback of
// up to max_rollback positions still finds every token the next chunk's n-grams reach back
// to, as the CPU keeps SequenceState::recent_tokens.
//  * engram_history_cuda: history[r * K + k] = token at position positions[r] - k: from
//    tokens (the chunk's rows, chunk_row0 / chunk_start) when inside the chunk, from the
//    ring before it, -1 below 0.
//  * engram_ring_store_cuda: the chunk's last ring_len tokens into the ring (after the
//    history of the same forward is built; rows at positions < chunk_end - ring_len write
//    nothing, so no two rows of a chunk write one slot).
// Per-row metadata int32 [n_rows] as in sparse_attention_cuda.h. Device pointers; run on
// `stream`; launch sizes from n_rows only; graph capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

struct EngramHistoryParams {
  int64_t n_rows = 0, max_ngram = 0, ring_len = 0;
  const int32_t* tokens = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* slot = nullptr;
  const int32_t* chunk_start = nullptr;
  const int32_t* chunk_row0 = nullptr;
  const int32_t* chunk_end = nullptr;
  int32_t* ring = nullptr;
  int32_t* history = nullptr;
};

void engram_history_cuda(cudaStream_t stream, const EngramHistoryParams& p);
void engram_ring_store_cuda(cudaStream_t stream, const EngramHistoryParams& p);

}  // namespace deepinfer
