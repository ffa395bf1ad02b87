// mHC kernels.
//
// Mix, default (kSplitK): the (n_mix = 24) projections and the sum of squares of a token's
// n_hc*D values are split along the width into 256-wide chunks; one block computes, for 8
// tokens and one chunk, all 8 x 25 partial dot products from shared memory (the fn chunk is
// read once per 8 tokens), and a finishing kernel sums the partials in a fixed order (so the
// result does not depend on the batch) and applies the sigmoids, the row softmax and the 4x4
// Sinkhorn on one thread. Decode (N = 1) spreads the 1.5 MB of fn over 64 blocks.
// Alternative (kGemm, the unfused composition): an fp32 cuBLASLt GEMM for the projections,
// then the finishing kernel computes the sum of squares itself.
#include <algorithm>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/gemm/gemm.h"
#include "ops/mhc/mhc_cuda.h"

namespace deepinfer {
namespace {

constexpr int kMaxHc = 4;
constexpr int kMaxMix = (2 + kMaxHc) * kMaxHc;  // 24
constexpr int kChunk = 256;                     // width per split
constexpr int kTokTile = 8;                     // tokens per partial block
constexpr int kPartialThreads = 256;            // >= kTokTile * (kMaxMix + 1) = 200

struct MixParams {
  const float* x;
  const float* fn;
  float* scratch;
  int64_t n_rows;
  const float* base;
  const float* scale;
  int n_hc, n_mix;  // n_mix = (2 + n_hc) * n_hc, or n_hc for the head
  int64_t dim;
  int n_split;      // > 0: scratch holds partials [n_split, n_rows, n_mix + 1]; 0: mixes [n_rows, n_mix]
  int sinkhorn_iters;
  float hc_eps, norm_eps;
  float* pre;
  float* post;  // null for the head
  float* comb;  // null for the head
};

__device__ __forceinline__ float sigmoidf(float v) { return 1.0f / (1.0f + expf(-v)); }


__global__ void __launch_bounds__(kPartialThreads) hc_mix_partial_kernel(MixParams p) {
  __shared__ float xs[kTokTile][kChunk + 1];
  __shared__ float fs[kMaxMix][kChunk + 1];
  const int64_t width = p.n_hc * p.dim;
  const int split = blockIdx.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokTile;
  const int64_t k0 = static_cast<int64_t>(split) * kChunk;
  const int len = static_cast<int>(min(static_cast<int64_t>(kChunk), width - k0));
  for (int idx = threadIdx.x; idx < kTokTile * kChunk; idx += kPartialThreads) {
    const int t = idx / kChunk, i = idx % kChunk;
    xs[t][i] = (t0 + t < p.n_rows && i < len) ? p.x[(t0 + t) * width + k0 + i] : 0.0f;
  }
  for (int idx = threadIdx.x; idx < p.n_mix * kChunk; idx += kPartialThreads) {
    const int m = idx / kChunk, i = idx % kChunk;
    fs[m][i] = i < len ? __ldg(p.fn + m * width + k0 + i) : 0.0f;
  }
  __syncthreads();
  const int n_out = p.n_mix + 1;  // the last output is the sum of squares
  if (threadIdx.x >= kTokTile * n_out) return;
  const int t = threadIdx.x / n_out, m = threadIdx.x % n_out;
  if (t0 + t >= p.n_rows) return;
  const float* a = xs[t];
  const float* b = m < p.n_mix ? fs[m] : xs[t];
  float acc = 0.0f;
#pragma unroll 8
  for (int i = 0; i < kChunk; ++i) acc = fmaf(a[i], b[i], acc);
  p.scratch[(static_cast<int64_t>(split) * p.n_rows + t0 + t) * n_out + m] = acc;
}

// Sigmoids, softmax and Sinkhorn of one token, on one thread, in the reference's order.
// HC is a compile-time constant so that the 4x4 matrix stays in registers (a run-time size
// put it in local memory and made this serial chain ~50 us).
template <int HC>
__device__ void finish_row_hc(const MixParams& p, int64_t row, const float* mix, float sumsq) {
  const int64_t width = p.n_hc * p.dim;
  const float inv = rsqrtf(sumsq / static_cast<float>(width) + p.norm_eps);
  constexpr int kMix = (2 + HC) * HC;
  float m[kMix];
#pragma unroll
  for (int i = 0; i < kMix; ++i) m[i] = i < p.n_mix ? mix[i] * inv : 0.0f;
#pragma unroll
  for (int j = 0; j < HC; ++j)
    p.pre[row * HC + j] = sigmoidf(m[j] * p.scale[0] + p.base[j]) + p.hc_eps;
  if (p.post == nullptr) return;  // head: pre only
#pragma unroll
  for (int j = 0; j < HC; ++j)
    p.post[row * HC + j] = 2.0f * sigmoidf(m[HC + j] * p.scale[1] + p.base[HC + j]);
  float c[HC][HC];
#pragma unroll
  for (int j = 0; j < HC; ++j) {
    float row_max = -INFINITY;
#pragma unroll
    for (int k = 0; k < HC; ++k) {
      c[j][k] = m[2 * HC + j * HC + k] * p.scale[2] + p.base[2 * HC + j * HC + k];
      row_max = fmaxf(row_max, c[j][k]);
    }
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < HC; ++k) {
      c[j][k] = expf(c[j][k] - row_max);
      sum += c[j][k];
    }
#pragma unroll
    for (int k = 0; k < HC; ++k) c[j][k] = c[j][k] / sum + p.hc_eps;
  }
  for (int it = 0; it < p.sinkhorn_iters; ++it) {
    if (it > 0) {
#pragma unroll
      for (int j = 0; j < HC; ++j) {
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < HC; ++k) sum += c[j][k];
#pragma unroll
        for (int k = 0; k < HC; ++k) c[j][k] /= sum + p.hc_eps;
      }
    }
#pragma unroll
    for (int k = 0; k < HC; ++k) {
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < HC; ++j) sum += c[j][k];
#pragma unroll
      for (int j = 0; j < HC; ++j) c[j][k] /= sum + p.hc_eps;
    }
  }
#pragma unroll
  for (int j = 0; j < HC; ++j)
#pragma unroll
    for (int k = 0; k < HC; ++k) p.comb[row * HC * HC + j * HC + k] = c[j][k];
}

__device__ void finish_row(const MixParams& p, int64_t row, const float* mix, float sumsq) {
  switch (p.n_hc) {
    case 1: finish_row_hc<1>(p, row, mix, sumsq); break;
    case 2: finish_row_hc<2>(p, row, mix, sumsq); break;
    case 3: finish_row_hc<3>(p, row, mix, sumsq); break;
    default: finish_row_hc<4>(p, row, mix, sumsq); break;
  }
}

// One warp per token: lane m < n_mix + 1 sums the partials of output m over the splits.
__global__ void hc_mix_finish_split_kernel(MixParams p) {
  __shared__ float red[kMaxMix + 1];
  const int64_t row = blockIdx.x;
  const int n_out = p.n_mix + 1;
  if (threadIdx.x < n_out) {
    float v = 0.0f;
    for (int s = 0; s < p.n_split; ++s)
      v += p.scratch[(static_cast<int64_t>(s) * p.n_rows + row) * n_out + threadIdx.x];
    red[threadIdx.x] = v;
  }
  __syncwarp();
  if (threadIdx.x != 0) return;
  finish_row(p, row, red, red[p.n_mix]);
}

constexpr int kFinishThreads = 256;

// After the GEMM: one block per token reduces the sum of squares itself.
__global__ void __launch_bounds__(kFinishThreads) hc_mix_finish_gemm_kernel(MixParams p) {
  __shared__ float red[kFinishThreads / 32];
  const int64_t row = blockIdx.x;
  const int64_t width = p.n_hc * p.dim;
  const float* x = p.x + row * width;
  float sumsq = 0.0f;
  for (int64_t i = threadIdx.x; i < width; i += kFinishThreads) sumsq = fmaf(x[i], x[i], sumsq);
  for (int offset = 16; offset > 0; offset /= 2)
    sumsq += __shfl_xor_sync(0xffffffffu, sumsq, offset);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = sumsq;
  __syncthreads();
  if (threadIdx.x != 0) return;
  float total = 0.0f;
  for (int w = 0; w < kFinishThreads / 32; ++w) total += red[w];
  finish_row(p, row, p.scratch + row * p.n_mix, total);
}

__global__ void hc_collapse_kernel(const float* x, const float* pre, int64_t n_rows, int n_hc,
                                   int64_t dim, float* u) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * dim) return;
  const int64_t row = idx / dim, i = idx % dim;
  const float* xr = x + row * n_hc * dim;
  float acc = 0.0f;
  for (int j = 0; j < n_hc; ++j) acc += pre[row * n_hc + j] * xr[j * dim + i];
  u[idx] = acc;
}

__global__ void hc_expand_kernel(const float* x, const float* y, const float* post,
                                 const float* comb, int64_t n_rows, int n_hc, int64_t dim,
                                 float* x_out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * dim) return;
  const int64_t row = idx / dim, i = idx % dim;
  const float* xr = x + row * n_hc * dim;
  const float* c = comb + row * n_hc * n_hc;
  float xv[kMaxHc];
  for (int j = 0; j < n_hc; ++j) xv[j] = xr[j * dim + i];
  const float yv = y[idx];
  for (int k = 0; k < n_hc; ++k) {
    float acc = post[row * n_hc + k] * yv;
    for (int j = 0; j < n_hc; ++j) acc += c[j * n_hc + k] * xv[j];
    x_out[(row * n_hc + k) * dim + i] = acc;
  }
}

unsigned blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  CHECK_KIND(kUnsupported, b < (int64_t{1} << 31)) << "mhc: problem too large";
  return static_cast<unsigned>(b);
}

int64_t n_splits(int64_t n_hc, int64_t dim) { return (n_hc * dim + kChunk - 1) / kChunk; }

void launch_mix(cuda::DeviceContext& ctx, MixParams p, HcMixImpl impl) {
  CHECK_KIND(kUnsupported, p.n_hc >= 1 && p.n_hc <= kMaxHc)
      << "mhc: n_hc " << p.n_hc << " (at most " << kMaxHc << ")";
  CHECK(p.dim > 0 && p.sinkhorn_iters >= 1) << "mhc: dim " << p.dim << ", sinkhorn_iters "
                                            << p.sinkhorn_iters;
  if (p.n_rows == 0) return;
  CHECK_KIND(kUnsupported, p.n_rows < (int64_t{1} << 31) && p.n_rows / kTokTile < 65535)
      << "mhc: too many rows (" << p.n_rows << ")";
  if (impl == HcMixImpl::kGemm) {
    p.n_split = 0;
    gemm_f32_cuda(ctx, p.x, p.fn, p.n_rows, p.n_mix, p.n_hc * p.dim, p.scratch);
    hc_mix_finish_gemm_kernel<<<static_cast<unsigned>(p.n_rows), kFinishThreads, 0,
                                ctx.stream()>>>(p);
  } else {
    p.n_split = static_cast<int>(n_splits(p.n_hc, p.dim));
    const dim3 grid(static_cast<unsigned>(p.n_split),
                    static_cast<unsigned>((p.n_rows + kTokTile - 1) / kTokTile));
    hc_mix_partial_kernel<<<grid, kPartialThreads, 0, ctx.stream()>>>(p);
    CUDA_CHECK_LAUNCH();
    hc_mix_finish_split_kernel<<<static_cast<unsigned>(p.n_rows), 32, 0, ctx.stream()>>>(p);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

int64_t hc_mix_scratch_floats(int64_t n_rows, const HcMixParams& p) {
  const int64_t n_mix = (2 + p.n_hc) * p.n_hc;
  return std::max(n_rows * n_mix, n_splits(p.n_hc, p.dim) * n_rows * (n_mix + 1));
}

void hc_mix_cuda(cuda::DeviceContext& ctx, const float* x, int64_t n_rows, const float* fn,
                 const float* base, const float* scale, const HcMixParams& p, float* mix_scratch,
                 float* pre, float* post, float* comb, HcMixImpl impl) {
  const int hc = static_cast<int>(p.n_hc);
  launch_mix(ctx,
             MixParams{x, fn, mix_scratch, n_rows, base, scale, hc, (2 + hc) * hc, p.dim, 0,
                       static_cast<int>(p.sinkhorn_iters), p.hc_eps, p.norm_eps, pre, post, comb},
             impl);
}

void hc_collapse_cuda(cudaStream_t stream, const float* x, const float* pre, int64_t n_rows,
                      int64_t n_hc, int64_t dim, float* u) {
  CHECK_KIND(kUnsupported, n_hc >= 1 && n_hc <= kMaxHc) << "mhc: n_hc " << n_hc;
  if (n_rows * dim == 0) return;
  hc_collapse_kernel<<<blocks_for(n_rows * dim, 256), 256, 0, stream>>>(
      x, pre, n_rows, static_cast<int>(n_hc), dim, u);
  CUDA_CHECK_LAUNCH();
}

void hc_expand_cuda(cudaStream_t stream, const float* x, const float* y, const float* post,
                    const float* comb, int64_t n_rows, int64_t n_hc, int64_t dim, float* x_out) {
  CHECK_KIND(kUnsupported, n_hc >= 1 && n_hc <= kMaxHc) << "mhc: n_hc " << n_hc;
  if (n_rows * dim == 0) return;
  hc_expand_kernel<<<blocks_for(n_rows * dim, 256), 256, 0, stream>>>(
      x, y, post, comb, n_rows, static_cast<int>(n_hc), dim, x_out);
  CUDA_CHECK_LAUNCH();
}

void hc_head_cuda(cuda::DeviceContext& ctx, const float* x, int64_t n_rows, const float* fn,
                  const float* base, const float* scale, const HcMixParams& p, float* mix_scratch,
                  float* pre_scratch, float* h, HcMixImpl impl) {
  const int hc = static_cast<int>(p.n_hc);
  launch_mix(ctx,
             MixParams{x, fn, mix_scratch, n_rows, base, scale, hc, hc, p.dim, 0,
                       static_cast<int>(p.sinkhorn_iters), p.hc_eps, p.norm_eps, pre_scratch,
                       nullptr, nullptr},
             impl);
  hc_collapse_cuda(ctx.stream(), x, pre_scratch, n_rows, p.n_hc, p.dim, h);
}

}  // namespace deepinfer
