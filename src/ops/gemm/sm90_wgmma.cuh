// Pieces shared by the sm_90a wgmma GEMMs (gemm_fp8_wgmma.cu, gemm_fp8_wgmma_f16.cu): cp.async
// with zero fill, the async-proxy fence, wgmma fence / commit / wait, the shared-memory matrix
// descriptor of a K-major operand in the 128-byte swizzle, the K split of a decode GEMM, the
// tile parameters, the per-block promotion, the tile epilogue (fixed-order reductions, store)
// and the launcher. Internal to ops/gemm; include from .cu files only.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "base/error.h"
#include "cuda/cluster_launch.h"
#include "cuda/cuda_check.h"
#include "ops/gemm/gemm.h"

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

// Operands and output of one block-scaled FP8 GEMM tile kernel (gemm.h's contract).
struct TileParams {
  const uint8_t* xq;
  const float* sx;  // [n_kb, m]
  const uint8_t* wq;
  const float* sw;  // [n_nb, sw_ld]
  int64_t m, n, k, n_kb, n_nb, sw_ld;
  void* y;
  bool y_bf16;
  int split = 1;  // CTAs per cluster along z (decode)
};

// acc = fma(part, sx[row] · sw[col block], acc) for K block q of the stage (the accumulator
// layout of gemm_fp8_wgmma.cu's header; C: the tile configuration, kBM x kBN, kBlock).
template <class C>
__device__ __forceinline__ void promote(float (&acc)[C::kAcc], const float (&part)[C::kAcc],
                                        const float* sxs, const float* sws, int q, int row) {
  const float x_lo = sxs[q * C::kBM + row], x_hi = sxs[q * C::kBM + row + 8];
#pragma unroll
  for (int j = 0; j < C::kBN / 8; ++j) {
    const float w = sws[q * C::kNbPerTile + (j * 8) / C::kBlock];
    const float s_lo = x_lo * w, s_hi = x_hi * w;
    acc[4 * j + 0] = fmaf(part[4 * j + 0], s_lo, acc[4 * j + 0]);
    acc[4 * j + 1] = fmaf(part[4 * j + 1], s_lo, acc[4 * j + 1]);
    acc[4 * j + 2] = fmaf(part[4 * j + 2], s_hi, acc[4 * j + 2]);
    acc[4 * j + 3] = fmaf(part[4 * j + 3], s_hi, acc[4 * j + 3]);
  }
}

// The tile's sums into y, in one fixed order: K warpgroups 1.. into 0 through shared memory
// (red: the CTA's shared memory, the stages being done; accumulator e of thread tid at
// [slot][e][tid], conflict-free), then cluster ranks 1.. into rank 0 through distributed shared
// memory; rank 0's K warpgroup 0 stores (ragged rows / columns skipped).
template <class C>
__device__ __forceinline__ void reduce_and_store(float (&acc)[C::kAcc], float* red, const TileParams& p,
                                                 int wk, int wm, int tid, int row, int64_t m0, int64_t n0) {
  const int lane = tid % 32;
  if constexpr (C::kWgK > 1) {
    __syncthreads();  // every warpgroup is done with the stages
    if (wk > 0) {
      float* dst = red + ((wk - 1) * C::kWgM + wm) * (C::kRedBytes / 4) + tid;
#pragma unroll
      for (int e = 0; e < C::kAcc; ++e) dst[e * 128] = acc[e];
    }
    __syncthreads();
    if (wk == 0) {
      for (int w = 1; w < C::kWgK; ++w) {
        const float* src = red + ((w - 1) * C::kWgM + wm) * (C::kRedBytes / 4) + tid;
#pragma unroll
        for (int e = 0; e < C::kAcc; ++e) acc[e] += src[e * 128];
      }
    }
  }
  if (p.split > 1) {
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    const unsigned rank = cluster.block_rank();
    __syncthreads();  // the warpgroup buffers (same bytes) have been read
    float* mine = red + wm * (C::kRedBytes / 4) + tid;
    if (rank != 0 && wk == 0) {
#pragma unroll
      for (int e = 0; e < C::kAcc; ++e) mine[e * 128] = acc[e];
    }
    cluster.sync();
    if (rank == 0 && wk == 0) {
      for (int r = 1; r < p.split; ++r) {
        const float* src = cluster.map_shared_rank(mine, static_cast<unsigned>(r));
#pragma unroll
        for (int e = 0; e < C::kAcc; ++e) acc[e] += src[e * 128];
      }
    }
    cluster.sync();  // rank 0 has read every rank's buffer
    if (rank != 0) return;
  }
  if (wk != 0) return;

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t m = m0 + row + half * 8;
    if (m >= p.m) continue;
#pragma unroll
    for (int j = 0; j < C::kBN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t n = n0 + j * 8 + 2 * (lane % 4) + e;
        if (n >= p.n) continue;
        const float v = acc[4 * j + half * 2 + e];
        if (p.y_bf16) {
          static_cast<__nv_bfloat16*>(p.y)[m * p.n + n] = __float2bfloat16(v);
        } else {
          static_cast<float*>(p.y)[m * p.n + n] = v;
        }
      }
    }
  }}

// Launches one tile configuration's kernel (grid: N tiles x M tiles x split; a cluster along z
// when split > 1). The shared-memory attribute is set once per configuration.
template <class C>
void launch_tiles(void (*kernel)(TileParams), const TileParams& p, cudaStream_t stream, const char* name) {
  static const bool attr_set = [kernel] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    return true;
  }();
  (void)attr_set;
  CHECK_KIND(kUnsupported, ceil_div64(p.m, C::kBM) <= 65535) << "fp8 gemm (" << name << "): M=" << p.m << " too large";
  const dim3 grid(static_cast<unsigned>(ceil_div64(p.n, C::kBN)),
                  static_cast<unsigned>(ceil_div64(p.m, C::kBM)), static_cast<unsigned>(p.split));
  if (p.split == 1) {
    kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(p);
  } else {
    ICHECK(p.split >= 2 && p.split <= 8) << "fp8 gemm (" << name << "): split " << p.split;
    cuda::launch_clustered(kernel, grid, dim3(C::kThreads), C::kSmemBytes, stream,
                           dim3(1, 1, static_cast<unsigned>(p.split)), p);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::gemm_detail::sm90
