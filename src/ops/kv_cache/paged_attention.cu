// Paged sparse attention with sink (contract in kv_cache_cuda.h). One block per (row, head
// group); warp w of the block owns head group * heads_per_block + w. Per tile of kTile keys:
// the first kTile threads resolve the keys' byte addresses, the whole block dequantises the
// tile into shared memory (fp32), then each warp scores the tile against its head's query
// (held in registers, head_dim / 32 values per lane), updates its online softmax and its
// accumulator. The sink joins the softmax at the end.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/kv_cache/kv_cache_cuda.h"
#include "ops/kv_cache/kv_cache_device.cuh"

namespace deepinfer {
namespace {

using kv_device::Geometry;

constexpr int kTile = 16;
constexpr int kMaxDim = 512;
constexpr int kMaxPerLane = kMaxDim / 32;
constexpr int kMaxWarps = 16;

struct Source {
  const uint8_t* cache = nullptr;
  const int32_t* indices = nullptr;
  const int32_t* n_indices = nullptr;
  int64_t max_indices = 0;
  Geometry g;
};

struct Args {
  const float* q = nullptr;
  float* out = nullptr;
  const float* sinks = nullptr;
  int64_t n_heads = 0, head_dim = 0, nope = 0;
  int64_t heads_per_block = 1, n_groups = 1;
  float scale = 1.0f;
  Source src[2];
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ int64_t n_keys_of(const Source& s, int64_t row) {
  if (s.max_indices == 0) return 0;
  return s.n_indices != nullptr ? s.n_indices[row] : s.max_indices;
}

template <bool kFp8>
__global__ void __launch_bounds__(kMaxWarps * 32) paged_attention_kernel(Args a) {
  const int64_t row = blockIdx.x / a.n_groups;
  const int64_t head = (blockIdx.x % a.n_groups) * a.heads_per_block + threadIdx.x / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool active = warp < a.heads_per_block && head < a.n_heads;
  const int per_lane = static_cast<int>(a.head_dim / 32);
  const int64_t n0 = n_keys_of(a.src[0], row), n_keys = n0 + n_keys_of(a.src[1], row);

  __shared__ __align__(16) float s_kv[kTile][kMaxDim];
  __shared__ const uint8_t* s_data[kTile];
  __shared__ const uint8_t* s_scales[kTile];

  float q[kMaxPerLane], acc[kMaxPerLane];
  const float* qh = a.q + (row * a.n_heads + (active ? head : 0)) * a.head_dim;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    q[i] = active && i < per_lane ? qh[i * 32 + lane] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;

  for (int64_t j0 = 0; j0 < n_keys; j0 += kTile) {
    if (threadIdx.x < kTile) {
      const int64_t j = j0 + threadIdx.x;
      const uint8_t* data = nullptr;
      const uint8_t* scales = nullptr;
      if (j < n_keys) {
        const Source& s = j < n0 ? a.src[0] : a.src[1];
        const int64_t k = j < n0 ? j : j - n0;
        const int64_t slot = s.indices[row * s.max_indices + k];
        if (slot >= 0) {
          data = s.cache + kv_device::data_offset(s.g, slot);
          if (kFp8) scales = s.cache + kv_device::scale_offset(s.g, slot);
        }
      }
      s_data[threadIdx.x] = data;
      s_scales[threadIdx.x] = scales;
    }
    __syncthreads();
    // Dequantise: 4 consecutive dims per unit.
    const int64_t units_per_key = a.head_dim / 4;
    for (int64_t u = threadIdx.x; u < kTile * units_per_key; u += blockDim.x) {
      const int t = static_cast<int>(u / units_per_key);
      const int64_t c = (u - t * units_per_key) * 4;
      const uint8_t* data = s_data[t];
      if (data == nullptr) continue;
      float4 v;
      if (kFp8 && c < a.nope) {
        const uint32_t codes = *reinterpret_cast<const uint32_t*>(data + c);
        const float sc = kv_device::e8m0_value(s_scales[t][c / KvCacheLayout::kScaleGroup]);
        const float2 lo = kv_device::e4m3x2_values(codes), hi = kv_device::e4m3x2_values(codes >> 16);
        v = make_float4(lo.x * sc, lo.y * sc, hi.x * sc, hi.y * sc);
      } else {
        const int64_t off = kFp8 ? a.nope + 2 * (c - a.nope) : 2 * c;
        const uint2 w = *reinterpret_cast<const uint2*>(data + off);
        v = make_float4(kv_device::bf16_value(w.x & 0xffffu), kv_device::bf16_value(w.x >> 16),
                        kv_device::bf16_value(w.y & 0xffffu), kv_device::bf16_value(w.y >> 16));
      }
      *reinterpret_cast<float4*>(&s_kv[t][c]) = v;
    }
    __syncthreads();
    if (active) {
      float sc[kTile];
      float tile_max = -INFINITY;
#pragma unroll
      for (int t = 0; t < kTile; ++t) {
        sc[t] = -INFINITY;
        if (s_data[t] != nullptr) {
          float dot = 0.0f;
#pragma unroll
          for (int i = 0; i < kMaxPerLane; ++i) {
            if (i < per_lane) dot += q[i] * s_kv[t][i * 32 + lane];
          }
          sc[t] = warp_sum(dot) * a.scale;
          tile_max = fmaxf(tile_max, sc[t]);
        }
      }
      if (tile_max > -INFINITY) {
        const float m_new = fmaxf(m, tile_max);
        const float alpha = expf(m - m_new);  // 0 while m = -inf
        l *= alpha;
#pragma unroll
        for (int i = 0; i < kMaxPerLane; ++i) acc[i] *= alpha;
#pragma unroll
        for (int t = 0; t < kTile; ++t) {
          if (s_data[t] == nullptr) continue;
          const float w = expf(sc[t] - m_new);
          l += w;
#pragma unroll
          for (int i = 0; i < kMaxPerLane; ++i) {
            if (i < per_lane) acc[i] += w * s_kv[t][i * 32 + lane];
          }
        }
        m = m_new;
      }
    }
    __syncthreads();
  }

  if (!active) return;
  const float sink = a.sinks[head];
  const float mu = fmaxf(m, sink);
  const float f = expf(m - mu);  // 0 when the row had no key
  const float inv = f / (l * f + expf(sink - mu));
  float* oh = a.out + (row * a.n_heads + head) * a.head_dim;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    if (i < per_lane) oh[i * 32 + lane] = acc[i] * inv;
  }
}

}  // namespace

void paged_attention_cuda(cudaStream_t stream, const PagedAttentionParams& p) {
  const KvSource* ref = p.sources[1].max_indices > 0 && p.sources[0].max_indices == 0 ? &p.sources[1]
                                                                                       : &p.sources[0];
  const KvCacheLayout& layout = ref->layout;
  layout.validate();
  Args a;
  for (int s = 0; s < 2; ++s) {
    const KvSource& src = p.sources[s];
    if (src.max_indices == 0) continue;
    CHECK(src.cache != nullptr && src.indices != nullptr)
        << "paged attention: source " << s << " without cache or indices";
    src.layout.validate();
    CHECK(src.layout.dtype == layout.dtype && src.layout.head_dim == layout.head_dim &&
          src.layout.rope_dim == layout.rope_dim)
        << "paged attention: sources differ in dtype/head_dim/rope_dim";
    a.src[s].cache = src.cache;
    a.src[s].indices = src.indices;
    a.src[s].n_indices = src.n_indices;
    a.src[s].max_indices = src.max_indices;
    a.src[s].g = kv_device::geometry(src.layout);
  }
  if (p.n_rows == 0 || p.n_heads == 0) return;
  a.q = p.q;
  a.out = p.out;
  a.sinks = p.sinks;
  a.n_heads = p.n_heads;
  a.head_dim = layout.head_dim;
  a.nope = layout.dtype == KvCacheDtype::kFp8 ? layout.nope_dim() : layout.head_dim;
  a.scale = p.scale;
  // Fewer heads per block when the grid would be small (decode at low batch): more blocks,
  // each key read by more of them (from L2). The per-warp arithmetic is the same either way.
  int64_t hpb = std::min<int64_t>(p.n_heads, kMaxWarps);
  while (hpb > 4 && p.n_rows * ((p.n_heads + hpb - 1) / hpb) < 264) hpb = (hpb + 1) / 2;
  a.heads_per_block = hpb;
  a.n_groups = (p.n_heads + hpb - 1) / hpb;
  const int64_t blocks = p.n_rows * a.n_groups;
  CHECK_KIND(kUnsupported, blocks < (int64_t{1} << 31))
      << "paged attention: " << p.n_rows << " rows x " << a.n_groups << " head groups";
  const unsigned threads = static_cast<unsigned>(std::max<int64_t>(hpb, 4) * 32);
  if (layout.dtype == KvCacheDtype::kFp8) {
    paged_attention_kernel<true><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(a);
  } else {
    paged_attention_kernel<false><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(a);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
