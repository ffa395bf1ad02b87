// Block-scaled FP8 GEMM on Hopper's native FP8 tensor cores (wgmma), gemm.h's contract
// (launcher in gemm_fp8_kernels.h):
//
// y[m, n] = Σ_kb (Σ_{k ∈ kb} xq[m, k] · wq[n, k]) · sx[kb, m] · sw[n / b, kb], b = 32 or 128.
//
// Why another kernel: on sm_90 mma.sync with e4m3 operands is emulated (each FP8 register is
// converted to f16 with F2FP before an HMMA), so the mma.sync kernels (gemm_fp8_mma.cu) and
// the gemv are instruction-bound at block 32 (bench/results/gpu-v41-decode-h200-2026-12-04-*).
// wgmma.mma_async ... .e4m3.e4m3 runs FP8 natively, reading both operands from shared memory.
//
// Instruction: wgmma.mma_async.sync.aligned.m64n{64,128}k32.f32.e4m3.e4m3 (PTX ISA 8.0,
// sm_90a). One instruction covers 32 of K: exactly one block-32 K block. Per K block the
// products are summed by the tensor core into fresh fp32 registers (scale-d = 0), then promoted
// into the running accumulator as acc = fma(partial, sx · sw, acc), for b = 32 after every
// instruction, for b = 128 after the 4 instructions of the block (chained with scale-d = 1).
// Same products and promotions as the mma.sync kernel, but NOT its sums: the FP8 wgmma adds a
// block's products inside the tensor core with fewer than fp32's mantissa bits (measured on
// the H200, 2026-12-04: NMSE 1.1e-8 against the SIMT kernel at every tested shape, ~1e-4
// relative per output; the mma.sync kernels, which Hopper runs through f16 HMMA, give ~1e-13).
// That is the precision DeepSeek's own FP8 kernels have (DeepGEMM promotes every 128), but it
// fails our official-numerics goldens, so kAuto does not use this kernel (gemm.h).
//
// Operands in shared memory, K-major with the 128-byte swizzle: a tile row is 128 K bytes
// (one stage); its 16-byte chunk c is stored at chunk c ^ (row % 8), rows 128 bytes apart, so
// 8 rows form a 1024-byte atom (stage bases are 1024-byte aligned). The matrix descriptor:
// start address >> 4 (bits 0-13), stride between 8-row atoms 1024 >> 4 (bits 32-45), swizzle
// mode 1 = 128 B (bits 62-63); the leading offset is unused when one instruction's K (32 bytes)
// lies inside the swizzle width. K block kk of the stage starts kk · 32 bytes into the atom
// (the hardware applies the XOR to the final address). cp.async (all threads) fills the
// stages; fence.proxy.async makes those generic-proxy writes visible to wgmma's async proxy.
//
// Accumulator layout (PTX ISA, "wgmma D matrix fragment", m64nN f32): warp w of the warpgroup
// owns rows 16 w .. 16 w + 15; lane l (g = l / 4, t = l % 4) holds, for n8 chunk j,
// d[4 j + 0, 1] = row 16 w + g, cols 8 j + 2 t, + 1 and d[4 j + 2, 3] = row 16 w + g + 8.
//
// Two configurations:
//  * prefill (kWgM 2, kWgK 1, BN 128): 128 x 128 CTA tiles, each warpgroup 64 rows; per
//    stage the 4 block-32 instructions alternate between two partial registers sets, so the
//    tensor core computes block kk + 1 while block kk is promoted.
//  * decode (block 32, M <= 64; kWgM 1, kWgK 4, BN 64): 64 x 64 CTAs whose 4 warpgroups take
//    one K block of each stage each, and a cluster of `split` CTAs along z takes consecutive K
//    stage ranges (split from N and K only, never M). Partials are added in one fixed order:
//    warpgroups 1, 2, 3 into 0 through shared memory, then ranks 1.. into rank 0 through
//    distributed shared memory.
// Rows of one M tile never mix with another's, and the K order depends on N and K only: a
// row's result does not depend on M (deterministic, batch independent). Ragged M / N rows and
// K chunks past K are zero-filled; K blocks past n_kb have zero scales.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_fp8_kernels.h"
#include "ops/gemm/sm90_wgmma.cuh"

namespace deepinfer::gemm_detail {
namespace {

using namespace sm90;

constexpr int kTileK = 128;  // K bytes per stage: one 128-byte swizzle row


template <int kKbPerTile_, int kWgM_, int kWgK_, int kBN_, int kStages_>
struct WgCfg {
  static constexpr int kKbPerTile = kKbPerTile_;       // 4: block 32, 1: block 128
  static constexpr int kBlock = kTileK / kKbPerTile_;  // 32 or 128
  static constexpr int kWgM = kWgM_;                   // warpgroups along M (64 rows each)
  static constexpr int kWgK = kWgK_;                   // warpgroups splitting each stage's K blocks
  static constexpr int kBN = kBN_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = 128 * kWgM * kWgK;
  static constexpr int kBM = 64 * kWgM;
  static constexpr int kAcc = kBN / 2;                 // fp32 accumulators per thread
  static constexpr int kNbPerTile = kBN / kBlock;      // weight blocks along N per CTA
  static constexpr int kABytes = kBM * kTileK;
  static constexpr int kBBytes = kBN * kTileK;
  static constexpr int kSxFloats = kKbPerTile * kBM;
  static constexpr int kSwFloats = kKbPerTile * kNbPerTile;
  static constexpr int kStageBytes =
      (kABytes + kBBytes + 4 * (kSxFloats + kSwFloats) + 1023) / 1024 * 1024;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + base alignment
  static constexpr int kRedBytes = 128 * kAcc * 4;  // one warpgroup's accumulators
  static_assert(kWgK == 1 || (kKbPerTile == 4 && 4 % kWgK == 0), "K warpgroups: block 32");
  static_assert(kBN % kBlock == 0 && kNbPerTile >= 1, "a CTA covers whole weight blocks along N");
  static_assert(kBN == 64 || kBN == 128, "wgmma n64 / n128");
  static_assert(kStages * kStageBytes >= std::max(kWgK - 1, 1) * kWgM * kRedBytes,
                "the reduction buffers fit in the stages");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

// d (+)= A[64 x 32] . B[64 x 32]^T, e4m3 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void wgmma_m64n64k32(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "%32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d (+)= A[64 x 32] . B[128 x 32]^T, e4m3 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void wgmma_m64n128k32(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
      "%64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

template <int kBN>
__device__ __forceinline__ void wgmma_k32(float (&d)[kBN / 2], uint64_t a, uint64_t b, int scale_d) {
  if constexpr (kBN == 64) {
    wgmma_m64n64k32(d, a, b, scale_d);
  } else {
    wgmma_m64n128k32(d, a, b, scale_d);
  }
}

// Issues the cp.asyncs of K stage kt; tile rows go to their swizzled chunks.
template <class C>
__device__ __forceinline__ void load_stage(const TileParams& p, uint8_t* stage, int64_t m0,
                                           int64_t n0, int64_t kt) {
  const uint32_t a = smem_addr(stage);
  float* sx = reinterpret_cast<float*>(stage + C::kABytes + C::kBBytes);
  float* sw = sx + C::kSxFloats;
  const int64_t k0 = kt * kTileK;
  for (int i = threadIdx.x; i < (C::kBM + C::kBN) * 8; i += C::kThreads) {
    const int r = i / 8, c = i % 8;
    const uint32_t off = r * kTileK + ((c ^ (r & 7)) << 4);
    const int64_t k = k0 + c * 16;
    if (r < C::kBM) {
      const int64_t m = m0 + r;
      const bool ok = m < p.m && k < p.k;
      cp_async_16(a + off, ok ? p.xq + m * p.k + k : p.xq, ok);
    } else {
      const int64_t n = n0 + (r - C::kBM);
      const bool ok = n < p.n && k < p.k;
      cp_async_16(a + off, ok ? p.wq + n * p.k + k : p.wq, ok);  // the B tile: a + kABytes
    }
  }
  for (int i = threadIdx.x; i < C::kSxFloats + C::kSwFloats; i += C::kThreads) {
    if (i < C::kSxFloats) {
      const int q = i / C::kBM, r = i % C::kBM;
      const int64_t kb = kt * C::kKbPerTile + q, m = m0 + r;
      const bool ok = kb < p.n_kb && m < p.m;
      cp_async_4(sx + i, ok ? p.sx + kb * p.m + m : p.sx, ok);
    } else {
      const int j = i - C::kSxFloats;
      const int q = j / C::kNbPerTile, c = j % C::kNbPerTile;
      const int64_t kb = kt * C::kKbPerTile + q, nb = n0 / C::kBlock + c;
      const bool ok = kb < p.n_kb && nb < p.n_nb;
      cp_async_4(sw + j, ok ? p.sw + nb * p.sw_ld + kb : p.sw, ok);
    }
  }
}

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1) fp8_block_wgmma_kernel(TileParams p) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int wk = wg % C::kWgK, wm = wg / C::kWgK;
  const int warp = tid / 32, lane = tid % 32;
  const int row = wm * 64 + warp * 16 + lane / 4;  // this thread's first row in the tile
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * C::kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * C::kBN;
  const int64_t n_kt_all = (p.k + kTileK - 1) / kTileK;
  const int64_t per_split = (n_kt_all + p.split - 1) / p.split;
  const int64_t kt0 = min(n_kt_all, static_cast<int64_t>(blockIdx.z) * per_split);
  const int64_t n_kt = min(n_kt_all, kt0 + per_split);

  float acc[C::kAcc], part0[C::kAcc], part1[C::kAcc];
#pragma unroll
  for (int i = 0; i < C::kAcc; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < C::kAcc; ++i) part0[i] = part1[i] = 0.0f;

#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (kt0 + s < n_kt) load_stage<C>(p, smem + s * C::kStageBytes, m0, n0, kt0 + s);
    cp_async_commit();
  }

  for (int64_t kt = kt0; kt < n_kt; ++kt) {
    cp_async_wait<C::kStages - 2>();
    fence_proxy_async();
    __syncthreads();  // stage kt is visible to every warpgroup; stage kt - 1 is no longer read
    const int64_t next = kt + C::kStages - 1;
    if (next < n_kt) load_stage<C>(p, smem + ((next - kt0) % C::kStages) * C::kStageBytes, m0, n0, next);
    cp_async_commit();

    uint8_t* st = smem + ((kt - kt0) % C::kStages) * C::kStageBytes;
    const uint32_t a_addr = smem_addr(st) + wm * 64 * kTileK;
    const uint32_t b_addr = smem_addr(st) + C::kABytes;
    const float* sxs = reinterpret_cast<const float*>(st + C::kABytes + C::kBBytes);
    const float* sws = sxs + C::kSxFloats;
    // K blocks of this stage inside K (warpgroup-uniform).
    const int valid = static_cast<int>(min(int64_t{4}, (p.k - kt * kTileK + 31) / 32));
    if constexpr (C::kKbPerTile == 1) {
      // Block 128: the 4 instructions of the K block accumulate; promote once.
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        if (kk < valid) wgmma_k32<C::kBN>(part0, sw128_desc(a_addr + kk * 32), sw128_desc(b_addr + kk * 32), kk > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(part0);
      promote<C>(acc, part0, sxs, sws, 0, row);
    } else {
      // Block 32: this warpgroup's K blocks kk = wk, wk + kWgK, ...; two partial sets alternate.
      constexpr int kMine = 4 / C::kWgK;
#pragma unroll
      for (int i = 0; i < kMine + 1; ++i) {
        if (i < kMine && wk + i * C::kWgK < valid) {  // issue block i
          const int kk = wk + i * C::kWgK;
          wgmma_fence();
          if (i % 2 == 0) {
            wgmma_k32<C::kBN>(part0, sw128_desc(a_addr + kk * 32), sw128_desc(b_addr + kk * 32), 0);
          } else {
            wgmma_k32<C::kBN>(part1, sw128_desc(a_addr + kk * 32), sw128_desc(b_addr + kk * 32), 0);
          }
          wgmma_commit();
        }
        if (i >= 1 && wk + (i - 1) * C::kWgK < valid) {  // promote block i - 1
          const int kk = wk + (i - 1) * C::kWgK;
          if (i < kMine && wk + i * C::kWgK < valid) {
            wgmma_wait<1>();
          } else {
            wgmma_wait<0>();
          }
          if ((i - 1) % 2 == 0) {
            fence_regs(part0);
            promote<C>(acc, part0, sxs, sws, kk, row);
          } else {
            fence_regs(part1);
            promote<C>(acc, part1, sxs, sws, kk, row);
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  reduce_and_store<C>(acc, reinterpret_cast<float*>(smem), p, wk, wm, tid, row, m0, n0);
}


using PrefillB32 = WgCfg<4, 2, 1, 128, 4>;
using PrefillB128 = WgCfg<1, 2, 1, 128, 4>;
using DecodeB32 = WgCfg<4, 1, 4, 64, 6>;

// K-stage split of the decode configuration (one CTA per SM: 512 threads x 125 registers).
int wgmma_decode_split(int64_t n, int64_t k) {
  return k_split(ceil_div64(n, DecodeB32::kBN), ceil_div64(k, kTileK), 1);
}

}  // namespace

void fp8_block_wgmma(cudaStream_t stream, const void* xq, const float* sx, const void* wq,
                     const float* sw, int64_t m, int64_t n, int64_t k, void* y, bool y_bf16,
                     int64_t block) {
  ICHECK(block == 32 || block == 128) << "fp8 gemm (wgmma): block " << block;
  ICHECK(k % 16 == 0) << "fp8 gemm (wgmma): K=" << k << " is not a multiple of 16";
  CHECK_KIND(kUnsupported, reinterpret_cast<uintptr_t>(xq) % 16 == 0 &&
                               reinterpret_cast<uintptr_t>(wq) % 16 == 0)
      << "fp8 gemm (wgmma): xq and wq must be 16-byte aligned";
  if (m == 0 || n == 0 || k == 0) return;
  TileParams p{static_cast<const uint8_t*>(xq), sx, static_cast<const uint8_t*>(wq), sw,
             m, n, k, ceil_div64(k, block), ceil_div64(n, block),
             fp8_weight_scale_ld(k, block), y, y_bf16};
  if (block == 128) {
    launch_tiles<PrefillB128>(fp8_block_wgmma_kernel<PrefillB128>, p, stream, "wgmma");
  } else if (m <= kFp8MmaDecodeMaxM) {
    p.split = wgmma_decode_split(n, k);
    launch_tiles<DecodeB32>(fp8_block_wgmma_kernel<DecodeB32>, p, stream, "wgmma");
  } else {
    launch_tiles<PrefillB32>(fp8_block_wgmma_kernel<PrefillB32>, p, stream, "wgmma");
  }
}

}  // namespace deepinfer::gemm_detail
