// ring_store_cuda: the chunk rows that must survive into a per-sequence ring buffer.
// Row r (src [n_rows, width]) at position p = positions[r] is written to
//   ring + (slot[r] * ring_len + p % ring_len) * width
// when p >= chunk_end[r] - ring_len (only the last ring_len positions of its chunk).
// Device pointers; runs on `stream`; graph capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

void ring_store_cuda(cudaStream_t stream, const float* src, int64_t n_rows, int64_t width,
                     const int32_t* positions, const int32_t* slot, const int32_t* chunk_end,
                     float* ring, int64_t ring_len);

}  // namespace deepinfer
