// Small device kernels of CudaRunner's step path (src/runtime/runner_kernels.cu): input tokens
// read from an earlier step's samples on the device, and EOS masking; the greedy arg-max is
// ops/sampling's argmax_rows_cuda (included here). Device pointers; each runs on `s`, never
// allocates or synchronises; graph capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/sampling/sampling_cuda.h"

namespace deepinfer {

// For i < n: tokens[i] < 0 is a sample reference (runtime/model_runner.h, sample_ref) and
// becomes samples[-1 - tokens[i]]; other tokens are left as they are.
void resolve_sample_refs_cuda(cudaStream_t s, int32_t* tokens, int64_t n, const int32_t* samples);

// base[offsets[i]] = value for i < n (EOS masking of sampled rows).
void fill_at_cuda(cudaStream_t s, float* base, const int64_t* offsets, int64_t n, float value);

}  // namespace deepinfer
