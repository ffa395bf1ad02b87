// Sparse paged attention decode on bf16 tensor cores (contract in kv_cache_cuda.h,
// sm90_paged_decode_cuda). The 64 heads of one query row share its key list (MQA over the
// 512-wide latent, K = V), so one CTA of 8 warps takes (row, 64-head group, chunk of the key
// list) and reads every key of its chunk once for all 64 heads:
//
//   * Q (64 heads x 512) goes to shared memory once as bf16 (one rounding: the fast path's
//     numerics, "option (a)" of issue 22, as FlashMLA).
//   * The key list (window source then compressed source, one logical list, -1 holes) is
//     walked in tiles of 64 keys. The next tile's bytes are gathered with cp.async (16-byte
//     pieces, 4 threads per key, indexed by the row's slot list; -1 and past-the-end keys are
//     zero-filled) while the current tile computes (double buffer). FP8 caches land raw and
//     are dequantised into a bf16 tile, exactly: V4's MODEL1 entries (576 data + 8 scale
//     bytes: 448 e4m3 codes x UE8M0 per 64, 64 bf16 RoPE dims), or V4.1's formats, whose two
//     sources differ (window: 512 e4m3 codes x UE8M0 per 32, 528 B; compressed: 512 e2m1
//     codes x e4m3 per 16, 288 B, products of <= 6 significant bits), a per-key flag telling
//     the dequantiser which; bf16 caches land directly in one of two bf16 tiles.
//   * S = Q K^T: warp w computes heads 32 (w % 2) .. +32 x keys 16 (w / 2) .. +16 of the tile
//     (mma.sync m16n8k16, fragments by ldmatrix). Row maxima of the 4 warps sharing a head
//     meet in shared memory, so all of them hold the same running max (bitwise); each warp
//     exponentiates its own keys (exp2, log2(e) folded into the scale), keeps its partial row
//     sum and writes P as bf16 to shared memory.
//   * O += P V: warp w owns output dims 64 w .. +64 for all 64 heads (4 x 8 accumulator tiles,
//     128 fp32 per thread), B fragments by ldmatrix.trans from the same bf16 key tile.
//   * The sink is merged at the end (unsplit), or the chunk's (max, sum, acc) go to the
//     workspace and sm90_decode_combine_kernel merges a row's chunks in order 0, 1, ...
//
// Shared memory per CTA ~214 KB (one CTA per SM). Phases per tile are separated by
// __syncthreads: (S1) tile landed and the previous tile consumed, issue the next gather;
// [fp8: dequantise, (S2)]; QK and partial maxima, (S3); softmax and P, (S4); PV.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/kv_cache/bf16_dequant.cuh"
#include "ops/kv_cache/kv_cache_cuda.h"
#include "ops/kv_cache/kv_cache_device.cuh"
#include "ops/kv_cache/mma_bf16.cuh"

namespace deepinfer {
namespace {

using kv_device::KeySource;

constexpr int kHeads = 64;   // heads per CTA (M of both products)
constexpr int kKeys = 64;    // keys per tile
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kDim = 512;    // head_dim (V4: 448 NoPE + 64 RoPE)
constexpr int kNope = 448;   // fp8 layout: NoPE dims as e4m3 codes
constexpr int kData = 576;   // fp8 data bytes per entry (448 codes + 64 bf16)
constexpr int kV41Data = 512;    // V4.1 raw tile: data bytes per key (e4m3: 512, e2m1: 256 used)
constexpr int kV41Scales = 32;   // and scale bytes per key (UE8M0 / 32: 16 used, e4m3 / 16: 32)
constexpr int kLd = kDim + 8;     // bf16 per shared row of Q / key tiles (16 B apart mod 128 B)
constexpr int kLdP = kKeys + 8;   // bf16 per shared row of P
constexpr int kMaxSplits = 64;
constexpr int kCombineThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory plan (bytes).
constexpr int kQBytes = kHeads * kLd * 2;                       // 66,560
constexpr int kTileBytes = kKeys * kLd * 2;                     // 66,560 (bf16 key tile)
constexpr int kRawBytes = std::max(kKeys * kData + kKeys * 8,           // 37,376 (MODEL1 raw tile)
                                   kKeys * kV41Data + kKeys * kV41Scales);  // 34,816 (V4.1)
constexpr int kRegionBytes = std::max(kTileBytes + 2 * kRawBytes, 2 * kTileBytes);
constexpr int kPBytes = kHeads * kLdP * 2;                      // 9,216
constexpr int kOffRegion = kQBytes;
constexpr int kOffP = kOffRegion + kRegionBytes;
constexpr int kOffRed = kOffP + kPBytes;                        // float [4][64]
constexpr int kOffAlpha = kOffRed + 4 * kHeads * 4;             // float [64]
constexpr int kOffM = kOffAlpha + kHeads * 4;                   // float [64]
constexpr int kOffValid = kOffM + kHeads * 4;                   // uint8 [2][64]
constexpr int kOffFp4 = kOffValid + 2 * kKeys;                  // uint8 [2][64]: V4.1 e2m1 key
constexpr int kSmemBytes = kOffFp4 + 2 * kKeys;
static_assert(kSmemBytes <= 232448, "shared memory plan exceeds 227 KB");
static_assert(kOffRegion % 16 == 0 && kRawBytes % 16 == 0 && kTileBytes % 16 == 0 && kOffP % 16 == 0,
              "16-byte alignment of the shared tiles");

struct DecodeArgs {
  const float* q = nullptr;
  float* out = nullptr;
  const float* sinks = nullptr;
  int64_t n_heads = 0, n_groups = 1;
  float scale_log2 = 1.0f;  // softmax scale * log2(e)
  KeySource src[2];
  const uint8_t* any_cache = nullptr;  // a valid global address for zero-fill copies
  int64_t n_splits = 1;
  float* ws_acc = nullptr;  // [row][head][split][512]
  float2* ws_ml = nullptr;  // [row][head][split] = (max (log2 domain), sum)
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 (or 8) bytes global -> shared; src_bytes 0 zero-fills the destination without reading.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async8(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Four 8x8 bf16 matrices (not transposed); lane i gives the address of row i % 8 of matrix i / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Cache formats of the kernel (template argument).
constexpr int kFmtBf16 = 0;    // bf16 cache
constexpr int kFmtModel1 = 1;  // V4's fp8 MODEL1 entries
constexpr int kFmtV41 = 2;     // V4.1's e4m3 / 32 window and e2m1 + e4m3 / 16 compressed entries

// Keys per chunk of a row with n_keys keys cut into (at most) n_splits chunks: whole tiles.
__host__ __device__ __forceinline__ int64_t decode_chunk_keys(int64_t n_keys, int64_t n_splits) {
  int64_t c = (n_keys + n_splits - 1) / n_splits;
  c = (c + kKeys - 1) / kKeys * kKeys;
  return c < kKeys ? kKeys : c;
}

template <int kFmt, bool kSplit>
__global__ void __launch_bounds__(kThreads, 1) sm90_paged_decode_kernel(DecodeArgs a) {
  constexpr bool kFp8 = kFmt != kFmtBf16;
  extern __shared__ __align__(128) uint8_t smem[];
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem);
  uint8_t* region = smem + kOffRegion;
  __nv_bfloat16* sP = reinterpret_cast<__nv_bfloat16*>(smem + kOffP);
  float* sRed = reinterpret_cast<float*>(smem + kOffRed);
  float* sAlpha = reinterpret_cast<float*>(smem + kOffAlpha);
  float* sM = reinterpret_cast<float*>(smem + kOffM);
  uint8_t* sValid = smem + kOffValid;
  uint8_t* sFp4 = smem + kOffFp4;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t row = blockIdx.x / a.n_groups;
  const int64_t h0 = (blockIdx.x % a.n_groups) * kHeads;
  const int64_t n0 = kv_device::n_keys_of(a.src[0], row);
  const int64_t n_keys = n0 + kv_device::n_keys_of(a.src[1], row);
  int64_t j_begin = 0, j_end = n_keys;
  if (kSplit) {  // this CTA's chunk of the row's key list (uniform over the CTA)
    const int64_t chunk = decode_chunk_keys(n_keys, a.n_splits);
    j_begin = static_cast<int64_t>(blockIdx.y) * chunk;
    if (j_begin >= n_keys) return;  // past the row's keys: the combine reads no partial here
    j_end = min(n_keys, j_begin + chunk);
  }
  const int n_tiles = static_cast<int>((j_end - j_begin + kKeys - 1) / kKeys);

  // Gather tile `tile` into buffer `buf`: thread (key tid / 4, part tid % 4) copies every 4th
  // 16-byte piece of its key (and part 0 the scale group), zero-filling missing keys.
  auto issue = [&](int tile, int buf) {
    const int key = tid >> 2, part = tid & 3;
    const int64_t j = j_begin + static_cast<int64_t>(tile) * kKeys + key;
    const uint8_t* data = a.any_cache;
    const uint8_t* scales = a.any_cache;
    bool valid = false, fp4 = false;
    if (j < j_end) {
      const KeySource& s = j < n0 ? a.src[0] : a.src[1];
      const int64_t slot = s.indices[row * s.max_indices + (j < n0 ? j : j - n0)];
      if (slot >= 0) {
        valid = true;
        data = s.cache + kv_device::data_offset(s.g, slot);
        if (kFp8) scales = s.cache + kv_device::scale_offset(s.g, slot);
        if (kFmt == kFmtV41) fp4 = s.g.format == KvEntryFormat::kE2m1E4m3Block16;
      }
    }
    if (part == 0) sValid[buf * kKeys + key] = valid ? 1 : 0;
    if (kFmt == kFmtV41 && part == 0) sFp4[buf * kKeys + key] = fp4 ? 1 : 0;
    const int n = valid ? 16 : 0;
    if (kFmt == kFmtV41) {
      // e4m3 (and missing keys, zero-filled as such): 32 data pieces + 1 scale piece;
      // e2m1: 16 data pieces + 2 scale pieces.
      uint8_t* raw = region + kTileBytes + buf * kRawBytes;
      const int pieces = fp4 ? kV41Data / 32 : kV41Data / 16, scale_pieces = fp4 ? 2 : 1;
#pragma unroll 1
      for (int c = part; c < pieces; c += 4) {
        cp_async16(raw + key * kV41Data + 16 * c, valid ? data + 16 * c : data, n);
      }
      if (part < scale_pieces) {
        cp_async16(raw + kKeys * kV41Data + key * kV41Scales + 16 * part, valid ? scales + 16 * part : scales, n);
      }
    } else if (kFp8) {
      uint8_t* raw = region + kTileBytes + buf * kRawBytes;
#pragma unroll 1
      for (int c = part; c < kData / 16; c += 4) {
        cp_async16(raw + key * kData + 16 * c, valid ? data + 16 * c : data, n);
      }
      if (part == 0) cp_async8(raw + kKeys * kData + key * 8, scales, valid ? 8 : 0);
    } else {
      uint8_t* tile_k = region + buf * kTileBytes + key * kLd * 2;
#pragma unroll 1
      for (int c = part; c < kDim * 2 / 16; c += 4) {
        cp_async16(tile_k + 16 * c, valid ? data + 16 * c : data, n);
      }
    }
  };

  if (n_tiles > 0) issue(0, 0);
  cp_async_commit();

  // Q rows h0 .. h0 + 63 as bf16 (heads past n_heads: zeros), while tile 0 is in flight.
  for (int i = tid; i < kHeads * kDim / 4; i += kThreads) {
    const int r = i / (kDim / 4), c = (i % (kDim / 4)) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (h0 + r < a.n_heads) {
      v = *reinterpret_cast<const float4*>(a.q + ((row * a.n_heads + h0 + r) * kDim + c));
    }
    *reinterpret_cast<uint2*>(sQ + r * kLd + c) =
        make_uint2(mma_bf16::pack(v.x, v.y), mma_bf16::pack(v.z, v.w));
  }

  // QK roles: heads hq0 .. +32 (2 m-tiles), keys kq0 .. +16 of the tile (2 n-tiles).
  const int hq0 = 32 * (warp & 1), kq0 = 16 * (warp >> 1), kg = warp >> 1;
  // PV roles: output dims dv0 .. +64 (8 n-tiles) for heads 0 .. 63 (4 m-tiles).
  const int dv0 = 64 * warp;
  float m_run[2][2], l_run[2][2];  // [m-tile][row half] of the QK heads (log2 domain)
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) m_run[mi][0] = m_run[mi][1] = -INFINITY, l_run[mi][0] = l_run[mi][1] = 0.0f;
  float acc[4][8][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int n = 0; n < 8; ++n) acc[i][n][0] = acc[i][n][1] = acc[i][n][2] = acc[i][n][3] = 0.0f;

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int buf = tile & 1;
    cp_async_wait_all();
    __syncthreads();  // (S1) tile landed for all threads; the previous tile is consumed
    if (tile + 1 < n_tiles) issue(tile + 1, buf ^ 1);
    cp_async_commit();

    const __nv_bfloat16* sK =
        reinterpret_cast<const __nv_bfloat16*>(region + (kFp8 ? 0 : buf * kTileBytes));
    if (kFmt == kFmtV41) {
      // Dequantise: 64 units of 8 dims per key, 16 units per thread; consecutive threads take
      // consecutive units of a key. e4m3 unit: 8 codes x the UE8M0 of its 32; e2m1 unit: 4
      // bytes (dim 2i in the low nibble of byte i, 2i + 1 in the high) x the e4m3 of its 16.
      const uint8_t* raw = region + kTileBytes + buf * kRawBytes;
      const uint8_t* fp4 = sFp4 + buf * kKeys;
      __nv_bfloat16* dst = reinterpret_cast<__nv_bfloat16*>(region);
#pragma unroll 1
      for (int u = tid; u < kKeys * (kDim / 8); u += kThreads) {
        const int key = u / (kDim / 8), c8 = u % (kDim / 8);
        const uint8_t* sc_bytes = raw + kKeys * kV41Data + key * kV41Scales;
        const uint4 v =
            fp4[key] ? kv_device::e2m1x8_bf16(*reinterpret_cast<const uint32_t*>(raw + key * kV41Data + c8 * 4),
                                              kv_device::e4m3_value(sc_bytes[c8 / 2]))
                     : kv_device::e4m3x8_bf16(*reinterpret_cast<const uint2*>(raw + key * kV41Data + c8 * 8),
                                              kv_device::e8m0_value(sc_bytes[c8 / 4]));
        *reinterpret_cast<uint4*>(dst + key * kLd + c8 * 8) = v;
      }
      __syncthreads();  // (S2)
    } else if (kFp8) {
      // Dequantise: 64 units of 8 dims per key (56 NoPE units of 8 codes, 8 RoPE units of 8
      // bf16), 16 units per thread; consecutive threads take consecutive units of a key.
      const uint8_t* raw = region + kTileBytes + buf * kRawBytes;
      __nv_bfloat16* dst = reinterpret_cast<__nv_bfloat16*>(region);
#pragma unroll 2
      for (int u = tid; u < kKeys * (kDim / 8); u += kThreads) {
        const int key = u / (kDim / 8), c8 = u % (kDim / 8);
        uint4 v;
        if (c8 < kNope / 8) {
          v = kv_device::e4m3x8_bf16(*reinterpret_cast<const uint2*>(raw + key * kData + c8 * 8),
                                     kv_device::e8m0_value(raw[kKeys * kData + key * 8 + c8 / 8]));
        } else {
          v = *reinterpret_cast<const uint4*>(raw + key * kData + kNope + (c8 - kNope / 8) * 16);
        }
        *reinterpret_cast<uint4*>(dst + key * kLd + c8 * 8) = v;
      }
      __syncthreads();  // (S2)
    }

    // S = Q K^T for heads hq0 .. +32 x keys kq0 .. +16.
    float s[2][2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 2; ++ni) s[mi][ni][0] = s[mi][ni][1] = s[mi][ni][2] = s[mi][ni][3] = 0.0f;
    {
      const __nv_bfloat16* qa = sQ + (hq0 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd + (lane >> 4) * 8;
      const __nv_bfloat16* kb = sK + (kq0 + (lane & 7) + (lane >> 4) * 8) * kLd + ((lane >> 3) & 1) * 8;
#pragma unroll 2
      for (int k0 = 0; k0 < kDim; k0 += 16) {
        uint32_t a0[4], a1[4], b[4];
        ldmatrix_x4(a0, qa + k0);
        ldmatrix_x4(a1, qa + 16 * kLd + k0);
        ldmatrix_x4(b, kb + k0);
        mma_bf16::mma(s[0][0], a0, b[0], b[1]);
        mma_bf16::mma(s[0][1], a0, b[2], b[3]);
        mma_bf16::mma(s[1][0], a1, b[0], b[1]);
        mma_bf16::mma(s[1][1], a1, b[2], b[3]);
      }
    }
    // Scale, mask missing keys, partial row maxima (C rows g: elements 0, 1; g + 8: 2, 3).
    const uint8_t* valid = sValid + buf * kKeys;
    float mx[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}};
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 2; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kq0 + 8 * ni + 2 * t + (e & 1);
          s[mi][ni][e] = valid[key] ? s[mi][ni][e] * a.scale_log2 : -INFINITY;
          mx[mi][e >> 1] = fmaxf(mx[mi][e >> 1], s[mi][ni][e]);
        }
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float v = quad_max(mx[mi][h]);
        if (t == 0) sRed[kg * kHeads + hq0 + 16 * mi + g + 8 * h] = v;
      }
    __syncthreads();  // (S3)
    // Running max over the 4 key groups in a fixed order, rescale, P = exp2(s - m) as bf16.
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int head = hq0 + 16 * mi + g + 8 * h;
        float tmax = sRed[head];
#pragma unroll
        for (int k = 1; k < 4; ++k) tmax = fmaxf(tmax, sRed[k * kHeads + head]);
        const float mn = fmaxf(m_run[mi][h], tmax);
        const float alpha = mn == -INFINITY ? 1.0f : exp2f(m_run[mi][h] - mn);  // m = -inf: 0
        m_run[mi][h] = mn;
        l_run[mi][h] *= alpha;
        if (kg == 0 && t == 0) sAlpha[head] = alpha;
      }
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 2; ++ni) {
        float p[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float mn = m_run[mi][e >> 1];
          p[e] = mn == -INFINITY ? 0.0f : exp2f(s[mi][ni][e] - mn);  // s = -inf: 0
          l_run[mi][e >> 1] += p[e];
        }
        const int key = kq0 + 8 * ni + 2 * t;
        __nv_bfloat16* pr = sP + (hq0 + 16 * mi + g) * kLdP + key;
        *reinterpret_cast<uint32_t*>(pr) = mma_bf16::pack(p[0], p[1]);
        *reinterpret_cast<uint32_t*>(pr + 8 * kLdP) = mma_bf16::pack(p[2], p[3]);
      }
    __syncthreads();  // (S4)

    // O = alpha O + P V over dims dv0 .. +64, all 64 heads.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float al0 = sAlpha[16 * i + g], al1 = sAlpha[16 * i + g + 8];
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        acc[i][n][0] *= al0;
        acc[i][n][1] *= al0;
        acc[i][n][2] *= al1;
        acc[i][n][3] *= al1;
      }
    }
    {
      const __nv_bfloat16* pa = sP + ((lane & 7) + ((lane >> 3) & 1) * 8) * kLdP + (lane >> 4) * 8;
      const __nv_bfloat16* vb = sK + ((lane & 7) + ((lane >> 3) & 1) * 8) * kLd + dv0 + (lane >> 4) * 8;
#pragma unroll
      for (int kk = 0; kk < kKeys; kk += 16) {
        uint32_t pf[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i) ldmatrix_x4(pf[i], pa + 16 * i * kLdP + kk);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t b[4];
          mma_bf16::ldmatrix_x4_trans(b, vb + kk * kLd + 16 * np);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            mma_bf16::mma(acc[i][2 * np], pf[i], b[0], b[1]);
            mma_bf16::mma(acc[i][2 * np + 1], pf[i], b[2], b[3]);
          }
        }
      }
    }
  }

  // Row sums: each QK thread's partial over its keys, summed over the quad, then over the 4
  // key groups in a fixed order (sRed reused after a barrier).
  __syncthreads();
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = quad_sum(l_run[mi][h]);
      const int head = hq0 + 16 * mi + g + 8 * h;
      if (t == 0) sRed[kg * kHeads + head] = l;
      if (t == 0 && kg == 0) sM[head] = m_run[mi][h];
    }
  __syncthreads();

  if constexpr (kSplit) {
    const int64_t split = blockIdx.y;
    if (tid < kHeads && h0 + tid < a.n_heads) {
      const float l = ((sRed[tid] + sRed[kHeads + tid]) + sRed[2 * kHeads + tid]) + sRed[3 * kHeads + tid];
      a.ws_ml[(row * a.n_heads + h0 + tid) * a.n_splits + split] = make_float2(sM[tid], l);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t head = h0 + 16 * i + g + 8 * h;
        if (head >= a.n_heads) continue;
        float* wa = a.ws_acc + ((row * a.n_heads + head) * a.n_splits + split) * kDim + dv0 + 2 * t;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          *reinterpret_cast<float2*>(wa + 8 * n) = make_float2(acc[i][n][2 * h], acc[i][n][2 * h + 1]);
        }
      }
  } else {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int hl = 16 * i + g + 8 * h;
      const int64_t head = h0 + hl;
      if (head >= a.n_heads) continue;
      const float l = ((sRed[hl] + sRed[kHeads + hl]) + sRed[2 * kHeads + hl]) + sRed[3 * kHeads + hl];
      const float m = sM[hl];
      const float sink = a.sinks[head] * kLog2e;
      const float mu = fmaxf(m, sink);
      const float f = exp2f(m - mu);  // 0 when the row had no key
      const float inv = f / (l * f + exp2f(sink - mu));
      float* oh = a.out + (row * a.n_heads + head) * kDim + dv0 + 2 * t;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        *reinterpret_cast<float2*>(oh + 8 * n) = make_float2(acc[i][n][2 * h] * inv, acc[i][n][2 * h + 1] * inv);
      }
    }
  }
}

// One block per (row, head): merges the row's chunks 0, 1, ... (those holding keys) in that
// order, then the sink (log2 domain, as the partials).
__global__ void __launch_bounds__(kCombineThreads) sm90_decode_combine_kernel(DecodeArgs a) {
  const int64_t row = blockIdx.x / a.n_heads, head = blockIdx.x % a.n_heads;
  const int64_t n_keys = kv_device::n_keys_of(a.src[0], row) + kv_device::n_keys_of(a.src[1], row);
  const int64_t chunk = decode_chunk_keys(n_keys, a.n_splits);
  const int64_t n_chunks = (n_keys + chunk - 1) / chunk;  // 0 when the row has no key
  const int64_t base = (row * a.n_heads + head) * a.n_splits;
  __shared__ float s_w[kMaxSplits];
  float mx = -INFINITY;
  for (int64_t c = 0; c < n_chunks; ++c) mx = fmaxf(mx, a.ws_ml[base + c].x);
  float l = 0.0f;
  for (int64_t c = 0; c < n_chunks; ++c) {
    const float2 ml = a.ws_ml[base + c];
    const float w = ml.x == -INFINITY ? 0.0f : exp2f(ml.x - mx);  // all-hole chunk: weight 0
    l += ml.y * w;
    if (threadIdx.x == 0) s_w[c] = w;
  }
  __syncthreads();
  const float sink = a.sinks[head] * kLog2e;
  const float mu = fmaxf(mx, sink);
  const float f = exp2f(mx - mu);  // 0 when no chunk saw a key
  const float inv = f / (l * f + exp2f(sink - mu));
  float* oh = a.out + (row * a.n_heads + head) * kDim;
  const float* acc = a.ws_acc + base * kDim;
  for (int i = threadIdx.x * 4; i < kDim; i += kCombineThreads * 4) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int64_t c = 0; c < n_chunks; ++c) {
      const float w = s_w[c];
      const float4 x = *reinterpret_cast<const float4*>(acc + c * kDim + i);
      v.x += w * x.x;
      v.y += w * x.y;
      v.z += w * x.z;
      v.w += w * x.w;
    }
    *reinterpret_cast<float2*>(oh + i) = make_float2(v.x * inv, v.y * inv);
    *reinterpret_cast<float2*>(oh + i + 2) = make_float2(v.z * inv, v.w * inv);
  }
}

int sm_count() {
  static const int n = [] {
    int dev = 0, count = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev));
    return std::max(count, 1);
  }();
  return n;
}

// Chunks per row: only when the unsplit grid leaves SMs idle, as many as fill one wave (at
// most one per tile of the longest list, at most kMaxSplits). Depends on shapes only.
int64_t plan_splits(int64_t n_rows, int64_t n_groups, int64_t max_keys) {
  const int64_t blocks = n_rows * n_groups, sms = sm_count();
  if (blocks <= 0 || blocks * 2 > sms) return 1;
  int64_t ns = sms / blocks;
  ns = std::min(ns, (max_keys + kKeys - 1) / kKeys);
  ns = std::min<int64_t>(ns, kMaxSplits);
  return std::max<int64_t>(ns, 1);
}

int64_t split_bytes(int64_t n_rows, int64_t n_heads, int64_t n_splits) {
  if (n_splits <= 1) return 0;
  return n_rows * n_heads * n_splits * (kDim + 2) * static_cast<int64_t>(sizeof(float));
}

// The reason a call is not supported, or nullptr.
const char* unsupported_reason(const PagedAttentionParams& p) {
  const KvSource& ref = kv_device::reference_source(p);
  const KvCacheLayout& l = ref.layout;
  if (l.head_dim != kDim) return "head_dim must be 512";
  const bool model1 = l.fp8() && l.fp8_format() == KvEntryFormat::kModel1;
  if (model1 && l.rope_dim != kDim - kNope) return "the MODEL1 fp8 cache needs rope_dim 64";
  for (const KvSource& s : p.sources) {
    if (s.max_indices == 0 || !l.fp8()) continue;
    const KvEntryFormat f = s.layout.fp8_format();
    const bool v41 = f == KvEntryFormat::kE4m3Block32 || f == KvEntryFormat::kE2m1E4m3Block16;
    if (model1 ? f != KvEntryFormat::kModel1 : !v41) return "fp8 sources must be MODEL1, or V4.1's formats";
    if (v41 && s.layout.rope_dim != 0) return "V4.1's fp8 formats have no bf16 RoPE dims (rope_dim 0)";
  }
  for (const KvSource& s : p.sources) {
    if (s.max_indices > 0 && reinterpret_cast<uintptr_t>(s.cache) % 16 != 0) return "cache not 16-byte aligned";
  }
  if (reinterpret_cast<uintptr_t>(p.q) % 16 != 0 || reinterpret_cast<uintptr_t>(p.out) % 8 != 0) {
    return "q must be 16-byte and out 8-byte aligned";
  }
  return nullptr;
}

}  // namespace

bool sm90_paged_decode_supported(const PagedAttentionParams& p) { return unsupported_reason(p) == nullptr; }

int64_t sm90_paged_decode_workspace_bytes(int64_t n_rows, int64_t n_heads, int64_t head_dim,
                                          int64_t max_keys) {
  if (head_dim != kDim || n_heads <= 0) return 0;
  const int64_t groups = (n_heads + kHeads - 1) / kHeads;
  int64_t most = 0;
  for (int64_t n = 1; n <= std::min<int64_t>(n_rows, sm_count()); ++n) {
    most = std::max(most, split_bytes(n, n_heads, plan_splits(n, groups, max_keys)));
  }
  return most;
}

int64_t sm90_paged_decode_splits(int64_t n_rows, int64_t n_heads, int64_t max_keys) {
  return plan_splits(n_rows, (n_heads + kHeads - 1) / kHeads, max_keys);
}

void sm90_paged_decode_cuda(cudaStream_t stream, const PagedAttentionParams& p) {
  DecodeArgs a;
  const KvCacheLayout layout = kv_device::key_sources(p, a.src, "paged decode (sm90)");
  const char* why = unsupported_reason(p);
  CHECK_KIND(kUnsupported, why == nullptr) << "paged decode (sm90): " << why << " (head_dim "
                                           << layout.head_dim << ", rope_dim " << layout.rope_dim << ")";
  if (p.n_rows == 0 || p.n_heads == 0) return;
  CHECK(p.sinks != nullptr) << "paged decode (sm90): sinks required";
  a.q = p.q;
  a.out = p.out;
  a.sinks = p.sinks;
  a.n_heads = p.n_heads;
  a.n_groups = (p.n_heads + kHeads - 1) / kHeads;
  a.scale_log2 = p.scale * kLog2e;
  a.any_cache = a.src[0].cache != nullptr ? a.src[0].cache : a.src[1].cache;
  const int64_t blocks = p.n_rows * a.n_groups;
  CHECK_KIND(kUnsupported, blocks < (int64_t{1} << 31) && p.n_rows * p.n_heads < (int64_t{1} << 31))
      << "paged decode (sm90): " << p.n_rows << " rows x " << a.n_groups << " head groups";
  const int64_t max_keys = a.src[0].max_indices + a.src[1].max_indices;
  a.n_splits = p.workspace != nullptr ? plan_splits(p.n_rows, a.n_groups, max_keys) : 1;
  const int fmt = layout.dtype != KvCacheDtype::kFp8                  ? kFmtBf16
                  : layout.fp8_format() == KvEntryFormat::kModel1 ? kFmtModel1
                                                                    : kFmtV41;
  auto pick = [&](bool split) {
    if (fmt == kFmtV41) return split ? sm90_paged_decode_kernel<kFmtV41, true> : sm90_paged_decode_kernel<kFmtV41, false>;
    if (fmt == kFmtModel1) {
      return split ? sm90_paged_decode_kernel<kFmtModel1, true> : sm90_paged_decode_kernel<kFmtModel1, false>;
    }
    return split ? sm90_paged_decode_kernel<kFmtBf16, true> : sm90_paged_decode_kernel<kFmtBf16, false>;
  };
  // Opt in to the shared memory plan once per kernel (not a stream operation).
  static std::once_flag once;
  std::call_once(once, [] {
    for (auto k : {sm90_paged_decode_kernel<kFmtV41, true>, sm90_paged_decode_kernel<kFmtV41, false>,
                   sm90_paged_decode_kernel<kFmtModel1, true>, sm90_paged_decode_kernel<kFmtModel1, false>,
                   sm90_paged_decode_kernel<kFmtBf16, true>, sm90_paged_decode_kernel<kFmtBf16, false>}) {
      CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    }
  });
  if (a.n_splits <= 1) {
    pick(false)<<<static_cast<unsigned>(blocks), kThreads, kSmemBytes, stream>>>(a);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t need = split_bytes(p.n_rows, p.n_heads, a.n_splits);
  CHECK(p.workspace_bytes >= need) << "paged decode (sm90): workspace of " << p.workspace_bytes << " bytes, "
                                   << need << " needed for " << p.n_rows
                                   << " rows (sm90_paged_decode_workspace_bytes)";
  CHECK(reinterpret_cast<uintptr_t>(p.workspace) % 16 == 0) << "paged decode (sm90): workspace not 16-byte aligned";
  a.ws_acc = static_cast<float*>(p.workspace);
  a.ws_ml = reinterpret_cast<float2*>(a.ws_acc + p.n_rows * p.n_heads * a.n_splits * kDim);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(a.n_splits));
  pick(true)<<<grid, kThreads, kSmemBytes, stream>>>(a);
  CUDA_CHECK_LAUNCH();
  sm90_decode_combine_kernel<<<static_cast<unsigned>(p.n_rows * p.n_heads), kCombineThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
