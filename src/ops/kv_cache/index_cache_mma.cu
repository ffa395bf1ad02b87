// Indexer scores over the paged FP8 index cache on bf16 tensor cores (contract in
// index_cache_cuda.h, indexer_paged_scores_mma_cuda). For query row r and key s,
//   score = sum_h g_h * head_scale * ReLU((q_h . codes_s) * key_scale_s * scale)
// is a product of the row's q [heads x d] with the keys' codes, so one CTA takes a row and
// up to 512 of its keys, the heads as the MMA M dimension:
//   * q goes to shared memory once as hi + lo bf16 terms (~2^-16 relative; in official
//     numerics q is an FP4 value times a power of two, so lo is 0); the e4m3 codes of a tile
//     of 64 keys are exact in bf16; the key's fp32 scale multiplies the dot product after;
//   * 8 warps: warp w takes heads 16 * (w % 4) .. +16 and keys 32 * (w / 4) .. +32 of the
//     tile: S = q_hi codes^T + q_lo codes^T, fp32 accumulation;
//   * each lane weights and ReLUs its two heads, the warp sums its 16 heads (xor shuffles
//     over g), and the 4 head groups are added in a fixed order through shared memory.
// Fixed order per (row, key): the result does not depend on the batch.
#include <algorithm>
#include <mutex>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/kv_cache/bf16_dequant.cuh"
#include "ops/kv_cache/index_cache_cuda.h"
#include "ops/kv_cache/kv_cache_device.cuh"
#include "ops/kv_cache/mma_bf16.cuh"

namespace deepinfer {
namespace {

constexpr int kHeads = 64;           // heads per CTA (4 groups of 16)
constexpr int kTileKeys = 64;        // keys per shared tile
constexpr int kKeysPerCta = 512;     // keys of one row per CTA
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kPad = 8;              // bf16 per shared row beyond head_dim
constexpr int kMaxDim = 256;
constexpr int64_t kMinRows = 32;     // below: the SIMT kernel (it spreads few rows wider)

// fp4 (IndexKeyFormat::kE2m1Ue8m0Block32): the key tile holds e2m1 x its UE8M0 scale (exact
// in bf16) and the per-key scale after the product is 1.
struct Geo {
  int64_t head_dim = 0, block_size = 1, block_bytes = 0, data_bytes = 0, scale_bytes = 0;
  bool fp4 = false;
};

__device__ __forceinline__ int64_t key_offset(const Geo& g, int64_t slot) {
  return slot / g.block_size * g.block_bytes + slot % g.block_size * g.data_bytes;
}

__device__ __forceinline__ int64_t scale_offset(const Geo& g, int64_t slot) {
  return slot / g.block_size * g.block_bytes + g.block_size * g.data_bytes + slot % g.block_size * g.scale_bytes;
}

__global__ void __launch_bounds__(kThreads) indexer_paged_scores_mma_kernel(IndexerPagedScoresParams p,
                                                                            Geo geo) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int d = static_cast<int>(geo.head_dim), ld = d + kPad;
  __nv_bfloat16* sq = reinterpret_cast<__nv_bfloat16*>(smem);  // hi [kHeads][ld]
  __nv_bfloat16* sq_lo = sq + kHeads * ld;                      // lo [kHeads][ld]
  __nv_bfloat16* sk = sq_lo + kHeads * ld;                      // codes [kTileKeys][ld]
  __shared__ float s_g[kHeads];
  __shared__ float s_scale[kTileKeys];
  __shared__ float s_part[4][kTileKeys];

  const int64_t row = blockIdx.y;
  const int64_t n_keys = (static_cast<int64_t>(p.positions[row]) + 1) / p.ratio;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kKeysPerCta;
  if (first >= n_keys) return;
  const int64_t last = min(n_keys, first + kKeysPerCta);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int rg = warp % 4, kh = warp / 4;

  for (int i = threadIdx.x; i < kHeads * d / 4; i += kThreads) {
    const int h = i / (d / 4), c = (i % (d / 4)) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (h < p.n_heads) v = *reinterpret_cast<const float4*>(p.q + (row * p.n_heads + h) * d + c);
    mma_bf16::split4(v, *reinterpret_cast<uint2*>(sq + h * ld + c),
                     *reinterpret_cast<uint2*>(sq_lo + h * ld + c));
  }
  if (threadIdx.x < kHeads) {
    s_g[threadIdx.x] = threadIdx.x < p.n_heads ? p.g[row * p.n_heads + threadIdx.x] * p.head_scale : 0.0f;
  }
  const int32_t* table = p.block_table + static_cast<int64_t>(p.seq[row]) * p.max_blocks;
  const bool active = 16 * rg < p.n_heads;

  for (int64_t tile0 = first; tile0 < last; tile0 += kTileKeys) {
    __syncthreads();  // the previous tile's s_part and sk are consumed (first: q, s_g stored)
    for (int u = threadIdx.x; u < kTileKeys * d / 8; u += kThreads) {
      const int key = u / (d / 8), c = (u % (d / 8)) * 8;
      const int64_t s = tile0 + key;
      uint4 out = make_uint4(0u, 0u, 0u, 0u);
      if (s < last) {
        const int64_t slot = static_cast<int64_t>(table[s / geo.block_size]) * geo.block_size + s % geo.block_size;
        if (geo.fp4) {
          *reinterpret_cast<uint4*>(sk + key * ld + c) = kv_device::e2m1x8_bf16(
              *reinterpret_cast<const uint32_t*>(p.cache + key_offset(geo, slot) + c / 2),
              kv_device::e8m0_value(p.cache[scale_offset(geo, slot) + c / 32]));
          if (c == 0) s_scale[key] = 1.0f;
          continue;
        }
        out = kv_device::e4m3x8_bf16(*reinterpret_cast<const uint2*>(p.cache + key_offset(geo, slot) + c), 1.0f);
        if (c == 0) s_scale[key] = *reinterpret_cast<const float*>(p.cache + scale_offset(geo, slot));
      } else if (c == 0) {
        s_scale[key] = 0.0f;
      }
      *reinterpret_cast<uint4*>(sk + key * ld + c) = out;
    }
    __syncthreads();
    float s[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    if (active) {
      const int qoff = (16 * rg + g) * ld + 2 * t;
      for (int k0 = 0; k0 < d; k0 += 16) {
        uint32_t ah[4], al[4];
        mma_bf16::a_fragment(ah, sq + qoff + k0, ld);
        mma_bf16::a_fragment(al, sq_lo + qoff + k0, ld);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const __nv_bfloat16* kb = sk + (32 * kh + nt * 8 + g) * ld + k0 + 2 * t;
          const uint32_t b0 = *reinterpret_cast<const uint32_t*>(kb);
          const uint32_t b1 = *reinterpret_cast<const uint32_t*>(kb + 8);
          mma_bf16::mma(s[nt], ah, b0, b1);
          mma_bf16::mma(s[nt], al, b0, b1);
        }
      }
    }
    // Lane (g, t) holds heads 16rg + g (elements 0, 1) and + 8 (2, 3) for keys nt * 8 + 2t + e.
    const float w0 = s_g[16 * rg + g], w1 = s_g[16 * rg + g + 8];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = 32 * kh + nt * 8 + 2 * t + e;
        const float ks = s_scale[key] * p.scale;
        float v = w0 * fmaxf(s[nt][e] * ks, 0.0f) + w1 * fmaxf(s[nt][e + 2] * ks, 0.0f);
        v += __shfl_xor_sync(0xffffffffu, v, 4);
        v += __shfl_xor_sync(0xffffffffu, v, 8);
        v += __shfl_xor_sync(0xffffffffu, v, 16);
        if (g == 0) s_part[rg][key] = v;
      }
    }
    __syncthreads();
    if (threadIdx.x < kTileKeys && tile0 + threadIdx.x < last) {
      const int key = threadIdx.x;
      p.scores[row * p.score_stride + tile0 + key] =
          ((s_part[0][key] + s_part[1][key]) + s_part[2][key]) + s_part[3][key];
    }
  }
}

}  // namespace

bool indexer_paged_scores_mma_supported(const IndexerPagedScoresParams& p) {
  return p.layout.head_dim % 16 == 0 && p.layout.head_dim <= kMaxDim && p.n_heads <= kHeads &&
         p.layout.block_bytes() % 8 == 0;
}

bool indexer_paged_scores_mma_preferred(const IndexerPagedScoresParams& p) {
  return indexer_paged_scores_mma_supported(p) && p.n_rows >= kMinRows;
}

void indexer_paged_scores_mma_cuda(cudaStream_t stream, const IndexerPagedScoresParams& p) {
  p.layout.validate();
  CHECK(p.ratio > 0) << "indexer paged scores (mma): ratio must be positive";
  CHECK_KIND(kUnsupported, indexer_paged_scores_mma_supported(p))
      << "indexer paged scores (mma): head_dim " << p.layout.head_dim << ", " << p.n_heads
      << " heads, " << p.layout.block_bytes() << "-byte blocks (needs head_dim % 16 == 0, <= "
      << kMaxDim << ", at most " << kHeads << " heads, blocks a multiple of 8 bytes)";
  if (p.n_rows == 0 || p.max_blocks == 0) return;
  CHECK(reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && reinterpret_cast<uintptr_t>(p.cache) % 8 == 0)
      << "indexer paged scores (mma): q must be 16-byte and the cache 8-byte aligned";
  CHECK_KIND(kUnsupported, p.n_rows < 65536) << "indexer paged scores (mma): too many rows";
  const int64_t max_keys = p.max_blocks * p.layout.block_size;
  const int64_t blocks_x = (max_keys + kKeysPerCta - 1) / kKeysPerCta;
  const int smem = static_cast<int>((2 * kHeads + kTileKeys) * (p.layout.head_dim + kPad) * 2);
  static std::once_flag once;
  std::call_once(once, [] {
    CUDA_CHECK(cudaFuncSetAttribute(indexer_paged_scores_mma_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (2 * kHeads + kTileKeys) * (kMaxDim + kPad) * 2));
  });
  const Geo geo{p.layout.head_dim,   p.layout.block_size,  p.layout.block_bytes(),
                p.layout.data_bytes(), p.layout.scale_bytes(), p.layout.fp4()};
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(p.n_rows));
  indexer_paged_scores_mma_kernel<<<grid, kThreads, smem, stream>>>(p, geo);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
