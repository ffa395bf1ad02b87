// Exact bf16 forms of the paged caches' coded dims (formats in kv_cache.h / index_cache.h), 8
// consecutive dims at a time, for the tensor-core kernels (paged_attention_mma.cu,
// sm90_paged_decode.cu, index_cache_mma.cu). Every value is a code (e4m3: <= 4 significant
// bits; e2m1: <= 2) times a power-of-two or e4m3 scale (<= 4 bits): at most 6 significant
// bits inside bf16's exponent range, so the bf16 value is exact. Included by .cu files.
#pragma once

#include <cstdint>

#include "ops/kv_cache/kv_cache_device.cuh"
#include "ops/kv_cache/mma_bf16.cuh"

namespace deepinfer::kv_device {

// 8 e4m3 codes (codes.x bytes 0..3 = dims 0..3, codes.y = dims 4..7) times sc, as 4 bf16x2.
__device__ __forceinline__ uint4 e4m3x8_bf16(uint2 codes, float sc) {
  const float2 v0 = e4m3x2_values(codes.x), v1 = e4m3x2_values(codes.x >> 16);
  const float2 v2 = e4m3x2_values(codes.y), v3 = e4m3x2_values(codes.y >> 16);
  return make_uint4(mma_bf16::pack(v0.x * sc, v0.y * sc), mma_bf16::pack(v1.x * sc, v1.y * sc),
                    mma_bf16::pack(v2.x * sc, v2.y * sc), mma_bf16::pack(v3.x * sc, v3.y * sc));
}

// 8 e2m1 codes in 4 bytes (dim 2i in the low nibble of byte i, 2i + 1 in its high nibble)
// times sc, as 4 bf16x2.
__device__ __forceinline__ uint4 e2m1x8_bf16(uint32_t codes, float sc) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = mma_bf16::pack(e2m1_value(codes >> (8 * i)) * sc, e2m1_value(codes >> (8 * i + 4)) * sc);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

}  // namespace deepinfer::kv_device
