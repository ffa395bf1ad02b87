// Sparse attention with sink: one block of kWarps warps per (head, row). Each warp walks
// keys j = warp, warp + kWarps, ... keeping an online softmax (max, sum, accumulator of
// head_dim / 32 values per lane); the warps' states are merged in warp order together
// with the sink.
#include <cmath>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/attention/sparse_attention_cuda.h"

namespace deepinfer {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxPerLane = 16;  // head_dim <= 512

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ const float* key_ptr(const SparseAttentionParams& p, int64_t row,
                                                int64_t j, int64_t n_win, int64_t pos) {
  if (j < n_win) {
    const int64_t first = pos - n_win + 1;
    const int64_t kp = first + j;
    const int64_t start = p.chunk_start[row];
    if (kp >= start) return p.chunk_kv + (p.chunk_row0[row] + kp - start) * p.head_dim;
    return p.ring + (static_cast<int64_t>(p.slot[row]) * p.window + kp % p.window) * p.head_dim;
  }
  const int64_t c = j - n_win;
  const int64_t e = p.selected != nullptr ? p.selected[row * p.max_selected + c] : c;
  return p.entries + (static_cast<int64_t>(p.slot[row]) * p.max_entries + e) * p.head_dim;
}

__global__ void __launch_bounds__(kWarps * 32) sparse_attention_kernel(SparseAttentionParams p) {
  const int64_t head = blockIdx.x, row = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per_lane = static_cast<int>(p.head_dim / 32);
  const int64_t pos = p.positions[row];
  const int64_t n_win = pos + 1 < p.window ? pos + 1 : p.window;
  int64_t n_cmp = 0;
  if (p.entries != nullptr && p.ratio > 0) {
    n_cmp = p.selected != nullptr ? p.n_selected[row] : (pos + 1) / p.ratio;
  }
  const int64_t n_keys = n_win + n_cmp;

  const float* qh = p.q + (row * p.n_heads + head) * p.head_dim;
  float q[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    q[i] = i < per_lane ? qh[i * 32 + lane] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = warp; j < n_keys; j += kWarps) {
    const float* k = key_ptr(p, row, j, n_win, pos);
    float kv[kMaxPerLane];
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      kv[i] = i < per_lane ? k[i * 32 + lane] : 0.0f;
      dot += q[i] * kv[i];
    }
    const float s = warp_sum(dot) * p.scale;
    const float m_new = fmaxf(m, s);
    const float alpha = expf(m - m_new);  // 0 when m = -inf
    const float w = expf(s - m_new);
    l = l * alpha + w;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) acc[i] = acc[i] * alpha + w * kv[i];
    m = m_new;
  }

  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_acc[kWarps][kMaxPerLane * 32];
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    if (i < per_lane) s_acc[warp][i * 32 + lane] = acc[i];
  }
  __syncthreads();
  const float sink = p.sinks[head];
  float mu = sink;
  for (int w = 0; w < kWarps; ++w) mu = fmaxf(mu, s_m[w]);
  float denom = expf(sink - mu);
  float f[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    f[w] = expf(s_m[w] - mu);  // 0 for a warp that saw no key
    denom += s_l[w] * f[w];
  }
  const float inv = 1.0f / denom;
  float* oh = p.out + (row * p.n_heads + head) * p.head_dim;
  for (int64_t i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
    float v = 0.0f;
    for (int w = 0; w < kWarps; ++w) v += s_acc[w][i] * f[w];
    oh[i] = v * inv;
  }
}

}  // namespace

void sparse_attention_cuda(cudaStream_t stream, const SparseAttentionParams& p) {
  CHECK_KIND(kUnsupported, p.head_dim > 0 && p.head_dim % 32 == 0 && p.head_dim <= 32 * kMaxPerLane)
      << "sparse attention: head_dim " << p.head_dim << " must be a multiple of 32, at most 512";
  CHECK(p.window > 0) << "sparse attention: window must be positive";
  if (p.n_rows == 0 || p.n_heads == 0) return;
  CHECK_KIND(kUnsupported, p.n_rows < 65536 && p.n_heads < (int64_t{1} << 31))
      << "sparse attention: " << p.n_rows << " rows in one call";
  const dim3 grid(static_cast<unsigned>(p.n_heads), static_cast<unsigned>(p.n_rows));
  sparse_attention_kernel<<<grid, kWarps * 32, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
