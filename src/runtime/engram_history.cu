// engram_history.h: one thread per (row, k) for the history, one per row for the ring store.
#include "base/error.h"
#include "cuda/cuda_check.h"
#include "runtime/engram_history.h"

namespace deepinfer {
namespace {

__global__ void history_kernel(EngramHistoryParams p) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= p.n_rows * p.max_ngram) return;
  const int64_t r = idx / p.max_ngram, k = idx % p.max_ngram;
  const int64_t pos = static_cast<int64_t>(p.positions[r]) - k;
  const int64_t start = p.chunk_start[r];
  int32_t t = -1;
  if (pos >= start) {
    t = p.tokens[p.chunk_row0[r] + pos - start];
  } else if (pos >= 0) {
    t = p.ring[static_cast<int64_t>(p.slot[r]) * p.ring_len + pos % p.ring_len];
  }
  p.history[idx] = t;
}

__global__ void ring_store_kernel(EngramHistoryParams p) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= p.n_rows) return;
  const int64_t pos = p.positions[r];
  if (pos < static_cast<int64_t>(p.chunk_end[r]) - p.ring_len) return;
  p.ring[static_cast<int64_t>(p.slot[r]) * p.ring_len + pos % p.ring_len] = p.tokens[r];
}

unsigned grid(int64_t n) {
  CHECK_KIND(kUnsupported, (n + 127) / 128 < (int64_t{1} << 31)) << "engram history: too many rows";
  return static_cast<unsigned>((n + 127) / 128);
}

}  // namespace

void engram_history_cuda(cudaStream_t stream, const EngramHistoryParams& p) {
  CHECK(p.max_ngram >= 1 && p.ring_len >= 1) << "engram history: max_ngram " << p.max_ngram
                                              << ", ring_len " << p.ring_len;
  if (p.n_rows == 0) return;
  history_kernel<<<grid(p.n_rows * p.max_ngram), 128, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void engram_ring_store_cuda(cudaStream_t stream, const EngramHistoryParams& p) {
  CHECK(p.ring_len >= 1) << "engram history: ring_len " << p.ring_len;
  if (p.n_rows == 0) return;
  ring_store_kernel<<<grid(p.n_rows), 128, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
