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

}  // namespace deepinfer
