// mask_padding_slots_cuda: routing ids of rows at or past the forward's real row count are
// set to -1 (moe_experts_fp8_cuda gives such a slot no expert row and adds nothing for it),
// so the padding rows of a CUDA-graph bucket cost no expert work and do not count as expert
// use. ids [n_rows, top_k] int32; *n_real is read on the device (graph capturable: the count
// changes between replays, the launch does not). Runs on `stream`; never allocates or syncs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

void mask_padding_slots_cuda(cudaStream_t stream, int32_t* ids, int64_t n_rows, int64_t top_k,
                             const int32_t* n_real);

}  // namespace deepinfer
