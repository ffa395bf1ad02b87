#include "runtime/runner_kernels.h"

#include "cuda/cuda_check.h"

namespace deepinfer {
namespace {

constexpr int kThreads = 256;

__global__ void resolve_kernel(int32_t* tokens, int64_t n, const int32_t* samples) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n && tokens[i] < 0) tokens[i] = samples[-1 - static_cast<int64_t>(tokens[i])];
}

__global__ void fill_at_kernel(float* base, const int64_t* offsets, int64_t n, float value) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) base[offsets[i]] = value;
}

// One block per row: each thread keeps its strided maximum (first index on ties), then a
// tree keeps the larger value, the lower id on ties.
__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float* logits, int64_t vocab, int32_t* tokens) {
  __shared__ float s_v[kThreads];
  __shared__ int s_i[kThreads];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float best = -INFINITY;
  int best_i = 0x7fffffff;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = row[i];
    if (best_i == 0x7fffffff || v > best) {
      best = v;
      best_i = static_cast<int>(i);
    }
  }
  s_v[threadIdx.x] = best;
  s_i[threadIdx.x] = best_i;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      const float ov = s_v[threadIdx.x + stride];
      const int oi = s_i[threadIdx.x + stride];
      if (oi != 0x7fffffff && (s_i[threadIdx.x] == 0x7fffffff || ov > s_v[threadIdx.x] ||
                               (ov == s_v[threadIdx.x] && oi < s_i[threadIdx.x]))) {
        s_v[threadIdx.x] = ov;
        s_i[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) tokens[blockIdx.x] = s_i[0];
}

}  // namespace

void resolve_sample_refs_cuda(cudaStream_t s, int32_t* tokens, int64_t n, const int32_t* samples) {
  if (n <= 0) return;
  resolve_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(tokens, n,
                                                                                           samples);
  CUDA_CHECK_LAUNCH();
}

void fill_at_cuda(cudaStream_t s, float* base, const int64_t* offsets, int64_t n, float value) {
  if (n <= 0) return;
  fill_at_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(base, offsets,
                                                                                          n, value);
  CUDA_CHECK_LAUNCH();
}

void argmax_rows_cuda(cudaStream_t s, const float* logits, int64_t n_rows, int64_t vocab,
                      int32_t* tokens) {
  if (n_rows <= 0) return;
  argmax_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, s>>>(logits, vocab, tokens);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
