// Device helpers of the paged K=V cache (formats in kv_cache.h): byte offsets of a slot,
// bf16 encoding bit-identical to base/dtype.h's f32_to_bf16, exact e4m3 / UE8M0 / bf16
// decoding, the warp max, and the grid of the one-warp-per-entry kernels. Included by .cu
// files only.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "base/error.h"
#include "ops/kv_cache/kv_cache.h"

namespace deepinfer::kv_device {

// A layout's derived sizes, computed once on the host (KvCacheLayout's methods are host-only).
// fp8: codes present (any KvEntryFormat); format / group: the fp8 format and its dims per
// scale (kModel1 64, kE4m3Block32 32, kE2m1E4m3Block16 16).
struct Geometry {
  int64_t head_dim = 0, nope = 0, n_scales = 0, block_size = 1;
  int64_t data_bytes = 0, scale_bytes = 0, block_bytes = 0;
  bool fp8 = false;
  KvEntryFormat format = KvEntryFormat::kModel1;
  int64_t group = KvCacheLayout::kScaleGroup;
};

inline Geometry geometry(const KvCacheLayout& l) {
  Geometry g;
  g.head_dim = l.head_dim;
  g.fp8 = l.dtype == KvCacheDtype::kFp8;
  g.format = l.fp8_format();
  g.group = l.scale_group();
  g.nope = g.fp8 ? l.nope_dim() : l.head_dim;
  g.n_scales = l.n_scales();
  g.block_size = l.block_size;
  g.data_bytes = l.data_bytes();
  g.scale_bytes = l.scale_bytes();
  g.block_bytes = l.block_bytes();
  return g;
}

__device__ __forceinline__ int64_t data_offset(const Geometry& g, int64_t slot) {
  return slot / g.block_size * g.block_bytes + slot % g.block_size * g.data_bytes;
}

__device__ __forceinline__ int64_t scale_offset(const Geometry& g, int64_t slot) {
  return slot / g.block_size * g.block_bytes + g.block_size * g.data_bytes +
         slot % g.block_size * g.scale_bytes;
}

// One key pool of a paged attention call on the device (KvSource without the host-only parts)
// and its key count for a row: n_indices[row], or max_indices when n_indices is null.
struct KeySource {
  const uint8_t* cache = nullptr;
  const int32_t* indices = nullptr;
  const int32_t* n_indices = nullptr;
  int64_t max_indices = 0;
  Geometry g;
};

__device__ __forceinline__ int64_t n_keys_of(const KeySource& s, int64_t row) {
  if (s.max_indices == 0) return 0;
  return s.n_indices != nullptr ? s.n_indices[row] : s.max_indices;
}

// Host side of a paged attention call. reference_source: the source whose layout the call
// uses (sources[0], or sources[1] when only it is used). key_sources (`who` names the kernel
// in errors): that layout validated, both sources checked (cache and indices present, same
// dtype / head_dim / rope_dim) and copied into `out` (a source with max_indices 0 stays
// empty); returns the reference layout.
inline const KvSource& reference_source(const PagedAttentionParams& p) {
  return p.sources[1].max_indices > 0 && p.sources[0].max_indices == 0 ? p.sources[1] : p.sources[0];
}

inline KvCacheLayout key_sources(const PagedAttentionParams& p, KeySource (&out)[2], const char* who) {
  const KvCacheLayout layout = reference_source(p).layout;
  layout.validate();
  for (int s = 0; s < 2; ++s) {
    const KvSource& src = p.sources[s];
    if (src.max_indices == 0) continue;
    CHECK(src.cache != nullptr && src.indices != nullptr)
        << who << ": source " << s << " without cache or indices";
    src.layout.validate();
    CHECK(src.layout.dtype == layout.dtype && src.layout.head_dim == layout.head_dim &&
          src.layout.rope_dim == layout.rope_dim)
        << who << ": sources differ in dtype/head_dim/rope_dim";
    out[s] = {src.cache, src.indices, src.n_indices, src.max_indices, geometry(src.layout)};
  }
  return layout;
}

// Same bits as f32_to_bf16 (RNE; NaN keeps its payload with the quiet bit set).
__device__ __forceinline__ uint32_t bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return ((u >> 16) | 0x40u) & 0xffffu;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}

__device__ __forceinline__ float bf16_value(uint32_t bits) { return __uint_as_float(bits << 16); }

// UE8M0 code -> 2^(code - 127) for the codes kv_store writes (1..254).
__device__ __forceinline__ float e8m0_value(uint32_t code) { return __uint_as_float(code << 23); }

// Two e4m3 codes (low byte first) -> their exact values (e4m3 -> f16 -> f32 is exact).
__device__ __forceinline__ float2 e4m3x2_values(uint32_t two_codes) {
  const __half2_raw raw =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes & 0xffffu), __NV_E4M3);
  return __half22float2(__half2(raw));
}

// One e4m3 code -> its exact value.
__device__ __forceinline__ float e4m3_value(uint32_t code) { return e4m3x2_values(code & 0xffu).x; }

// e2m1 code (bit 3 sign, magnitude index {0, .5, 1, 1.5, 2, 3, 4, 6}) -> its value.
__device__ __forceinline__ float e2m1_value(uint32_t code) {
  const uint32_t i = code & 7u;
  const float mag = i < 2 ? 0.5f * static_cast<float>(i)
                          : (1.0f + 0.5f * static_cast<float>(i & 1u)) * __uint_as_float((126u + (i >> 1)) << 23);
  return code & 8u ? -mag : mag;
}

// e2m1 code of q (|q| <= 6): base/dtype.h's f32_to_e2m1 (RNE via qat_device's rounding; the
// sign is q's sign bit, so a negative q that rounds to 0 gives code 8 as on the CPU).
__device__ __forceinline__ uint32_t e2m1_code_of(float rounded, float q) {
  const uint32_t sign = (__float_as_uint(q) >> 28) & 8u;
  const float a = fabsf(rounded);
  if (a < 1.0f) return sign | static_cast<uint32_t>(a * 2.0f);
  const uint32_t bits = __float_as_uint(a);
  return sign | (2u + 2u * ((bits >> 23) - 127u) + ((bits >> 22) & 1u));
}

// Exact e4m3 value `v` (already on the e4m3 grid, |v| <= 448) -> its code, sign of zero kept
// (as base/dtype.h's f32_to_e4m3 does): normals 1.m * 2^(E-7) -> E<<3 | m, subnormals
// m * 2^-9 -> m. Plain bit arithmetic, so no dependence on the hardware conversion's
// handling of -0.
__device__ __forceinline__ uint32_t e4m3_code(float v) {
  const uint32_t bits = __float_as_uint(v);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t mag = bits & 0x7fffffffu;
  if (mag == 0) return sign;
  const int e = static_cast<int>(mag >> 23) - 127;
  if (e < -6) return sign | static_cast<uint32_t>(__uint_as_float(mag) * 512.0f);
  return sign | (static_cast<uint32_t>(e + 7) << 3) | ((mag >> 20) & 7u);
}

// Maximum over the 32 lanes of a warp (xor-shuffle tree; every lane gets the result).
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// One warp per entry, blocks of `warps` warps: the entry of the calling warp for a store. False
// (nothing to do) when the warp has none (i >= n) or its slot is -1; else sets i and slot.
__device__ __forceinline__ bool store_entry(int warps, const int32_t* slots, int64_t n, int64_t& i,
                                            int64_t& slot) {
  i = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32;
  if (i >= n) return false;
  slot = slots[i];
  return slot >= 0;
}

// The same for a load into out [n, head_dim]: sets slot and the entry's row y; a slot of -1
// zero-fills y (the warp's lanes) and returns false, as does a warp without an entry.
__device__ __forceinline__ bool load_entry(int warps, const int32_t* slots, int64_t n,
                                           int64_t head_dim, float* out, int64_t& slot, float*& y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= n) return false;
  slot = slots[i];
  y = out + i * head_dim;
  if (slot < 0) {
    for (int64_t c = lane; c < head_dim; c += 32) y[c] = 0.0f;
    return false;
  }
  return true;
}

// Blocks of `warps` warps for `n` entries, one warp each; `what` ("kv cache: ... entries")
// names the caller in the error of a grid beyond 2^31 blocks.
inline unsigned warp_grid(int64_t n, int warps, const char* cache, const char* entries) {
  const int64_t blocks = (n + warps - 1) / warps;
  CHECK_KIND(kUnsupported, blocks < (int64_t{1} << 31)) << cache << ": " << n << " " << entries
                                                         << " in one call";
  return static_cast<unsigned>(blocks);
}

}  // namespace deepinfer::kv_device
