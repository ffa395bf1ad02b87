// Device kernels of the MTP-1 drafter (mtp_kernels.h).
#include <cuda_bf16.h>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "runtime/mtp_kernels.h"

namespace deepinfer {
namespace {

unsigned blocks_for(int64_t total) {
  const int64_t blocks = (total + 255) / 256;
  CHECK_KIND(kUnsupported, blocks < (int64_t{1} << 31)) << "mtp kernels: problem too large";
  return static_cast<unsigned>(blocks);
}

__global__ void prev_streams_kernel(const float* X, const float* ring, int64_t ring_len, int64_t width,
                                    const int32_t* positions, const int32_t* slot,
                                    const int32_t* chunk_start, const int32_t* chunk_row0,
                                    int64_t n_rows, float* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * width) return;
  const int64_t r = idx / width, c = idx % width;
  const int64_t t = static_cast<int64_t>(positions[r]) - 1, cs = chunk_start[r];
  float v = 0.0f;
  if (t >= cs) {
    v = X[(chunk_row0[r] + t - cs) * width + c];
  } else if (t >= 0) {
    v = ring[(static_cast<int64_t>(slot[r]) * ring_len + t % ring_len) * width + c];
  }
  out[idx] = v;
}

__global__ void input_add_kernel(const float* e, const float* h, int64_t n_rows, int64_t n_hc,
                                 int64_t dim, float* Z) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * n_hc * dim) return;
  const int64_t r = idx / (n_hc * dim), c = idx % dim;
  Z[idx] = e[r * dim + c] + h[idx];
}

__global__ void key_store_kernel(const float* kv, int64_t n_rows, int64_t d, int64_t rope_dim,
                                 const int32_t* positions, const int32_t* slot,
                                 const int32_t* chunk_end, int64_t shift, bool round_rope,
                                 float* ring, int64_t ring_len) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * d) return;
  const int64_t r = idx / d, c = idx % d;
  const int64_t t = static_cast<int64_t>(positions[r]) - shift;
  const int64_t last = static_cast<int64_t>(chunk_end[r]) - 1 - shift;
  if (t < 0 || t <= last - ring_len) return;
  float v = kv[idx];
  if (round_rope && c >= d - rope_dim) v = __bfloat162float(__float2bfloat16_rn(v));
  ring[(static_cast<int64_t>(slot[r]) * ring_len + t % ring_len) * d + c] = v;
}

__global__ void shift_positions_kernel(const int32_t* positions, int64_t n_rows, int32_t shift, int32_t* out) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < n_rows) out[r] = max(positions[r] - shift, 0);
}

__global__ void top_probability_kernel(const float* logits, int64_t vocab, float* out) {
  __shared__ float red[256];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float m = -INFINITY;
  for (int64_t t = threadIdx.x; t < vocab; t += blockDim.x) m = fmaxf(m, row[t]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + w]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.0f;
  for (int64_t t = threadIdx.x; t < vocab; t += blockDim.x) sum += expf(row[t] - m);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = 1.0f / red[0];
}

}  // namespace

void mtp_top_probability_cuda(cudaStream_t s, const float* logits, int64_t n_rows, int64_t vocab, float* out) {
  if (n_rows == 0) return;
  CHECK_KIND(kUnsupported, n_rows < (int64_t{1} << 31)) << "mtp kernels: problem too large";
  top_probability_kernel<<<static_cast<unsigned>(n_rows), 256, 0, s>>>(logits, vocab, out);
  CUDA_CHECK_LAUNCH();
}

void mtp_shift_positions_cuda(cudaStream_t s, const int32_t* positions, int64_t n_rows, int32_t shift,
                              int32_t* out) {
  if (n_rows == 0) return;
  shift_positions_kernel<<<blocks_for(n_rows), 256, 0, s>>>(positions, n_rows, shift, out);
  CUDA_CHECK_LAUNCH();
}

void mtp_prev_streams_cuda(cudaStream_t s, const float* X, const float* ring, int64_t ring_len,
                           int64_t width, const int32_t* positions, const int32_t* slot,
                           const int32_t* chunk_start, const int32_t* chunk_row0, int64_t n_rows,
                           float* out) {
  if (n_rows * width == 0) return;
  prev_streams_kernel<<<blocks_for(n_rows * width), 256, 0, s>>>(X, ring, ring_len, width, positions, slot,
                                                                  chunk_start, chunk_row0, n_rows, out);
  CUDA_CHECK_LAUNCH();
}

void mtp_input_add_cuda(cudaStream_t s, const float* e, const float* h, int64_t n_rows, int64_t n_hc,
                        int64_t dim, float* Z) {
  if (n_rows * n_hc * dim == 0) return;
  input_add_kernel<<<blocks_for(n_rows * n_hc * dim), 256, 0, s>>>(e, h, n_rows, n_hc, dim, Z);
  CUDA_CHECK_LAUNCH();
}

void mtp_key_store_cuda(cudaStream_t s, const float* kv, int64_t n_rows, int64_t d, int64_t rope_dim,
                        const int32_t* positions, const int32_t* slot, const int32_t* chunk_end,
                        int64_t shift, bool round_rope_bf16, float* ring, int64_t ring_len) {
  if (n_rows * d == 0) return;
  key_store_kernel<<<blocks_for(n_rows * d), 256, 0, s>>>(kv, n_rows, d, rope_dim, positions, slot, chunk_end,
                                                           shift, round_rope_bf16, ring, ring_len);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
