// CUDA embedding lookup that also fans the row out to the n_copies mHC streams:
//   out[r, j, :] = table[tokens[r], :]   for r < n_rows, j < n_copies
// table [V, dim] fp32, tokens int32 [n_rows] (validated by the caller: 0 <= id < V),
// out [n_rows, n_copies, dim]. Device pointers; runs on `stream`; graph capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

void embedding_cuda(cudaStream_t stream, const float* table, const int32_t* tokens, int64_t n_rows,
                    int64_t dim, int64_t n_copies, float* out);

}  // namespace deepinfer
