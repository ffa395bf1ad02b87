// mHC kernels. The mix is an fp32 GEMM (ops/gemm) followed by a finishing kernel: one block
// per token reduces the sum of squares of its n_hc*D values, then one thread applies the
// sigmoids, the row softmax and the 4x4 Sinkhorn (20 iterations of 16 values cost nothing
// next to reading the 64 KB token row).
#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/gemm/gemm.h"
#include "ops/mhc/mhc_cuda.h"

namespace deepinfer {
namespace {

constexpr int kMaxHc = 4;
constexpr int kMaxMix = (2 + kMaxHc) * kMaxHc;  // 24
constexpr int kMixThreads = 256;

struct MixParams {
  const float* x;
  const float* mixes;  // [n_rows, n_mix], un-normalised projections
  int64_t n_rows;
  const float* base;
  const float* scale;
  int n_hc, n_mix;  // n_mix = (2 + n_hc) * n_hc, or n_hc for the head
  int64_t dim;
  int sinkhorn_iters;
  float hc_eps, norm_eps;
  float* pre;
  float* post;  // null for the head
  float* comb;  // null for the head
};

__device__ __forceinline__ float sigmoidf(float v) { return 1.0f / (1.0f + expf(-v)); }

__global__ void __launch_bounds__(kMixThreads) hc_mix_finish_kernel(MixParams p) {
  __shared__ float red[kMixThreads / 32];
  const int64_t row = blockIdx.x;
  const int64_t width = p.n_hc * p.dim;
  const float* x = p.x + row * width;
  float sumsq = 0.0f;
  for (int64_t i = threadIdx.x; i < width; i += kMixThreads) sumsq = fmaf(x[i], x[i], sumsq);
  for (int offset = 16; offset > 0; offset /= 2)
    sumsq += __shfl_xor_sync(0xffffffffu, sumsq, offset);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = sumsq;
  __syncthreads();
  if (threadIdx.x != 0) return;
  float total = 0.0f;
  for (int w = 0; w < kMixThreads / 32; ++w) total += red[w];
  const float inv = rsqrtf(total / static_cast<float>(width) + p.norm_eps);
  const int hc = p.n_hc;
  float mix[kMaxMix];
  for (int m = 0; m < p.n_mix; ++m) mix[m] = p.mixes[row * p.n_mix + m] * inv;
  for (int j = 0; j < hc; ++j) p.pre[row * hc + j] = sigmoidf(mix[j] * p.scale[0] + p.base[j]) + p.hc_eps;
  if (p.post == nullptr) return;  // head: pre only
  for (int j = 0; j < hc; ++j)
    p.post[row * hc + j] = 2.0f * sigmoidf(mix[hc + j] * p.scale[1] + p.base[hc + j]);
  float c[kMaxHc * kMaxHc];
  for (int j = 0; j < hc; ++j) {
    float row_max = -INFINITY;
    for (int k = 0; k < hc; ++k) {
      c[j * hc + k] = mix[2 * hc + j * hc + k] * p.scale[2] + p.base[2 * hc + j * hc + k];
      row_max = fmaxf(row_max, c[j * hc + k]);
    }
    float sum = 0.0f;
    for (int k = 0; k < hc; ++k) {
      c[j * hc + k] = expf(c[j * hc + k] - row_max);
      sum += c[j * hc + k];
    }
    for (int k = 0; k < hc; ++k) c[j * hc + k] = c[j * hc + k] / sum + p.hc_eps;
  }
  for (int it = 0; it < p.sinkhorn_iters; ++it) {
    if (it > 0) {
      for (int j = 0; j < hc; ++j) {
        float sum = 0.0f;
        for (int k = 0; k < hc; ++k) sum += c[j * hc + k];
        for (int k = 0; k < hc; ++k) c[j * hc + k] /= sum + p.hc_eps;
      }
    }
    for (int k = 0; k < hc; ++k) {
      float sum = 0.0f;
      for (int j = 0; j < hc; ++j) sum += c[j * hc + k];
      for (int j = 0; j < hc; ++j) c[j * hc + k] /= sum + p.hc_eps;
    }
  }
  for (int e = 0; e < hc * hc; ++e) p.comb[row * hc * hc + e] = c[e];
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

void launch_mix(cuda::DeviceContext& ctx, const float* fn, float* mix_scratch, MixParams p) {
  CHECK_KIND(kUnsupported, p.n_hc >= 1 && p.n_hc <= kMaxHc)
      << "mhc: n_hc " << p.n_hc << " (at most " << kMaxHc << ")";
  CHECK(p.dim > 0 && p.sinkhorn_iters >= 1) << "mhc: dim " << p.dim << ", sinkhorn_iters "
                                            << p.sinkhorn_iters;
  if (p.n_rows == 0) return;
  CHECK_KIND(kUnsupported, p.n_rows < (int64_t{1} << 31)) << "mhc: too many rows";
  gemm_f32_cuda(ctx, p.x, fn, p.n_rows, p.n_mix, p.n_hc * p.dim, mix_scratch);
  p.mixes = mix_scratch;
  hc_mix_finish_kernel<<<static_cast<unsigned>(p.n_rows), kMixThreads, 0, ctx.stream()>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void hc_mix_cuda(cuda::DeviceContext& ctx, const float* x, int64_t n_rows, const float* fn,
                 const float* base, const float* scale, const HcMixParams& p, float* mix_scratch,
                 float* pre, float* post, float* comb) {
  const int hc = static_cast<int>(p.n_hc);
  launch_mix(ctx, fn, mix_scratch,
             MixParams{x, nullptr, n_rows, base, scale, hc, (2 + hc) * hc, p.dim,
                       static_cast<int>(p.sinkhorn_iters), p.hc_eps, p.norm_eps, pre, post, comb});
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
                  float* pre_scratch, float* h) {
  const int hc = static_cast<int>(p.n_hc);
  launch_mix(ctx, fn, mix_scratch,
             MixParams{x, nullptr, n_rows, base, scale, hc, hc, p.dim,
                       static_cast<int>(p.sinkhorn_iters), p.hc_eps, p.norm_eps, pre_scratch,
                       nullptr, nullptr});
  hc_collapse_cuda(ctx.stream(), x, pre_scratch, n_rows, p.n_hc, p.dim, h);
}

}  // namespace deepinfer
