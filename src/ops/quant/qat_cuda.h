// CUDA versions of the QAT round trips of qat.h (official numerics), bit-identical to the CPU
// functions for the same inputs. Device pointers; run on `stream`; graph capturable.
//
//  * fp8_roundtrip_rows_cuda: for each of n_rows rows (row_stride floats apart), the first n
//    values get fp8_roundtrip(row, n, block).
//  * hadamard_fp4_rows_cuda: for each of n_vectors contiguous vectors of n floats (n a power
//    of two, at most 4096): hadamard_transform then fp4_roundtrip(v, n, block).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

void fp8_roundtrip_rows_cuda(cudaStream_t stream, float* x, int64_t n_rows, int64_t row_stride,
                             int64_t n, int64_t block);
void hadamard_fp4_rows_cuda(cudaStream_t stream, float* x, int64_t n_vectors, int64_t n,
                            int64_t block);

}  // namespace deepinfer
