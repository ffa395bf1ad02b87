// rms_norm: one warp per row for n <= 1024 (V4's per-head and q/kv norms), one 256-thread
// block per row beyond (the 4096-wide hidden norms). Two passes over the row: the second
// reads hit L1/L2.
#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/rms_norm/rms_norm_cuda.h"

namespace deepinfer {
namespace {

struct Params {
  const float* x;
  const float* weight;
  int64_t n_rows, n, stride;
  float eps;
  float* y;
};

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ void normalise(const Params& p, const float* x, float* y, float inv,
                                          int64_t begin, int64_t step) {
  if (p.weight != nullptr) {
    for (int64_t i = begin; i < p.n; i += step) y[i] = p.weight[i] * (x[i] * inv);
  } else {
    for (int64_t i = begin; i < p.n; i += step) y[i] = x[i] * inv;
  }
}

__global__ void rms_norm_warp_kernel(Params p) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.n_rows) return;
  const float* x = p.x + row * p.stride;
  float sum = 0.0f;
  for (int64_t i = lane; i < p.n; i += 32) sum += x[i] * x[i];
  sum = warp_sum(sum);
  const float inv = rsqrtf(sum / static_cast<float>(p.n) + p.eps);
  normalise(p, x, p.y + row * p.stride, inv, lane, 32);
}

constexpr int kBlockThreads = 256;

__global__ void __launch_bounds__(kBlockThreads) rms_norm_block_kernel(Params p) {
  __shared__ float partial[kBlockThreads / 32];
  const int64_t row = blockIdx.x;
  const float* x = p.x + row * p.stride;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < p.n; i += kBlockThreads) sum += x[i] * x[i];
  sum = warp_sum(sum);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < kBlockThreads / 32 ? partial[threadIdx.x] : 0.0f;
    v = warp_sum(v);
    if (threadIdx.x == 0) partial[0] = v;
  }
  __syncthreads();
  const float inv = rsqrtf(partial[0] / static_cast<float>(p.n) + p.eps);
  normalise(p, x, p.y + row * p.stride, inv, threadIdx.x, kBlockThreads);
}

}  // namespace

void rms_norm_cuda(cudaStream_t stream, const float* x, const float* weight, int64_t n_rows,
                   int64_t n, int64_t stride, float eps, float* y) {
  CHECK(n > 0 && stride >= n) << "rms_norm: n " << n << ", stride " << stride;
  if (n_rows == 0) return;
  const Params p{x, weight, n_rows, n, stride, eps, y};
  if (n <= 1024) {
    const int64_t blocks = (n_rows * 32 + kBlockThreads - 1) / kBlockThreads;
    rms_norm_warp_kernel<<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(p);
  } else {
    CHECK_KIND(kUnsupported, n_rows < (int64_t{1} << 31)) << "rms_norm: too many rows";
    rms_norm_block_kernel<<<static_cast<unsigned>(n_rows), kBlockThreads, 0, stream>>>(p);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
