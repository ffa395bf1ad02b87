// Device helpers of GpuModel (contracts in gpu_kernels.h).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "runtime/gpu_kernels.h"

namespace deepinfer {
namespace {

__device__ __forceinline__ uint32_t mix_hash(uint64_t i, uint64_t seed) {
  uint64_t x = i * 0x9e3779b97f4a7c15ull + seed * 0xd1b54a32d192ed03ull;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 32;
  return static_cast<uint32_t>(x);
}

// Uniform in [-1, 1).
__device__ __forceinline__ float unit(uint64_t i, uint64_t seed) {
  return (mix_hash(i, seed) >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void fill_uniform_kernel(float* p, int64_t n, float mean, float half_width,
                                    uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = mean + half_width * unit(i, seed);
}

// e4m3 of a uniform value in [-448, 448): codes whose dequantised values (times the block
// scale) are roughly uniform.
__global__ void fill_e4m3_kernel(uint8_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const __nv_fp8_e4m3 v(448.0f * unit(i, seed));
    p[i] = v.__x;
  }
}

__global__ void fill_const_kernel(float* p, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = value;
}

__global__ void segment_scales_kernel(const float* in, int64_t n_rows, int64_t n_kb,
                                      const int32_t* row0, const int32_t* m, float* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_rows * n_kb;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n_kb, kb = i % n_kb;
    const int64_t mr = m[r];
    if (mr <= 0) continue;
    const int64_t r0 = row0[r];
    out[r0 * n_kb + kb * mr + (r - r0)] = in[i];
  }
}

__global__ void fill_bf16_kernel(__nv_bfloat16* p, int64_t n, float half_width, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(half_width * unit(i, seed));
}

// Four independent 16-byte loads in flight per thread (streaming loads / stores).
__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (i + j * stride < n) v[j] = __ldcs(src + i + j * stride);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (i + j * stride < n) __stcs(dst + i + j * stride, v[j]);
  }
}

// One warp per (column, row); lanes take k = lane, lane + 32, ... in order.
__global__ void gemm_f32_rowwise_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                        int64_t m, int64_t n, int64_t k, float* __restrict__ y) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 4 + warp;
  const int64_t row = blockIdx.y;
  if (col >= n || row >= m) return;
  const float* xr = x + row * k;
  const float* wr = w + col * k;
  float acc = 0.0f;
  for (int64_t i = lane; i < k; i += 32) acc = fmaf(__ldg(xr + i), __ldg(wr + i), acc);
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if (lane == 0) y[row * n + col] = acc;
}

constexpr int kBlocks = 2048, kThreads = 256;

int grid_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>(kBlocks, (n + kThreads - 1) / kThreads + 1));
}

}  // namespace

void fill_uniform_f32(cudaStream_t s, float* p, int64_t n, float mean, float std, uint64_t seed) {
  if (n <= 0) return;
  fill_uniform_kernel<<<grid_for(n), kThreads, 0, s>>>(p, n, mean, std * 1.7320508f, seed);
  CUDA_CHECK_LAUNCH();
}

void fill_random_e4m3(cudaStream_t s, uint8_t* p, int64_t n, uint64_t seed) {
  if (n <= 0) return;
  fill_e4m3_kernel<<<grid_for(n), kThreads, 0, s>>>(p, n, seed);
  CUDA_CHECK_LAUNCH();
}

void fill_const_f32(cudaStream_t s, float* p, int64_t n, float value) {
  if (n <= 0) return;
  fill_const_kernel<<<grid_for(n), kThreads, 0, s>>>(p, n, value);
  CUDA_CHECK_LAUNCH();
}

void segment_scales(cudaStream_t s, const float* in, int64_t n_rows, int64_t n_kb,
                    const int32_t* row0, const int32_t* m, float* out) {
  if (n_rows <= 0) return;
  segment_scales_kernel<<<grid_for(n_rows * n_kb), kThreads, 0, s>>>(in, n_rows, n_kb, row0, m,
                                                                     out);
  CUDA_CHECK_LAUNCH();
}

void fill_uniform_bf16(cudaStream_t s, void* p, int64_t n, float half_width, uint64_t seed) {
  if (n <= 0) return;
  fill_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(p), n, half_width, seed);
  CUDA_CHECK_LAUNCH();
}

void gemm_f32_rowwise_cuda(cudaStream_t s, const float* x, const float* w, int64_t m, int64_t n,
                           int64_t k, float* y) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    CUDA_CHECK(cudaMemsetAsync(y, 0, m * n * sizeof(float), s));
    return;
  }
  ICHECK(m < 65536) << "gemm_f32_rowwise: M=" << m;
  const dim3 grid(static_cast<unsigned>((n + 3) / 4), static_cast<unsigned>(m));
  gemm_f32_rowwise_kernel<<<grid, 128, 0, s>>>(x, w, m, n, k, y);
  CUDA_CHECK_LAUNCH();
}

void copy_uint4(cudaStream_t s, const void* src, void* dst, int64_t bytes) {
  static int sms = 0;  // queried on the first (uncaptured) call
  if (sms == 0) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  }
  copy_kernel<<<sms * 8, 512, 0, s>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), bytes / 16);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
