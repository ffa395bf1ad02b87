// Paged indexer keys (V4 e4m3 + fp32 scale, V4.1 e2m1 + UE8M0 per 32): store / load (one
// warp per key) and the indexer scores reading them (one warp per key, the row's q and head
// weights in shared memory, the same arithmetic as indexer_scores_cuda).
#include <algorithm>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/indexer/indexer_device.cuh"
#include "ops/kv_cache/index_cache_cuda.h"
#include "ops/kv_cache/kv_cache_device.cuh"
#include "ops/quant/qat_device.cuh"

namespace deepinfer {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxPerLane = 8;  // head_dim <= 256
// Keys per block of indexer_paged_scores: 64 from 16 rows up; fewer at smaller batches
// (down to one key per warp at one row) so that a decode step of a few rows still spreads its
// keys over many SMs. Each key's arithmetic is the same whatever the split.
constexpr int kKeysPerBlock = 64;
constexpr int64_t kFullRows = 16;

struct Geometry {
  int64_t head_dim = 0, block_size = 1, block_bytes = 0, data_bytes = 0, scale_bytes = 0;
  bool fp4 = false;
};

Geometry geometry(const IndexCacheLayout& l) {
  return {l.head_dim, l.block_size, l.block_bytes(), l.data_bytes(), l.scale_bytes(), l.fp4()};
}

__device__ __forceinline__ const uint8_t* key_data(const Geometry& g, const uint8_t* cache, int64_t slot) {
  return cache + slot / g.block_size * g.block_bytes + slot % g.block_size * g.data_bytes;
}

__device__ __forceinline__ int64_t scale_offset(const Geometry& g, int64_t slot) {
  return slot / g.block_size * g.block_bytes + g.block_size * g.data_bytes + slot % g.block_size * g.scale_bytes;
}

// Dim c of an e2m1 key (codes two per byte, UE8M0 scale per 32).
__device__ __forceinline__ float fp4_dim(const uint8_t* data, const uint8_t* scales, int64_t c) {
  return kv_device::e2m1_value(data[c / 2] >> (c % 2 * 4)) * kv_device::e8m0_value(scales[c / 32]);
}

// fp4_roundtrip's per-32 quantiser on one key, one dim per lane per pass, codes kept.
__device__ __forceinline__ void store_fp4_key(const Geometry& g, const float* k, uint8_t* data,
                                              uint8_t* scales, int lane) {
  for (int64_t c0 = 0; c0 < g.head_dim; c0 += 32) {
    const int64_t c = c0 + lane;
    const float v = k[c];
    const float amax = fmaxf(6.0f * 0x1p-126f, kv_device::warp_max(fabsf(v)));
    const float s = qat_device::pow2_scale(amax, qat_device::kE2M1MaxF);
    const float q = fminf(qat_device::kE2M1MaxF, fmaxf(-qat_device::kE2M1MaxF, v / s));
    const uint32_t code = kv_device::e2m1_code_of(qat_device::round_e2m1(q), q);
    const uint32_t high = __shfl_down_sync(0xffffffffu, code, 1);
    if (lane % 2 == 0) data[c / 2] = static_cast<uint8_t>(code | (high << 4));
    if (lane == 0) scales[c0 / 32] = static_cast<uint8_t>((__float_as_uint(s) >> 23) & 0xffu);
  }
}

__device__ __forceinline__ float e4m3_value(uint32_t code) {
  return kv_device::e4m3x2_values(code).x;
}

__global__ void __launch_bounds__(kWarps * 32)
    index_store_kernel(Geometry g, const float* keys, int64_t n, int64_t row_stride,
                       const int32_t* slots, uint8_t* cache) {
  int64_t i, slot;
  if (!kv_device::store_entry(kWarps, slots, n, i, slot)) return;
  const int lane = threadIdx.x % 32;
  const float* k = keys + i * row_stride;
  if (g.fp4) {
    uint8_t* data = cache + (slot / g.block_size * g.block_bytes + slot % g.block_size * g.data_bytes);
    store_fp4_key(g, k, data, cache + scale_offset(g, slot), lane);
    return;
  }
  float amax = 0.0f;
  for (int64_t c = lane; c < g.head_dim; c += 32) amax = fmaxf(amax, fabsf(k[c]));
  amax = fmaxf(1e-4f, kv_device::warp_max(amax));
  const float s = qat_device::pow2_scale(amax, qat_device::kE4M3MaxF);
  uint8_t* data = cache + slot / g.block_size * g.block_bytes + slot % g.block_size * g.data_bytes;
  for (int64_t c = lane; c < g.head_dim; c += 32) {
    const float q = fminf(qat_device::kE4M3MaxF, fmaxf(-qat_device::kE4M3MaxF, k[c] / s));
    data[c] = static_cast<uint8_t>(kv_device::e4m3_code(qat_device::round_e4m3(q)));
  }
  if (lane == 0) *reinterpret_cast<float*>(cache + scale_offset(g, slot)) = s;
}

__global__ void __launch_bounds__(kWarps * 32)
    index_load_kernel(Geometry g, const uint8_t* cache, const int32_t* slots, int64_t n, float* out) {
  int64_t slot;
  float* y;
  if (!kv_device::load_entry(kWarps, slots, n, g.head_dim, out, slot, y)) return;
  const int lane = threadIdx.x % 32;
  const uint8_t* data = key_data(g, cache, slot);
  if (g.fp4) {
    const uint8_t* scales = cache + scale_offset(g, slot);
    for (int64_t c = lane; c < g.head_dim; c += 32) y[c] = fp4_dim(data, scales, c);
    return;
  }
  const float s = *reinterpret_cast<const float*>(cache + scale_offset(g, slot));
  for (int64_t c = lane; c < g.head_dim; c += 32) y[c] = e4m3_value(data[c]) * s;
}

__global__ void __launch_bounds__(kWarps * 32) indexer_paged_scores_kernel(IndexerPagedScoresParams p,
                                                                           Geometry geo,
                                                                           int64_t keys_per_block) {
  extern __shared__ float s_q[];  // [n_heads * head_dim] then g [n_heads]
  const int64_t row = blockIdx.y;
  const int64_t n_keys = (static_cast<int64_t>(p.positions[row]) + 1) / p.ratio;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * keys_per_block;
  if (first >= n_keys) return;
  const int64_t d = geo.head_dim, qn = p.n_heads * d;
  float* s_g = s_q + qn;
  indexer_device::stage_row(p, row, qn, s_q, s_g);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per_lane = static_cast<int>(d / 32);
  const int32_t* table = p.block_table + static_cast<int64_t>(p.seq[row]) * p.max_blocks;
  const int64_t last = min(n_keys, first + keys_per_block);
  for (int64_t s = first + warp; s < last; s += kWarps) {
    const int64_t slot = static_cast<int64_t>(table[s / geo.block_size]) * geo.block_size + s % geo.block_size;
    const uint8_t* data = key_data(geo, p.cache, slot);
    float k[kMaxPerLane];
    if (geo.fp4) {
      const uint8_t* scales = p.cache + scale_offset(geo, slot);
#pragma unroll
      for (int i = 0; i < kMaxPerLane; ++i) k[i] = i < per_lane ? fp4_dim(data, scales, i * 32 + lane) : 0.0f;
    } else {
      const float sc = *reinterpret_cast<const float*>(p.cache + scale_offset(geo, slot));
#pragma unroll
      for (int i = 0; i < kMaxPerLane; ++i) k[i] = i < per_lane ? e4m3_value(data[i * 32 + lane]) * sc : 0.0f;
    }
    const float total = indexer_device::key_score(s_q, s_g, k, per_lane, lane, p.n_heads, d, p.scale);
    if (lane == 0) p.scores[row * p.score_stride + s] = total;
  }
}

unsigned grid_for(int64_t n) { return kv_device::warp_grid(n, kWarps, "index cache", "keys"); }

}  // namespace

void index_store_cuda(cudaStream_t stream, const IndexCacheLayout& layout, const float* keys,
                      int64_t n, int64_t row_stride, const int32_t* slots, uint8_t* cache) {
  layout.validate();
  CHECK(row_stride >= layout.head_dim) << "index store: row stride " << row_stride << " < head_dim "
                                       << layout.head_dim;
  if (n == 0) return;
  index_store_kernel<<<grid_for(n), kWarps * 32, 0, stream>>>(geometry(layout), keys, n, row_stride,
                                                              slots, cache);
  CUDA_CHECK_LAUNCH();
}

void index_load_cuda(cudaStream_t stream, const IndexCacheLayout& layout, const uint8_t* cache,
                     const int32_t* slots, int64_t n, float* out) {
  layout.validate();
  if (n == 0) return;
  index_load_kernel<<<grid_for(n), kWarps * 32, 0, stream>>>(geometry(layout), cache, slots, n, out);
  CUDA_CHECK_LAUNCH();
}

void indexer_paged_scores_cuda(cudaStream_t stream, const IndexerPagedScoresParams& p) {
  p.layout.validate();
  CHECK(p.ratio > 0) << "indexer paged scores: ratio must be positive";
  if (p.n_rows == 0 || p.max_blocks == 0) return;
  const size_t smem = static_cast<size_t>(p.n_heads * p.layout.head_dim + p.n_heads) * sizeof(float);
  CHECK_KIND(kUnsupported, smem <= 200 * 1024) << "indexer paged scores: q of " << smem << " bytes";
  static thread_local size_t configured = 48 * 1024;
  if (smem > configured) {
    CUDA_CHECK(cudaFuncSetAttribute(indexer_paged_scores_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    configured = smem;
  }
  const int64_t max_keys = p.max_blocks * p.layout.block_size;
  CHECK_KIND(kUnsupported, p.n_rows < 65536) << "indexer paged scores: too many rows";
  // Depends on n_rows only (graph-safe); a multiple of kWarps from kWarps to kKeysPerBlock.
  const int64_t kpb = std::clamp<int64_t>(kKeysPerBlock * p.n_rows / kFullRows / kWarps * kWarps,
                                          kWarps, kKeysPerBlock);
  const int64_t blocks_x = (max_keys + kpb - 1) / kpb;
  CHECK_KIND(kUnsupported, blocks_x < (int64_t{1} << 31)) << "indexer paged scores: " << max_keys << " keys";
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(p.n_rows));
  indexer_paged_scores_kernel<<<grid, kWarps * 32, smem, stream>>>(p, geometry(p.layout), kpb);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
