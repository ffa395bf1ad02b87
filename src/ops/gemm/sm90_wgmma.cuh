// Device helpers shared by the sm_90a wgmma GEMMs (gemm_fp8_wgmma.cu, gemm_fp8_wgmma_f16.cu):
// cp.async with zero fill, the async-proxy fence, wgmma fence / commit / wait, the shared-memory
// matrix descriptor of a K-major operand in the 128-byte swizzle, and the K split of a decode
// GEMM. Internal to ops/gemm; include from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/cuda_check.h"

namespace deepinfer::gemm_detail::sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
// This thread's generic-proxy shared-memory writes (cp.async) become visible to the async
// proxy (wgmma's operand reads).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from touching d across a wgmma boundary (reads hoisted above a wait).
template <int kN>
__device__ __forceinline__ void fence_regs(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// K-major operand, 128-byte swizzle, 8-row atoms 1024 bytes apart.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

// 16-byte chunk c of row r of a tile whose rows are 128 bytes (one swizzle row), 128-byte
// swizzle: its byte offset from the (1024-byte aligned) tile base.
__device__ __forceinline__ uint32_t sw128_offset(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

// The K split of a decode GEMM, from the tile count along N, the K stages and the CTAs one SM
// holds at a time (never from M: a row's sums do not depend on the batch): the split in 1..8
// (a portable cluster; at least 2 stages per CTA) that wastes the least of the last wave,
// the smaller on a tie.
inline int k_split(int64_t tiles, int64_t stages, int ctas_per_sm) {
  static const int sms = [] {
    int dev = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  const int64_t slots = static_cast<int64_t>(sms) * ctas_per_sm;
  int best = 1;
  double best_use = 0.0;
  for (int s = 1; s <= 8 && (s == 1 || stages >= 2 * s); ++s) {
    const int64_t ctas = tiles * s;
    const double use = static_cast<double>(ctas) / static_cast<double>((ctas + slots - 1) / slots * slots);
    if (use > best_use + 1e-9) {
      best_use = use;
      best = s;
    }
  }
  return best;
}

}  // namespace deepinfer::gemm_detail::sm90
