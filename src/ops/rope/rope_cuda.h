// CUDA entry of partial interleaved RoPE (contract in rope.h). x [n_tokens, n_heads, head_dim]
// fp32, rotated in place on the trailing rope_dim values of each head by the token's
// position (positions: int32 [n_tokens]) or its negative when `inverse`. inv_freq
// [rope_dim / 2] fp32 is RopeTable::inv_freq() copied to the device once at load; angles are
// float(pos) * inv_freq[i] in fp32 as in the reference, cos/sin with CUDA's accurate
// cosf/sinf (within 2 ulp of the host's). Device pointers; runs on `stream`; graph capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

void rope_cuda(cudaStream_t stream, float* x, const int32_t* positions, int64_t n_tokens,
               int64_t n_heads, int64_t head_dim, int64_t rope_dim, const float* inv_freq,
               bool inverse = false);

}  // namespace deepinfer
