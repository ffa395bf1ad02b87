// CUDA FP4 round trip without a rotation (V4.1 indexer queries, MODEL_SPEC §C.7: no
// Hadamard): for each of n_vectors contiguous vectors of n floats, fp4_roundtrip(v, n, block)
// (e2m1 values, power-of-two scales; qat.h), bit-identical to the CPU function. Device
// pointer; runs on `stream`; graph capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

void fp4_roundtrip_rows_cuda(cudaStream_t stream, float* x, int64_t n_vectors, int64_t n,
                             int64_t block);

}  // namespace deepinfer
