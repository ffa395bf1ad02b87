// V4.1 index keys (index_keys_cuda.h): one block per emitting row; the key in shared
// memory, RoPE pairs then one thread per FP4 block of 32.
#include <cmath>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/indexer/index_keys_cuda.h"
#include "ops/quant/qat_device.cuh"

namespace deepinfer {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxWidth = 4096;

__global__ void __launch_bounds__(kThreads) finish_kernel(IndexKeysFinishParams p) {
  __shared__ float s[kMaxWidth];
  if (p.n_emit_device != nullptr && static_cast<int64_t>(blockIdx.x) >= *p.n_emit_device) return;
  const int64_t row = p.emit_rows[blockIdx.x];
  const int64_t e = p.positions[row] / p.ratio;
  const float* in = p.keys_in + row * p.width;
  for (int64_t ch = threadIdx.x; ch < p.width; ch += blockDim.x) s[ch] = in[ch];
  __syncthreads();
  const int64_t nope = p.width - p.rope_dim;
  const float angle_pos = static_cast<float>(p.ratio * e);
  for (int64_t i = threadIdx.x; i < p.rope_dim / 2; i += blockDim.x) {
    float sn, cs;
    sincosf(angle_pos * p.inv_freq[i], &sn, &cs);
    const float a = s[nope + 2 * i], b = s[nope + 2 * i + 1];
    s[nope + 2 * i] = a * cs - b * sn;
    s[nope + 2 * i + 1] = b * cs + a * sn;
  }
  __syncthreads();
  if (p.fp4) {
    using namespace qat_device;
    constexpr int64_t kBlock = 32;
    const float floor_amax = 6.0f * ldexpf(1.0f, -126);
    for (int64_t b = threadIdx.x; b * kBlock < p.width; b += blockDim.x) {
      const int64_t start = b * kBlock, len = min(kBlock, p.width - start);
      float amax = floor_amax;
      for (int64_t i = 0; i < len; ++i) amax = fmaxf(amax, fabsf(s[start + i]));
      const float scale = pow2_scale(amax, kE2M1MaxF);
      for (int64_t i = 0; i < len; ++i) {
        const float q = fminf(kE2M1MaxF, fmaxf(-kE2M1MaxF, s[start + i] / scale));
        s[start + i] = round_e2m1(q) * scale;
      }
    }
    __syncthreads();
  }
  float* out = p.by_row ? p.keys + row * p.width
                        : p.keys + (static_cast<int64_t>(p.slot[row]) * p.max_entries + e) * p.width;
  for (int64_t ch = threadIdx.x; ch < p.width; ch += blockDim.x) out[ch] = s[ch];
}

}  // namespace

void index_keys_finish_cuda(cudaStream_t stream, const IndexKeysFinishParams& p) {
  CHECK_KIND(kUnsupported, p.width > 0 && p.width <= kMaxWidth)
      << "index keys: width " << p.width << " (at most " << kMaxWidth << ")";
  CHECK(p.ratio > 0 && p.rope_dim >= 0 && p.rope_dim % 2 == 0 && p.rope_dim <= p.width)
      << "index keys: ratio " << p.ratio << ", rope_dim " << p.rope_dim << ", width " << p.width;
  CHECK(p.by_row || p.max_entries > 0) << "index keys: max_entries " << p.max_entries;
  if (p.n_emit == 0) return;
  CHECK_KIND(kUnsupported, p.n_emit < (int64_t{1} << 31)) << "index keys: too many rows";
  finish_kernel<<<static_cast<unsigned>(p.n_emit), kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
