// Compressor emission: one block per emitted entry, one thread per channel (looping when
// the width exceeds the block). Softmax over slots in two passes (max, then weighted sum).
#include <cmath>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/compressor/compress_pool_cuda.h"
#include "ops/quant/qat_device.cuh"

namespace deepinfer {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxWidth = 2048;

__global__ void add_ape_kernel(float* z, const float* ape, const int32_t* positions, int64_t n_rows,
                               int64_t ratio, int64_t cw) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * cw) return;
  const int64_t row = idx / cw, i = idx % cw;
  z[idx] += ape[(positions[row] % ratio) * cw + i];
}

__device__ __forceinline__ void slot_source(const CompressorEmitParams& p, int64_t row, int64_t e,
                                            int64_t s, int64_t ch, const float** pa,
                                            const float** pz, bool* empty) {
  const int64_t m = p.ratio, cw = p.overlap ? 2 * p.width : p.width;
  int64_t pos, off;
  *empty = false;
  if (p.overlap) {
    if (s < m) {
      if (e == 0) {
        *empty = true;
        return;
      }
      pos = (e - 1) * m + s;
      off = ch;
    } else {
      pos = e * m + (s - m);
      off = p.width + ch;
    }
  } else {
    pos = e * m + s;
    off = ch;
  }
  const int64_t start = p.chunk_start[row];
  if (pos >= start) {
    const int64_t r = p.chunk_row0[row] + pos - start;
    *pa = p.a + r * cw + off;
    *pz = p.z + r * cw + off;
  } else {
    const int64_t L = p.ring_len > 0 ? p.ring_len : 2 * m;
    const int64_t r = static_cast<int64_t>(p.slot[row]) * L + pos % L;
    *pa = p.ring_a + r * cw + off;
    *pz = p.ring_z + r * cw + off;
  }
}

__global__ void __launch_bounds__(kThreads) emit_kernel(CompressorEmitParams p) {
  __shared__ float s_pooled[kMaxWidth];
  __shared__ float s_red[kThreads / 32];
  if (p.n_emit_device != nullptr && static_cast<int64_t>(blockIdx.x) >= *p.n_emit_device) return;
  const int64_t row = p.emit_rows[blockIdx.x];
  const int64_t e = p.positions[row] / p.ratio;
  const int64_t n_slots = p.overlap ? 2 * p.ratio : p.ratio;
  float sq = 0.0f;
  for (int64_t ch = threadIdx.x; ch < p.width; ch += blockDim.x) {
    float mx = -INFINITY;
    for (int64_t s = 0; s < n_slots; ++s) {
      const float *pa = nullptr, *pz = nullptr;
      bool empty;
      slot_source(p, row, e, s, ch, &pa, &pz, &empty);
      if (!empty) mx = fmaxf(mx, *pz);
    }
    float denom = 0.0f, acc = 0.0f;
    for (int64_t s = 0; s < n_slots; ++s) {
      const float *pa = nullptr, *pz = nullptr;
      bool empty;
      slot_source(p, row, e, s, ch, &pa, &pz, &empty);
      if (empty) continue;
      const float w = expf(*pz - mx);
      denom += w;
      if (w != 0.0f) acc += w * *pa;
    }
    const float v = acc / denom;
    s_pooled[ch] = v;
    sq += v * v;
  }
  // RMSNorm over the width.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
  if (threadIdx.x % 32 == 0) s_red[threadIdx.x / 32] = sq;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) total += s_red[w];
  const float inv = rsqrtf(total / static_cast<float>(p.width) + p.eps);
  for (int64_t ch = threadIdx.x; ch < p.width; ch += blockDim.x) {
    s_pooled[ch] = s_pooled[ch] * inv * p.norm_w[ch];
    if (p.latent_by_row != nullptr) p.latent_by_row[row * p.width + ch] = s_pooled[ch];
  }
  __syncthreads();
  __shared__ float s_out[kMaxWidth];
  const int64_t nope = p.width - p.rope_dim;
  const float angle_pos = static_cast<float>(p.ratio * e);
  for (int64_t ch = threadIdx.x; ch < p.width; ch += blockDim.x) {
    float v = s_pooled[ch];
    if (ch >= nope) {
      const int64_t i = (ch - nope) / 2;
      float sn, cs;
      sincosf(angle_pos * p.inv_freq[i], &sn, &cs);
      const float a = s_pooled[nope + 2 * i], b = s_pooled[nope + 2 * i + 1];
      v = ((ch - nope) % 2 == 0) ? a * cs - b * sn : b * cs + a * sn;
    }
    s_out[ch] = v;
  }
  __syncthreads();
  using namespace qat_device;
  if (p.qat == CompressorQat::kFp8Nope) {
    // fp8_roundtrip(entry, width - rope_dim, 64): one thread per block of 64.
    constexpr int64_t kBlock = 64;
    for (int64_t b = threadIdx.x; b * kBlock < nope; b += blockDim.x) {
      const int64_t start = b * kBlock, len = min(kBlock, nope - start);
      float amax = 1e-4f;
      for (int64_t i = 0; i < len; ++i) amax = fmaxf(amax, fabsf(s_out[start + i]));
      const float scale = pow2_scale(amax, kE4M3MaxF);
      for (int64_t i = 0; i < len; ++i) {
        const float q = fminf(kE4M3MaxF, fmaxf(-kE4M3MaxF, s_out[start + i] / scale));
        s_out[start + i] = round_e4m3(q) * scale;
      }
    }
    __syncthreads();
  } else if (p.qat == CompressorQat::kHadamardFp4) {
    // hadamard_transform(entry, width) then fp4_roundtrip(entry, width, 32).
    for (int64_t hh = 1; hh < p.width; hh *= 2) {
      for (int64_t t = threadIdx.x; t < p.width / 2; t += blockDim.x) {
        const int64_t j = (t / hh) * 2 * hh + t % hh;
        const float a = s_out[j], b = s_out[j + hh];
        s_out[j] = a + b;
        s_out[j + hh] = a - b;
      }
      __syncthreads();
    }
    const float hscale = 1.0f / sqrtf(static_cast<float>(p.width));
    for (int64_t ch = threadIdx.x; ch < p.width; ch += blockDim.x) s_out[ch] = s_out[ch] * hscale;
    __syncthreads();
    constexpr int64_t kBlock = 32;
    const float floor_amax = 6.0f * ldexpf(1.0f, -126);
    for (int64_t b = threadIdx.x; b * kBlock < p.width; b += blockDim.x) {
      const int64_t start = b * kBlock, len = min(kBlock, p.width - start);
      float amax = floor_amax;
      for (int64_t i = 0; i < len; ++i) amax = fmaxf(amax, fabsf(s_out[start + i]));
      const float scale = pow2_scale(amax, kE2M1MaxF);
      for (int64_t i = 0; i < len; ++i) {
        const float q = fminf(kE2M1MaxF, fmaxf(-kE2M1MaxF, s_out[start + i] / scale));
        s_out[start + i] = round_e2m1(q) * scale;
      }
    }
    __syncthreads();
  } else if (p.qat == CompressorQat::kFp4E4m3) {
    // fp4_roundtrip_e4m3_scale(entry, width, 16): one thread per block of 16.
    constexpr int64_t kBlock = 16;
    const float floor_amax = 6.0f * ldexpf(1.0f, -9);
    for (int64_t b = threadIdx.x; b * kBlock < p.width; b += blockDim.x) {
      const int64_t start = b * kBlock, len = min(kBlock, p.width - start);
      float amax = floor_amax;
      for (int64_t i = 0; i < len; ++i) amax = fmaxf(amax, fabsf(s_out[start + i]));
      const float scale = round_e4m3(fminf(amax / kE2M1MaxF, kE4M3MaxF));
      for (int64_t i = 0; i < len; ++i) {
        const float q = fminf(kE2M1MaxF, fmaxf(-kE2M1MaxF, s_out[start + i] / scale));
        s_out[start + i] = round_e2m1(q) * scale;
      }
    }
    __syncthreads();
  }
  float* out = p.entries_by_row
                   ? p.entries + row * p.width
                   : p.entries + (static_cast<int64_t>(p.slot[row]) * p.max_entries + e) * p.width;
  for (int64_t ch = threadIdx.x; ch < p.width; ch += blockDim.x) out[ch] = s_out[ch];
}

}  // namespace

void compressor_add_ape_cuda(cudaStream_t stream, float* z, const float* ape,
                             const int32_t* positions, int64_t n_rows, int64_t ratio, int64_t cw) {
  const int64_t total = n_rows * cw;
  if (total == 0) return;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  add_ape_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(z, ape, positions, n_rows,
                                                                        ratio, cw);
  CUDA_CHECK_LAUNCH();
}

void compressor_emit_cuda(cudaStream_t stream, const CompressorEmitParams& p) {
  CHECK_KIND(kUnsupported, p.width > 0 && p.width <= kMaxWidth)
      << "compressor: width " << p.width << " (at most " << kMaxWidth << ")";
  CHECK(p.ratio > 0 && p.rope_dim % 2 == 0 && p.rope_dim <= p.width)
      << "compressor: ratio " << p.ratio << ", rope_dim " << p.rope_dim;
  CHECK_KIND(kUnsupported, p.qat != CompressorQat::kHadamardFp4 || (p.width & (p.width - 1)) == 0)
      << "compressor: Hadamard needs a power-of-two width, got " << p.width;
  if (p.n_emit == 0) return;
  emit_kernel<<<static_cast<unsigned>(p.n_emit), kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
