// bf16 tensor-core helpers of the paged kernels (paged_attention_mma.cu, index_cache_mma.cu):
// mma.sync m16n8k16 with fp32 accumulation, the A fragment from a row-major shared tile,
// ldmatrix.x4.trans, and the hi + lo split that lets bf16 products carry an fp32 operand to
// ~2^-16 relative. Fragment layouts (PTX ISA, mma.m16n8k16 .bf16), lane = 4 * g + t: A regs
// {(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}; B regs {(k 2t..2t+1, n g),
// (k 2t+8.., n g)}; C {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}. Included by .cu files.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace deepinfer::mma_bf16 {

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// v rounded to bf16 (RNE) and back: the hi term of a hi + lo split (lo = v - round(v)).
__device__ __forceinline__ float round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Four fp32 values as hi terms (first pair) and lo terms (second pair) of packed bf16x2.
__device__ __forceinline__ void split4(const float4 v, uint2& hi, uint2& lo) {
  hi = make_uint2(pack(v.x, v.y), pack(v.z, v.w));
  lo = make_uint2(pack(v.x - round(v.x), v.y - round(v.y)), pack(v.z - round(v.z), v.w - round(v.w)));
}

// The A fragment (16 x 16) of a row-major bf16 tile with row stride ld, p already offset by
// g * ld + 2t to this lane's first element.
__device__ __forceinline__ void a_fragment(uint32_t (&a)[4], const __nv_bfloat16* p, int ld) {
  a[0] = *reinterpret_cast<const uint32_t*>(p);
  a[1] = *reinterpret_cast<const uint32_t*>(p + 8 * ld);
  a[2] = *reinterpret_cast<const uint32_t*>(p + 8);
  a[3] = *reinterpret_cast<const uint32_t*>(p + 8 * ld + 8);
}

// c += a * b (16 x 8 fp32 += 16 x 16 bf16 * 16 x 8 bf16).
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 bf16 matrices, transposed on delivery; lane i gives the address of row i % 8 of
// matrix i / 8 (16-byte aligned rows).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

}  // namespace deepinfer::mma_bf16
