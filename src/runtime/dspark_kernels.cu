// Device kernels of the DSpark drafter (dspark_kernels.h).
#include <cuda_bf16.h>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "runtime/dspark_kernels.h"

namespace deepinfer {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

unsigned blocks_for(int64_t total, int64_t per_block) {
  const int64_t blocks = (total + per_block - 1) / per_block;
  CHECK_KIND(kUnsupported, blocks < (int64_t{1} << 31)) << "dspark kernels: problem too large";
  return static_cast<unsigned>(blocks);
}

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void tap_mean_kernel(const float* X, int64_t n_rows, int64_t n_hc, int64_t dim, int64_t n_taps,
                                int64_t tap, float* taps) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * dim) return;
  const int64_t r = idx / dim, i = idx % dim;
  float sum = 0.0f;
  for (int64_t j = 0; j < n_hc; ++j) sum += X[(r * n_hc + j) * dim + i];
  taps[(r * n_taps + tap) * dim + i] = sum / static_cast<float>(n_hc);
}

__global__ void round_rope_bf16_kernel(float* x, int64_t n_rows, int64_t d, int64_t rope_dim) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * rope_dim) return;
  float* v = x + (idx / rope_dim) * d + d - rope_dim + idx % rope_dim;
  *v = __bfloat162float(__float2bfloat16_rn(*v));
}

// One warp per token v: the rank-long dot of w2[v] with every row's e.
__global__ void markov_add_kernel(const float* w2, const float* e, int64_t n_rows, int64_t vocab, int64_t rank,
                                  float* logits) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (v >= vocab) return;
  const float* w = w2 + v * rank;
  for (int64_t b = 0; b < n_rows; ++b) {
    float part = 0.0f;
    for (int64_t k = lane; k < rank; k += 32) part += w[k] * e[b * rank + k];
    part = warp_sum(part);
    if (lane == 0) logits[b * vocab + v] += part;
  }
}

// One warp per row.
__global__ void confidence_kernel(const float* h, const float* e, const float* w, int64_t n_rows, int64_t dim,
                                  int64_t rank, float* out) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= n_rows) return;
  float part = 0.0f;
  for (int64_t i = lane; i < dim; i += 32) part += w[i] * h[r * dim + i];
  for (int64_t k = lane; k < rank; k += 32) part += w[dim + k] * e[r * rank + k];
  part = warp_sum(part);
  if (lane == 0) out[r] = part;
}

}  // namespace

void dspark_tap_mean_cuda(cudaStream_t s, const float* X, int64_t n_rows, int64_t n_hc, int64_t dim,
                          int64_t n_taps, int64_t tap, float* taps) {
  if (n_rows == 0) return;
  tap_mean_kernel<<<blocks_for(n_rows * dim, kThreads), kThreads, 0, s>>>(X, n_rows, n_hc, dim, n_taps, tap, taps);
  CUDA_CHECK(cudaGetLastError());
}

void dspark_round_rope_bf16_cuda(cudaStream_t s, float* x, int64_t n_rows, int64_t d, int64_t rope_dim) {
  if (n_rows == 0 || rope_dim == 0) return;
  round_rope_bf16_kernel<<<blocks_for(n_rows * rope_dim, kThreads), kThreads, 0, s>>>(x, n_rows, d, rope_dim);
  CUDA_CHECK(cudaGetLastError());
}

void dspark_markov_add_cuda(cudaStream_t s, const float* w2, const float* e, int64_t n_rows, int64_t vocab,
                            int64_t rank, float* logits) {
  if (n_rows == 0) return;
  markov_add_kernel<<<blocks_for(vocab, kWarps), kThreads, 0, s>>>(w2, e, n_rows, vocab, rank, logits);
  CUDA_CHECK(cudaGetLastError());
}

void dspark_confidence_cuda(cudaStream_t s, const float* h, const float* e, const float* w, int64_t n_rows,
                            int64_t dim, int64_t rank, float* out) {
  if (n_rows == 0) return;
  confidence_kernel<<<blocks_for(n_rows, kWarps), kThreads, 0, s>>>(h, e, w, n_rows, dim, rank, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer
