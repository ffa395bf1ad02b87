// Paged sparse attention on bf16 tensor cores (contract in kv_cache_cuda.h,
// paged_attention_mma_cuda). The heads of one query row share its key list (K = V, one entry
// per key), so one CTA takes a row and up to 64 of its heads as the M dimension of
// mma.sync.m16n8k16 (bf16 in, fp32 accumulate):
//   * Q (64 heads x head_dim) goes to shared memory once as two bf16 terms, hi = bf16(q) and
//     lo = bf16(q - hi), which represent q to ~2^-16 relative;
//   * per tile of 32 keys the CTA dequantises the keys into shared memory as bf16 (exact: an
//     e4m3 code times a power-of-two scale, or a bf16 RoPE / bf16-cache value);
//   * 8 warps: warp w owns heads 16 * (w % 4) .. +16 and output dims (w / 4) * head_dim / 2
//     .. +head_dim / 2. Each warp computes S = Q_hi K^T + Q_lo K^T for its 16 heads x 32 keys
//     (the two warps of a head group compute the same S, so their softmax states agree bit
//     for bit), updates the online softmax (fp32), splits P the same way and accumulates
//     P_hi V + P_lo V into its half of O. Every product is then exact to ~2^-16 relative and
//     accumulated in fp32: the result agrees with the fp32 SIMT kernel to fp32-level
//     rounding, at 4 MMAs where plain bf16 would need 2 (3 with the duplicated S).
//   * the sink is merged at the end, as in paged_attention_cuda.
// Fragment layouts: mma_bf16.cuh. The S accumulators of two adjacent 8-key
// tiles are, element for element, the A fragment of P for those 16 keys; V's B fragments come
// from ldmatrix.trans on the [key][dim] tile.
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

using kv_device::Geometry;
using kv_device::KeySource;

constexpr int kHeadsPerCta = 64;
constexpr int kKeys = 32;  // keys per tile
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kPad = 8;  // bf16 per shared row beyond head_dim: rows 16 B apart mod 128 B
constexpr int kMaxDim = 512;
constexpr int kMaxDvTiles = kMaxDim / 2 / 8;  // 8-wide output tiles per warp
// Rows x head groups below which paged_attention_mma_cuda is not worth it (fewer CTAs than
// two per SM of a 132-SM H200; the SIMT kernel's split-K serves those).
constexpr int64_t kMinCtas = 264;

struct MmaArgs {
  const float* q = nullptr;
  float* out = nullptr;
  const float* sinks = nullptr;
  int64_t n_heads = 0, head_dim = 0, nope = 0, n_groups = 1;
  float scale = 1.0f;
  KeySource src[2];
};

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// 8 consecutive dims (c .. c+7) of a key as bf16, exact: e4m3 codes x UE8M0 scale (fp8 NoPE
// dims) or the stored bf16 values (RoPE dims, bf16 caches). data == nullptr: zeros.
// kV41: the V4.1 formats (no bf16 dims): fp4 keys are e2m1 codes x an e4m3 scale per 16
// (products of <= 6 significant bits, exact in bf16), the others e4m3 x UE8M0 per 32.
template <bool kFp8, bool kV41>
__device__ __forceinline__ uint4 key_dims8(const uint8_t* data, const uint8_t* scales, int c,
                                           int nope, bool fp4) {
  if (data == nullptr) return make_uint4(0u, 0u, 0u, 0u);
  if (kV41 && fp4) {
    return kv_device::e2m1x8_bf16(*reinterpret_cast<const uint32_t*>(data + c / 2),
                                  kv_device::e4m3_value(scales[c / 16]));
  }
  if (kFp8 && c < nope) {
    return kv_device::e4m3x8_bf16(*reinterpret_cast<const uint2*>(data + c),
                                  kv_device::e8m0_value(scales[c / (kV41 ? 32 : KvCacheLayout::kScaleGroup)]));
  }
  const int off = kFp8 ? nope + 2 * (c - nope) : 2 * c;
  return *reinterpret_cast<const uint4*>(data + off);
}

template <bool kFp8, bool kV41>
__global__ void __launch_bounds__(kThreads) paged_attention_mma_kernel(MmaArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int D = static_cast<int>(a.head_dim), ld = D + kPad, nope = static_cast<int>(a.nope);
  __nv_bfloat16* sq = reinterpret_cast<__nv_bfloat16*>(smem);  // hi [kHeadsPerCta][ld]
  __nv_bfloat16* sq_lo = sq + kHeadsPerCta * ld;                // lo [kHeadsPerCta][ld]
  __nv_bfloat16* sk = sq_lo + kHeadsPerCta * ld;                // [kKeys][ld]
  __shared__ const uint8_t* s_data[kKeys];
  __shared__ const uint8_t* s_scales[kKeys];
  __shared__ bool s_fp4[kKeys];

  const int64_t row = blockIdx.x / a.n_groups;
  const int64_t h0 = (blockIdx.x % a.n_groups) * kHeadsPerCta;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int rg = warp % 4, half = warp / 4;
  const int n_dv = D / 16;  // this warp's 8-wide output tiles (head_dim / 2 dims)
  const int dv0 = half * (D / 2);

  // Q rows h0 .. h0 + 63 as hi + lo bf16 terms (heads past n_heads: zeros).
  for (int i = threadIdx.x; i < kHeadsPerCta * D / 4; i += kThreads) {
    const int r = i / (D / 4), c = (i % (D / 4)) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (h0 + r < a.n_heads) v = *reinterpret_cast<const float4*>(a.q + ((row * a.n_heads + h0 + r) * D + c));
    mma_bf16::split4(v, *reinterpret_cast<uint2*>(sq + r * ld + c),
                     *reinterpret_cast<uint2*>(sq_lo + r * ld + c));
  }

  const int64_t n0 = kv_device::n_keys_of(a.src[0], row);
  const int64_t n_keys = n0 + kv_device::n_keys_of(a.src[1], row);
  const bool active = h0 + 16 * rg < a.n_heads;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float acc[kMaxDvTiles][4];
#pragma unroll
  for (int i = 0; i < kMaxDvTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

  for (int64_t j0 = 0; j0 < n_keys; j0 += kKeys) {
    __syncthreads();  // the previous tile is consumed (first pass: Q is stored)
    if (threadIdx.x < kKeys) {
      const int64_t j = j0 + threadIdx.x;
      const uint8_t* data = nullptr;
      const uint8_t* scales = nullptr;
      bool fp4 = false;
      if (j < n_keys) {
        const KeySource& s = j < n0 ? a.src[0] : a.src[1];
        const int64_t slot = s.indices[row * s.max_indices + (j < n0 ? j : j - n0)];
        if (slot >= 0) {
          data = s.cache + kv_device::data_offset(s.g, slot);
          if (kFp8) scales = s.cache + kv_device::scale_offset(s.g, slot);
          fp4 = kV41 && s.g.format == KvEntryFormat::kE2m1E4m3Block16;
        }
      }
      s_data[threadIdx.x] = data;
      s_scales[threadIdx.x] = scales;
      s_fp4[threadIdx.x] = fp4;
    }
    __syncthreads();
    for (int u = threadIdx.x; u < kKeys * D / 8; u += kThreads) {
      const int key = u / (D / 8), c = (u % (D / 8)) * 8;
      *reinterpret_cast<uint4*>(sk + key * ld + c) = key_dims8<kFp8, kV41>(s_data[key], s_scales[key], c, nope,
                                                                       s_fp4[key]);
    }
    __syncthreads();
    if (!active) continue;

    // S = Q K^T: 16 heads x 32 keys (4 tiles of 8 keys).
    float s[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    const int qoff = (16 * rg + g) * ld + 2 * t;
    for (int k0 = 0; k0 < D; k0 += 16) {
      uint32_t ah[4], al[4];
      mma_bf16::a_fragment(ah, sq + qoff + k0, ld);
      mma_bf16::a_fragment(al, sq_lo + qoff + k0, ld);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const __nv_bfloat16* kb = sk + (nt * 8 + g) * ld + k0 + 2 * t;
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(kb);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(kb + 8);
        mma_bf16::mma(s[nt], ah, b0, b1);
        mma_bf16::mma(s[nt], al, b0, b1);
      }
    }
    // Scale, mask missing keys, online softmax (row g: elements 0, 1; row g + 8: 2, 3).
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = nt * 8 + 2 * t + (e & 1);
        const bool ok = j0 + key < n_keys && s_data[key] != nullptr;
        s[nt][e] = ok ? s[nt][e] * a.scale : -INFINITY;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
      }
    }
    float alpha[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const float mn = fmaxf(m[hr], quad_max(tile_max[hr]));
      alpha[hr] = mn == -INFINITY ? 1.0f : expf(m[hr] - mn);  // m = -inf: 0
      m[hr] = mn;
      l[hr] *= alpha[hr];
    }
    uint32_t pa[2][4], pl[2][4];  // P (hi, lo) as the A fragments of keys 0-15 and 16-31
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float mn = m[e / 2];
        p[e] = mn == -INFINITY ? 0.0f : expf(s[nt][e] - mn);  // s = -inf: 0
        l[e / 2] += p[e];
      }
      pa[nt / 2][(nt % 2) * 2] = mma_bf16::pack(p[0], p[1]);
      pa[nt / 2][(nt % 2) * 2 + 1] = mma_bf16::pack(p[2], p[3]);
      pl[nt / 2][(nt % 2) * 2] =
          mma_bf16::pack(p[0] - mma_bf16::round(p[0]), p[1] - mma_bf16::round(p[1]));
      pl[nt / 2][(nt % 2) * 2 + 1] =
          mma_bf16::pack(p[2] - mma_bf16::round(p[2]), p[3] - mma_bf16::round(p[3]));
    }
#pragma unroll
    for (int i = 0; i < kMaxDvTiles; ++i) {
      acc[i][0] *= alpha[0];
      acc[i][1] *= alpha[0];
      acc[i][2] *= alpha[1];
      acc[i][3] *= alpha[1];
    }
    // O += P V over this warp's output dims; ldmatrix.x4.trans: matrix mi = lane / 8 holds keys
    // kk + (mi & 1) * 8 .. +8, dims n + (mi >> 1) * 8 .. +8.
    const int mi = lane / 8;
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const __nv_bfloat16* vrow = sk + (kk * 16 + (mi & 1) * 8 + lane % 8) * ld + dv0 + (mi >> 1) * 8;
#pragma unroll
      for (int np = 0; np < kMaxDvTiles / 2; ++np) {
        if (2 * np >= n_dv) break;
        uint32_t b[4];
        mma_bf16::ldmatrix_x4_trans(b, vrow + np * 16);
        mma_bf16::mma(acc[2 * np], pa[kk], b[0], b[1]);
        mma_bf16::mma(acc[2 * np], pl[kk], b[0], b[1]);
        mma_bf16::mma(acc[2 * np + 1], pa[kk], b[2], b[3]);
        mma_bf16::mma(acc[2 * np + 1], pl[kk], b[2], b[3]);
      }
    }
  }

  if (!active) return;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t head = h0 + 16 * rg + g + 8 * hr;
    const float lsum = quad_sum(l[hr]);
    if (head >= a.n_heads) continue;
    const float sink = a.sinks[head];
    const float mu = fmaxf(m[hr], sink);
    const float f = expf(m[hr] - mu);  // 0 when the row had no key
    const float inv = f / (lsum * f + expf(sink - mu));
    float* oh = a.out + (row * a.n_heads + head) * D + dv0 + 2 * t;
#pragma unroll
    for (int i = 0; i < kMaxDvTiles; ++i) {
      if (i >= n_dv) break;
      *reinterpret_cast<float2*>(oh + i * 8) = make_float2(acc[i][2 * hr] * inv, acc[i][2 * hr + 1] * inv);
    }
  }
}

}  // namespace

bool paged_attention_mma_supported(const PagedAttentionParams& p) {
  const KvCacheLayout& l = kv_device::reference_source(p).layout;
  return l.head_dim % 32 == 0 && l.head_dim <= kMaxDim && l.rope_dim % 8 == 0;
}

bool paged_attention_mma_preferred(const PagedAttentionParams& p) {
  const int64_t groups = (p.n_heads + kHeadsPerCta - 1) / kHeadsPerCta;
  return paged_attention_mma_supported(p) && p.n_rows * groups >= kMinCtas;
}

void paged_attention_mma_cuda(cudaStream_t stream, const PagedAttentionParams& p) {
  MmaArgs a;
  const KvCacheLayout layout = kv_device::key_sources(p, a.src, "paged attention (mma)");
  CHECK_KIND(kUnsupported, layout.head_dim % 32 == 0 && layout.head_dim <= kMaxDim &&
                               layout.rope_dim % 8 == 0)
      << "paged attention (mma): head_dim " << layout.head_dim << ", rope_dim " << layout.rope_dim
      << " (needs head_dim % 32 == 0, <= " << kMaxDim << ", rope_dim % 8 == 0)";
  if (p.n_rows == 0 || p.n_heads == 0) return;
  CHECK(reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && reinterpret_cast<uintptr_t>(p.out) % 8 == 0)
      << "paged attention (mma): q must be 16-byte and out 8-byte aligned";
  a.q = p.q;
  a.out = p.out;
  a.sinks = p.sinks;
  a.n_heads = p.n_heads;
  a.head_dim = layout.head_dim;
  a.nope = layout.dtype == KvCacheDtype::kFp8 ? layout.nope_dim() : layout.head_dim;
  a.scale = p.scale;
  a.n_groups = (p.n_heads + kHeadsPerCta - 1) / kHeadsPerCta;
  const int64_t blocks = p.n_rows * a.n_groups;
  CHECK_KIND(kUnsupported, blocks < (int64_t{1} << 31))
      << "paged attention (mma): " << p.n_rows << " rows x " << a.n_groups << " head groups";
  const int smem = static_cast<int>((2 * kHeadsPerCta + kKeys) * (layout.head_dim + kPad) * 2);
  const bool fp8 = layout.dtype == KvCacheDtype::kFp8;
  // The V4.1 formats (rope_dim 0: key_sources never pairs them with kModel1).
  const bool v41 = fp8 && layout.format != KvEntryFormat::kModel1;
  auto kernel = v41 ? paged_attention_mma_kernel<true, true>
                : fp8 ? paged_attention_mma_kernel<true, false> : paged_attention_mma_kernel<false, false>;
  // Opt in to the largest shared memory any head_dim needs, once per kernel (not a stream
  // operation, but kept out of every later call).
  static std::once_flag once[3];
  std::call_once(once[v41 ? 2 : fp8 ? 1 : 0], [&] {
    const int most = (2 * kHeadsPerCta + kKeys) * (kMaxDim + kPad) * 2;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
  });
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
