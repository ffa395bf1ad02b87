// Paged sparse attention with sink (contract in kv_cache_cuda.h). One block per (row, head
// group[, key chunk]); warp w of the block owns head group * heads_per_block + w. Per tile of
// kTile keys: the first kTile threads resolve the keys' byte addresses, the whole block
// dequantises the tile into shared memory (fp32), then each warp scores the tile against its
// head's query (held in registers, head_dim / 32 values per lane), updates its online softmax
// and its accumulator. Unsplit: the block walks all of the row's keys and merges the sink at
// the end. Split-K (small grids, a workspace given): blockIdx.y = chunk of the row's key list;
// each block writes its heads' partial (max, sum, acc) to the workspace and
// paged_attention_combine_kernel merges the chunks in order and adds the sink.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/kv_cache/kv_cache_cuda.h"
#include "ops/kv_cache/kv_cache_device.cuh"

namespace deepinfer {
namespace {

using kv_device::Geometry;
using kv_device::KeySource;
using kv_device::n_keys_of;

constexpr int kTile = 16;
constexpr int kMaxDim = 512;
constexpr int kMaxPerLane = kMaxDim / 32;
constexpr int kMaxWarps = 16;
constexpr int kMinThreads = 128;  // blocks have max(heads_per_block, 4) warps
constexpr int kUnitsPerThread = kTile * kMaxDim / 4 / kMinThreads;  // dequant units per tile
// Split-K plan (host, shapes only): split when the unsplit grid has fewer than kSplitBelow
// blocks (2 per SM of a 132-SM H200: below it most SMs idle or hold one latency-bound
// block); then n_splits = ceil(kSplitTarget / blocks), at most kMaxSplits and at most
// ceil(max_keys / kMinChunk). On the device each row cuts its own key count n into chunks of
// max(kMinChunk, round_up(ceil(n / n_splits), kTile)) keys, so a chunk is never tiny and the
// grid never depends on per-step counts (graph-safe).
constexpr int64_t kSplitBelow = 264;
constexpr int64_t kSplitTarget = 512;
constexpr int64_t kMaxSplits = 64;
constexpr int64_t kMinChunk = 32;
constexpr int kCombineThreads = 128;


struct Args {
  const float* q = nullptr;
  float* out = nullptr;
  const float* sinks = nullptr;
  int64_t n_heads = 0, head_dim = 0, nope = 0;
  int64_t heads_per_block = 1, n_groups = 1;
  float scale = 1.0f;
  KeySource src[2];
  // Split-K: n_splits chunks per row; partials at ws_acc[((row * n_heads + head) * n_splits +
  // chunk) * head_dim ...] and ws_ml[(row * n_heads + head) * n_splits + chunk] = (max, sum).
  int64_t n_splits = 1;
  float* ws_acc = nullptr;
  float2* ws_ml = nullptr;
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}


// Keys per chunk of a row with n_keys keys cut into (at most) n_splits chunks.
__device__ __forceinline__ int64_t chunk_keys(int64_t n_keys, int64_t n_splits) {
  int64_t c = (n_keys + n_splits - 1) / n_splits;
  c = (c + kTile - 1) / kTile * kTile;
  return c < kMinChunk ? kMinChunk : c;
}

// kMode: kModeBf16, kModeModel1 (V4 fp8) or kModeV41 (each key in its source's format:
// kE4m3Block32 or kE2m1E4m3Block16; no bf16 dims).
constexpr int kModeBf16 = 0, kModeModel1 = 1, kModeV41 = 2;

template <int kMode, bool kSplit>
__global__ void __launch_bounds__(kMaxWarps * 32) paged_attention_kernel(Args a) {
  constexpr bool kFp8 = kMode != kModeBf16;
  const int64_t row = blockIdx.x / a.n_groups;
  const int64_t head = (blockIdx.x % a.n_groups) * a.heads_per_block + threadIdx.x / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool active = warp < a.heads_per_block && head < a.n_heads;
  const int per_lane = static_cast<int>(a.head_dim / 32);
  const int64_t n0 = n_keys_of(a.src[0], row), n_keys = n0 + n_keys_of(a.src[1], row);
  int64_t j_begin = 0, j_end = n_keys;
  if (kSplit) {  // this block's chunk of the row's key list (uniform over the block)
    const int64_t chunk = chunk_keys(n_keys, a.n_splits);
    j_begin = static_cast<int64_t>(blockIdx.y) * chunk;
    if (j_begin >= n_keys) return;  // past the row's keys: the combine reads no partial here
    j_end = min(n_keys, j_begin + chunk);
  }

  __shared__ __align__(16) float s_kv[kTile][kMaxDim];
  __shared__ const uint8_t* s_data[kTile];
  __shared__ const uint8_t* s_scales[kTile];
  __shared__ bool s_fp4[kTile];  // kModeV41: the key is kE2m1E4m3Block16

  float q[kMaxPerLane], acc[kMaxPerLane];
  const float* qh = a.q + (row * a.n_heads + (active ? head : 0)) * a.head_dim;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    q[i] = active && i < per_lane ? qh[i * 32 + lane] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;

  // Thread t < kTile holds the slot of key j0 + t of the next tile (loaded one tile ahead,
  // so the load is in flight while the current tile is dequantised and scored).
  auto slot_of = [&](int64_t j) -> int64_t {
    if (j >= j_end) return -1;
    const KeySource& s = j < n0 ? a.src[0] : a.src[1];
    const int64_t k = j < n0 ? j : j - n0;
    return s.indices[row * s.max_indices + k];
  };
  int64_t next_slot = threadIdx.x < kTile ? slot_of(j_begin + threadIdx.x) : -1;
  for (int64_t j0 = j_begin; j0 < j_end; j0 += kTile) {
    if (threadIdx.x < kTile) {
      const int64_t j = j0 + threadIdx.x;
      const uint8_t* data = nullptr;
      const uint8_t* scales = nullptr;
      bool fp4 = false;
      const int64_t slot = next_slot;
      if (j < j_end && slot >= 0) {
        const KeySource& s = j < n0 ? a.src[0] : a.src[1];
        data = s.cache + kv_device::data_offset(s.g, slot);
        if (kFp8) scales = s.cache + kv_device::scale_offset(s.g, slot);
        fp4 = kMode == kModeV41 && s.g.format == KvEntryFormat::kE2m1E4m3Block16;
      }
      s_data[threadIdx.x] = data;
      s_scales[threadIdx.x] = scales;
      s_fp4[threadIdx.x] = fp4;
      next_slot = slot_of(j + kTile);
    }
    __syncthreads();
    // Dequantise: 4 consecutive dims per unit, at most kUnitsPerThread units per thread
    // (blockDim >= 128). Every load of the tile is issued before any value is used, so a
    // thread has all its loads in flight at once (one memory latency per tile, not one per
    // unit); the values stored are the same.
    const int units_per_key = static_cast<int>(a.head_dim / 4);
    const int n_units = kTile * units_per_key;
    const int nope = static_cast<int>(a.nope);
    uint2 raw[kUnitsPerThread];
    uint32_t scale_code[kUnitsPerThread];
#pragma unroll
    for (int k = 0; k < kUnitsPerThread; ++k) {
      raw[k] = make_uint2(0u, 0u);
      scale_code[k] = 0u;
      const int u = static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x);
      if (u >= n_units) continue;
      const int t = u / units_per_key;
      const int c = (u - t * units_per_key) * 4;
      const uint8_t* data = s_data[t];
      if (data == nullptr) continue;
      if (kMode == kModeV41) {
        if (s_fp4[t]) {
          raw[k].x = *reinterpret_cast<const uint16_t*>(data + c / 2);
          scale_code[k] = s_scales[t][c / 16];
        } else {
          raw[k].x = *reinterpret_cast<const uint32_t*>(data + c);
          scale_code[k] = s_scales[t][c / 32];
        }
      } else if (kFp8 && c < nope) {
        raw[k].x = *reinterpret_cast<const uint32_t*>(data + c);
        scale_code[k] = s_scales[t][c / KvCacheLayout::kScaleGroup];
      } else {
        const int off = kFp8 ? nope + 2 * (c - nope) : 2 * c;
        raw[k] = *reinterpret_cast<const uint2*>(data + off);
      }
    }
#pragma unroll
    for (int k = 0; k < kUnitsPerThread; ++k) {
      const int u = static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x);
      if (u >= n_units) continue;
      const int t = u / units_per_key;
      const int c = (u - t * units_per_key) * 4;
      if (s_data[t] == nullptr) continue;
      float4 v;
      if (kMode == kModeV41 && s_fp4[t]) {
        const uint32_t codes = raw[k].x;
        const float sc = kv_device::e4m3_value(scale_code[k]);
        v = make_float4(kv_device::e2m1_value(codes & 0xfu) * sc, kv_device::e2m1_value((codes >> 4) & 0xfu) * sc,
                        kv_device::e2m1_value((codes >> 8) & 0xfu) * sc,
                        kv_device::e2m1_value((codes >> 12) & 0xfu) * sc);
      } else if (kFp8 && c < nope) {
        const uint32_t codes = raw[k].x;
        const float sc = kv_device::e8m0_value(scale_code[k]);
        const float2 lo = kv_device::e4m3x2_values(codes), hi = kv_device::e4m3x2_values(codes >> 16);
        v = make_float4(lo.x * sc, lo.y * sc, hi.x * sc, hi.y * sc);
      } else {
        const uint2 w = raw[k];
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
  if (kSplit) {
    const int64_t at = (row * a.n_heads + head) * a.n_splits + blockIdx.y;
    float* wa = a.ws_acc + at * a.head_dim;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      if (i < per_lane) wa[i * 32 + lane] = acc[i];
    }
    if (lane == 0) a.ws_ml[at] = make_float2(m, l);
    return;
  }
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

// One block per (row, head): merges the row's chunks 0, 1, ... (those holding keys) in that
// order, then the sink: the same result as one softmax over all keys, up to rounding.
__global__ void __launch_bounds__(kCombineThreads) paged_attention_combine_kernel(Args a) {
  const int64_t row = blockIdx.x / a.n_heads, head = blockIdx.x % a.n_heads;
  const int64_t n_keys = n_keys_of(a.src[0], row) + n_keys_of(a.src[1], row);
  const int64_t chunk = chunk_keys(n_keys, a.n_splits);
  const int64_t n_chunks = (n_keys + chunk - 1) / chunk;  // 0 when the row has no key
  const int64_t base = (row * a.n_heads + head) * a.n_splits;
  __shared__ float s_w[kMaxSplits];
  __shared__ float s_l[kMaxSplits];
  float mx = -INFINITY;
  for (int64_t c = 0; c < n_chunks; ++c) mx = fmaxf(mx, a.ws_ml[base + c].x);
  for (int64_t c = threadIdx.x; c < n_chunks; c += blockDim.x) {
    const float2 ml = a.ws_ml[base + c];
    // A chunk whose keys were all -1 holes has max -inf and sum 0: weight 0.
    s_w[c] = ml.x == -INFINITY ? 0.0f : expf(ml.x - mx);
    s_l[c] = ml.y;
  }
  __syncthreads();
  float l = 0.0f;
  for (int64_t c = 0; c < n_chunks; ++c) l += s_l[c] * s_w[c];
  const float sink = a.sinks[head];
  const float mu = fmaxf(mx, sink);
  const float f = expf(mx - mu);  // 0 when no chunk saw a key
  const float inv = f / (l * f + expf(sink - mu));
  float* oh = a.out + (row * a.n_heads + head) * a.head_dim;
  const float* acc = a.ws_acc + base * a.head_dim;
  for (int64_t i = threadIdx.x * 4; i < a.head_dim; i += blockDim.x * 4) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int64_t c = 0; c < n_chunks; ++c) {
      const float w = s_w[c];
      const float4 x = *reinterpret_cast<const float4*>(acc + c * a.head_dim + i);
      v.x += w * x.x;
      v.y += w * x.y;
      v.z += w * x.z;
      v.w += w * x.w;
    }
    oh[i] = v.x * inv;  // out need not be 16-byte aligned
    oh[i + 1] = v.y * inv;
    oh[i + 2] = v.z * inv;
    oh[i + 3] = v.w * inv;
  }
}

struct Plan {
  int64_t heads_per_block = 1, n_groups = 1, n_splits = 1;
};

Plan plan_of(int64_t n_rows, int64_t n_heads, int64_t max_keys, bool split) {
  Plan pl;
  // Fewer heads per block when the grid would be small (decode at low batch): more blocks,
  // each key read by more of them (from L2). The per-warp arithmetic is the same either way.
  int64_t hpb = std::min<int64_t>(n_heads, kMaxWarps);
  while (hpb > 4 && n_rows * ((n_heads + hpb - 1) / hpb) < 264) hpb = (hpb + 1) / 2;
  pl.heads_per_block = hpb;
  pl.n_groups = (n_heads + hpb - 1) / hpb;
  const int64_t blocks = n_rows * pl.n_groups;
  if (split && blocks > 0 && blocks < kSplitBelow) {
    int64_t ns = (kSplitTarget + blocks - 1) / blocks;
    ns = std::min(ns, kMaxSplits);
    ns = std::min(ns, (max_keys + kMinChunk - 1) / kMinChunk);
    pl.n_splits = std::max<int64_t>(ns, 1);
  }
  return pl;
}

// Workspace bytes of one call split n_splits ways: the partial accumulators, then the
// (max, sum) pairs (8-byte aligned: the accumulator part is a multiple of 8 bytes).
int64_t split_bytes(int64_t n_rows, int64_t n_heads, int64_t head_dim, int64_t n_splits) {
  if (n_splits <= 1) return 0;
  return n_rows * n_heads * n_splits * (head_dim + 2) * static_cast<int64_t>(sizeof(float));
}

}  // namespace

int64_t paged_attention_workspace_bytes(int64_t n_rows, int64_t n_heads, int64_t head_dim,
                                        int64_t max_keys) {
  int64_t most = 0;
  // Splitting needs n_rows * n_groups < kSplitBelow, so rows past it never split.
  for (int64_t n = 1; n <= std::min(n_rows, kSplitBelow); ++n) {
    const Plan pl = plan_of(n, n_heads, max_keys, true);
    most = std::max(most, split_bytes(n, n_heads, head_dim, pl.n_splits));
  }
  return most;
}

void paged_attention_cuda(cudaStream_t stream, const PagedAttentionParams& p) {
  Args a;
  const KvCacheLayout layout = kv_device::key_sources(p, a.src, "paged attention");
  if (p.n_rows == 0 || p.n_heads == 0) return;
  a.q = p.q;
  a.out = p.out;
  a.sinks = p.sinks;
  a.n_heads = p.n_heads;
  a.head_dim = layout.head_dim;
  a.nope = layout.dtype == KvCacheDtype::kFp8 ? layout.nope_dim() : layout.head_dim;
  a.scale = p.scale;
  const int64_t max_keys = a.src[0].max_indices + a.src[1].max_indices;
  const Plan pl = plan_of(p.n_rows, p.n_heads, max_keys, p.workspace != nullptr);
  a.heads_per_block = pl.heads_per_block;
  a.n_groups = pl.n_groups;
  a.n_splits = pl.n_splits;
  const int64_t blocks = p.n_rows * a.n_groups;
  CHECK_KIND(kUnsupported, blocks < (int64_t{1} << 31) && p.n_rows * p.n_heads < (int64_t{1} << 31))
      << "paged attention: " << p.n_rows << " rows x " << a.n_groups << " head groups";
  const unsigned threads =
      static_cast<unsigned>(std::max<int64_t>(pl.heads_per_block * 32, kMinThreads));
  // The V4.1 formats (rope_dim 0, so key_sources never pairs them with kModel1).
  const int mode = layout.dtype != KvCacheDtype::kFp8 ? kModeBf16
                   : layout.format == KvEntryFormat::kModel1 ? kModeModel1 : kModeV41;
  if (pl.n_splits <= 1) {
    const unsigned grid = static_cast<unsigned>(blocks);
    if (mode == kModeV41) {
      paged_attention_kernel<kModeV41, false><<<grid, threads, 0, stream>>>(a);
    } else if (mode == kModeModel1) {
      paged_attention_kernel<kModeModel1, false><<<grid, threads, 0, stream>>>(a);
    } else {
      paged_attention_kernel<kModeBf16, false><<<grid, threads, 0, stream>>>(a);
    }
    CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t need = split_bytes(p.n_rows, p.n_heads, a.head_dim, pl.n_splits);
  CHECK(p.workspace_bytes >= need)
      << "paged attention: workspace of " << p.workspace_bytes << " bytes, " << need
      << " needed for " << p.n_rows << " rows (paged_attention_workspace_bytes)";
  CHECK(reinterpret_cast<uintptr_t>(p.workspace) % 16 == 0) << "paged attention: workspace not 16-byte aligned";
  a.ws_acc = static_cast<float*>(p.workspace);
  a.ws_ml = reinterpret_cast<float2*>(a.ws_acc + p.n_rows * p.n_heads * pl.n_splits * a.head_dim);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(pl.n_splits));
  if (mode == kModeV41) {
    paged_attention_kernel<kModeV41, true><<<grid, threads, 0, stream>>>(a);
  } else if (mode == kModeModel1) {
    paged_attention_kernel<kModeModel1, true><<<grid, threads, 0, stream>>>(a);
  } else {
    paged_attention_kernel<kModeBf16, true><<<grid, threads, 0, stream>>>(a);
  }
  CUDA_CHECK_LAUNCH();
  paged_attention_combine_kernel<<<static_cast<unsigned>(p.n_rows * p.n_heads), kCombineThreads, 0,
                                   stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
