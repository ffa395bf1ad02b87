// Block-scaled FP8 GEMM on Hopper's f16 tensor cores (wgmma), with fp32 sums: gemm.h's
// contract (launcher in gemm_fp8_kernels.h), block 32 only:
//
// y[m, n] = Σ_kb (Σ_{k ∈ kb} xq[m, k] · wq[n, k]) · sx[kb, m] · sw[n / 32, kb].
//
// Why not FP8 wgmma (gemm_fp8_wgmma.cu): it adds a block's products with about 14 mantissa
// bits, which fails the V4.1 official goldens. Here every e4m3 code is converted to f16 on chip
// (exact: e4m3 has 3 mantissa bits and exponents -9..8, well inside f16), and the f16 wgmma
// multiplies and adds them with fp32 accumulation, the arithmetic the mma.sync kernels get
// from Hopper's f16 HMMA (NMSE ~1e-13 against the reference). Half the FP8 rate, twice the
// shared-memory operand bytes; the global traffic is the FP8 codes as stored.
//
// Per stage of 64 K (two block-32 K blocks): cp.async brings the raw e4m3 rows (64 bytes) and
// the stage's scales into a ring of kStages raw stages; all threads then convert the stage
// into one f16 operand tile (rows of 128 bytes, the 128-byte swizzle: 16-byte chunk c of row r
// at chunk c ^ (r % 8); gemm_fp8_wgmma.cu describes the descriptor), fence.proxy.async, and
// the warpgroups run wgmma.mma_async.m64n{64,128}k16.f32.f16.f16: two instructions per K
// block, chained (scale-d 0, then 1), then promoted into fp32 as acc = fma(partial, sx · sw,
// acc), the same promotion as the other kernels.
//
// Configurations (as gemm_fp8_wgmma.cu): prefill, 128 x 128 tiles of 2 warpgroups along M,
// each taking both K blocks of a stage (two partial sets alternate); decode (M <= 64),
// 64 x 64 tiles of 2 warpgroups along K (one K block each) and a cluster split of the K stages
// from N and K only (never M); partials added in one fixed order. A row's result does not
// depend on M within a configuration.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_fp8_kernels.h"
#include "ops/gemm/sm90_wgmma.cuh"

namespace deepinfer::gemm_detail {
namespace {

using namespace sm90;

constexpr int kStageK = 64;  // K per stage: one 128-byte row of f16
constexpr int kBlock = 32;   // block 32 only


template <int kWgM_, int kWgK_, int kBN_, int kStages_, bool kLean_ = false>
struct F16Cfg {
  static constexpr bool kLean = kLean_;  // LeanLoader: sources once, dead rows never touched
  static constexpr int kWgM = kWgM_;  // warpgroups along M (64 rows each)
  static constexpr int kWgK = kWgK_;  // warpgroups splitting a stage's 2 K blocks (1 or 2)
  static constexpr int kBN = kBN_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = 128 * kWgM * kWgK;
  static constexpr int kBM = 64 * kWgM;
  static constexpr int kAcc = kBN / 2;
  static constexpr int kBlock = 32;
  static constexpr int kKbPerStage = kStageK / kBlock;  // 2
  static constexpr int kNbPerTile = kBN / kBlock;
  static constexpr int kRawRows = kBM + kBN;
  static constexpr int kRawBytes = kRawRows * kStageK;  // e4m3 rows of 64 bytes
  static constexpr int kSxFloats = kKbPerStage * kBM;
  static constexpr int kSwFloats = kKbPerStage * kNbPerTile;
  static constexpr int kRawStageBytes = (kRawBytes + 4 * (kSxFloats + kSwFloats) + 15) / 16 * 16;
  static constexpr int kOpABytes = kBM * 128;
  static constexpr int kOpBytes = kRawRows * 128;  // f16 A tile then B tile
  static constexpr int kSmemBytes = 1024 + kOpBytes + kStages * kRawStageBytes;
  static constexpr int kRedBytes = 128 * kAcc * 4;
  static_assert(kWgK == 1 || kWgK == 2, "K warpgroups: one per K block of the stage");
  static_assert(kBN == 64 || kBN == 128, "wgmma n64 / n128");
  static_assert(kOpBytes % 1024 == 0, "the B tile starts on a 1024-byte atom");
  static_assert(kOpBytes + kStages * kRawStageBytes >= std::max(kWgK - 1, 1) * kWgM * kRedBytes,
                "the reduction buffers fit");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

// d (+)= A[64 x 16] . B[64 x 16]^T, f16 in (both K-major), fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void wgmma_m64n64k16_f16(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                    int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d (+)= A[64 x 16] . B[128 x 16]^T, f16 in (both K-major), fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void wgmma_m64n128k16_f16(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                    int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

template <int kBN>
__device__ __forceinline__ void wgmma_k16(float (&d)[kBN / 2], uint64_t a, uint64_t b, int scale_d) {
  if constexpr (kBN == 64) {
    wgmma_m64n64k16_f16(d, a, b, scale_d);
  } else {
    wgmma_m64n128k16_f16(d, a, b, scale_d);
  }
}

template <class C>
__device__ __forceinline__ void load_raw(const TileParams& p, uint8_t* raw, int64_t m0, int64_t n0,
                                         int64_t kt) {
  const int64_t k0 = kt * kStageK;
  for (int i = threadIdx.x; i < C::kRawRows * (kStageK / 16); i += C::kThreads) {
    const int r = i / (kStageK / 16), c = i % (kStageK / 16);
    const int64_t k = k0 + c * 16;
    const uint32_t dst = smem_addr(raw + r * kStageK + c * 16);
    if (r < C::kBM) {
      const int64_t m = m0 + r;
      const bool ok = m < p.m && k < p.k;
      cp_async_16(dst, ok ? p.xq + m * p.k + k : p.xq, ok);
    } else {
      const int64_t n = n0 + (r - C::kBM);
      const bool ok = n < p.n && k < p.k;
      cp_async_16(dst, ok ? p.wq + n * p.k + k : p.wq, ok);
    }
  }
  float* sx = reinterpret_cast<float*>(raw + C::kRawBytes);
  float* sw = sx + C::kSxFloats;
  for (int i = threadIdx.x; i < C::kSxFloats + C::kSwFloats; i += C::kThreads) {
    if (i < C::kSxFloats) {
      const int q = i / C::kBM, r = i % C::kBM;
      const int64_t kb = kt * C::kKbPerStage + q, m = m0 + r;
      const bool ok = kb < p.n_kb && m < p.m;
      cp_async_4(sx + i, ok ? p.sx + kb * p.m + m : p.sx, ok);
    } else {
      const int j = i - C::kSxFloats;
      const int q = j / C::kNbPerTile, c = j % C::kNbPerTile;
      const int64_t kb = kt * C::kKbPerStage + q, nb = n0 / kBlock + c;
      const bool ok = kb < p.n_kb && nb < p.n_nb;
      cp_async_4(sw + j, ok ? p.sw + nb * p.sw_ld + kb : p.sw, ok);
    }
  }
}

// Two e4m3 codes (low byte first) -> their f16 pair (low half first).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// The raw stage's e4m3 rows -> the f16 operand tile (swizzled): 16 codes per item.
template <class C>
__device__ __forceinline__ void convert_stage(const uint8_t* raw, uint8_t* op) {
  for (int i = threadIdx.x; i < C::kRawRows * (kStageK / 16); i += C::kThreads) {
    const int r = i / (kStageK / 16), c = i % (kStageK / 16);
    const uint4 v = *reinterpret_cast<const uint4*>(raw + r * kStageK + c * 16);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    uint32_t h[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      h[2 * j] = e4m3x2_to_f16x2(w[j] & 0xffffu);
      h[2 * j + 1] = e4m3x2_to_f16x2(w[j] >> 16);
    }
    *reinterpret_cast<uint4*>(op + sw128_offset(r, 2 * c)) = make_uint4(h[0], h[1], h[2], h[3]);
    *reinterpret_cast<uint4*>(op + sw128_offset(r, 2 * c + 1)) = make_uint4(h[4], h[5], h[6], h[7]);
  }
}

// K block q of the stage (two k16 instructions, chained) into part.
// The lean loader (kLean): each thread's rows and chunks are the same every stage, so
// their sources, shared-memory offsets and liveness are computed once; rows past M or N
// ("dead") are never loaded nor converted (their operand-tile rows are zeroed once), which at
// decode M = 1 skips 63 of the 64 A rows. Scales keep their zero fill. Same operand values as
// load_raw + convert_stage, so the same bits.
template <class C>
struct LeanLoader {
  static constexpr int kItems = C::kRawRows * (kStageK / 16) / C::kThreads;
  static constexpr int kScaleItems = (C::kSxFloats + C::kSwFloats + C::kThreads - 1) / C::kThreads;
  static_assert(C::kRawRows * (kStageK / 16) % C::kThreads == 0, "whole items per thread");
  const uint8_t* src[kItems];
  uint32_t off[kItems];   // byte offset of the chunk in a raw stage (row r * 64 + c * 16)
  int kbyte[kItems];      // the chunk's K offset in the stage (c * 16)
  bool live[kItems];
  const float* ssrc[kScaleItems];
  int sidx[kScaleItems];  // float index in the stage's scale block, -1: none
  int sq[kScaleItems];    // K block of the stage (0, 1)
  bool slive[kScaleItems];
  int64_t sstep[kScaleItems];  // source floats per stage

  __device__ __forceinline__ void init(const TileParams& p, int64_t m0, int64_t n0) {
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int i = threadIdx.x + j * C::kThreads;
      const int r = i / (kStageK / 16), c = i % (kStageK / 16);
      off[j] = static_cast<uint32_t>(r * kStageK + c * 16);
      kbyte[j] = c * 16;
      if (r < C::kBM) {
        live[j] = m0 + r < p.m;
        src[j] = p.xq + (live[j] ? (m0 + r) * p.k : 0) + c * 16;
      } else {
        live[j] = n0 + (r - C::kBM) < p.n;
        src[j] = p.wq + (live[j] ? (n0 + r - C::kBM) * p.k : 0) + c * 16;
      }
    }
#pragma unroll
    for (int j = 0; j < kScaleItems; ++j) {
      const int i = threadIdx.x + j * C::kThreads;
      sidx[j] = i < C::kSxFloats + C::kSwFloats ? i : -1;
      if (i < C::kSxFloats) {
        const int q = i / C::kBM, r = i % C::kBM;
        sq[j] = q;
        slive[j] = m0 + r < p.m;
        ssrc[j] = p.sx + q * p.m + (slive[j] ? m0 + r : 0);
        sstep[j] = C::kKbPerStage * p.m;
      } else {
        const int t = i - C::kSxFloats;
        const int q = t / C::kNbPerTile, c = t % C::kNbPerTile;
        sq[j] = q;
        slive[j] = sidx[j] >= 0 && n0 / kBlock + c < p.n_nb;
        ssrc[j] = p.sw + (slive[j] ? (n0 / kBlock + c) * p.sw_ld : 0) + q;
        sstep[j] = C::kKbPerStage;
      }
    }
  }

  __device__ __forceinline__ void load(const TileParams& p, uint8_t* raw, int64_t kt) const {
    const uint32_t base = smem_addr(raw);
    const int64_t k0 = kt * kStageK;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (!live[j]) continue;
      const bool ok = k0 + kbyte[j] < p.k;
      cp_async_16(base + off[j], ok ? src[j] + k0 : p.xq, ok);
    }
    float* scales = reinterpret_cast<float*>(raw + C::kRawBytes);
#pragma unroll
    for (int j = 0; j < kScaleItems; ++j) {
      if (sidx[j] < 0) continue;
      const bool ok = slive[j] && kt * C::kKbPerStage + sq[j] < p.n_kb;
      cp_async_4(scales + sidx[j], ok ? ssrc[j] + kt * sstep[j] : p.sx, ok);
    }
  }

  // convert_stage for the live rows only.
  __device__ __forceinline__ void convert(const uint8_t* raw, uint8_t* op) const {
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (!live[j]) continue;
      const int i = threadIdx.x + j * C::kThreads;
      const int r = i / (kStageK / 16), c = i % (kStageK / 16);
      const uint4 v = *reinterpret_cast<const uint4*>(raw + off[j]);
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
      uint32_t h[8];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        h[2 * e] = e4m3x2_to_f16x2(w[e] & 0xffffu);
        h[2 * e + 1] = e4m3x2_to_f16x2(w[e] >> 16);
      }
      *reinterpret_cast<uint4*>(op + sw128_offset(r, 2 * c)) = make_uint4(h[0], h[1], h[2], h[3]);
      *reinterpret_cast<uint4*>(op + sw128_offset(r, 2 * c + 1)) = make_uint4(h[4], h[5], h[6], h[7]);
    }
  }
};

template <class C>
__device__ __forceinline__ void issue_block(float (&part)[C::kAcc], uint32_t a_addr, uint32_t b_addr, int q) {
  wgmma_fence();
  wgmma_k16<C::kBN>(part, sw128_desc(a_addr + q * 64), sw128_desc(b_addr + q * 64), 0);
  wgmma_k16<C::kBN>(part, sw128_desc(a_addr + q * 64 + 32), sw128_desc(b_addr + q * 64 + 32), 1);
  wgmma_commit();
}

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1) fp8_block_wgmma_f16_kernel(TileParams p) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint8_t* op = smem;                    // f16 operand tile: A rows, then B rows
  uint8_t* ring = smem + C::kOpBytes;    // raw stages
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int wk = wg % C::kWgK, wm = wg / C::kWgK;
  const int warp = tid / 32, lane = tid % 32;
  const int row = wm * 64 + warp * 16 + lane / 4;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * C::kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * C::kBN;
  const int64_t n_kt_all = (p.k + kStageK - 1) / kStageK;
  const int64_t per_split = (n_kt_all + p.split - 1) / p.split;
  const int64_t kt0 = min(n_kt_all, static_cast<int64_t>(blockIdx.z) * per_split);
  const int64_t n_kt = min(n_kt_all, kt0 + per_split);
  const uint32_t a_addr = smem_addr(op) + wm * 64 * 128;
  const uint32_t b_addr = smem_addr(op) + C::kOpABytes;

  float acc[C::kAcc], part0[C::kAcc], part1[C::kAcc];
#pragma unroll
  for (int i = 0; i < C::kAcc; ++i) acc[i] = part0[i] = part1[i] = 0.0f;

  LeanLoader<C> lean;
  if constexpr (C::kLean) {
    lean.init(p, m0, n0);
    // Dead rows' operand-tile rows stay zero (the per-stage fence publishes these writes too).
    for (int i = threadIdx.x; i < C::kOpBytes / 16; i += C::kThreads)
      reinterpret_cast<uint4*>(op)[i] = make_uint4(0u, 0u, 0u, 0u);
  }
  auto load = [&](int64_t kt, uint8_t* raw) {
    if constexpr (C::kLean) {
      lean.load(p, raw, kt);
    } else {
      load_raw<C>(p, raw, m0, n0, kt);
    }
  };

#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (kt0 + s < n_kt) load(kt0 + s, ring + s * C::kRawStageBytes);
    cp_async_commit();
  }

  for (int64_t kt = kt0; kt < n_kt; ++kt) {
    cp_async_wait<C::kStages - 2>();
    __syncthreads();  // raw stage kt is visible; every warpgroup is done with the operand tile
    const int64_t next = kt + C::kStages - 1;
    if (next < n_kt) load(next, ring + ((next - kt0) % C::kStages) * C::kRawStageBytes);
    cp_async_commit();

    const uint8_t* raw = ring + ((kt - kt0) % C::kStages) * C::kRawStageBytes;
    if constexpr (C::kLean) {
      lean.convert(raw, op);
    } else {
      convert_stage<C>(raw, op);
    }
    fence_proxy_async();
    __syncthreads();  // the operand tile is complete
    const float* sxs = reinterpret_cast<const float*>(raw + C::kRawBytes);
    const float* sws = sxs + C::kSxFloats;
    const int valid = static_cast<int>(min(int64_t{2}, (p.k - kt * kStageK + kBlock - 1) / kBlock));
    if constexpr (C::kWgK == 2) {
      if (wk < valid) {
        issue_block<C>(part0, a_addr, b_addr, wk);
        wgmma_wait<0>();
        fence_regs(part0);
        promote<C>(acc, part0, sxs, sws, wk, row);
      }
    } else {
      issue_block<C>(part0, a_addr, b_addr, 0);
      if (valid > 1) {
        issue_block<C>(part1, a_addr, b_addr, 1);
        wgmma_wait<1>();
        fence_regs(part0);
        promote<C>(acc, part0, sxs, sws, 0, row);
        wgmma_wait<0>();
        fence_regs(part1);
        promote<C>(acc, part1, sxs, sws, 1, row);
      } else {
        wgmma_wait<0>();
        fence_regs(part0);
        promote<C>(acc, part0, sxs, sws, 0, row);
      }
    }
  }
  cp_async_wait<0>();

  reduce_and_store<C>(acc, reinterpret_cast<float*>(smem), p, wk, wm, tid, row, m0, n0);
}


using Prefill16 = F16Cfg<2, 1, 128, 4>;
using Prefill16Lean = F16Cfg<2, 1, 128, 4, true>;
using Decode16 = F16Cfg<1, 2, 64, 8>;
using Decode16Lean = F16Cfg<1, 2, 64, 8, true>;

// The tiles' loader: LeanLoader (default since the 2026-12-04 H200 run,
// bench/results/gpu-v41-wgmma-f16-lean-h200-2026-12-04-0eac4af.md: V4.1 decode B=64 32K 23.05 ->
// 22.59 ms, same bits) or load_raw + convert_stage (DEEPINFER_WGMMA_F16=measured, or
// fp8_wgmma_f16_set_lean(false)), the first loader, kept as the plain path the lean one must equal.
std::atomic<int> g_lean{-1};  // -1: not read from the environment yet
bool lean_loader() {
  int v = g_lean.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("DEEPINFER_WGMMA_F16");
    v = e != nullptr && std::strcmp(e, "measured") == 0 ? 0 : 1;
    int expected = -1;
    g_lean.compare_exchange_strong(expected, v);
    v = g_lean.load(std::memory_order_relaxed);
  }
  return v == 1;
}

// CTAs of the decode configuration one SM holds, for the split: 2 (shared memory ~87 KB each of
// the SM's 228; ptxas gives the kernel 110 registers x 256 threads). A constant rather than
// cudaOccupancyMaxActiveBlocksPerMultiprocessor: the first call may come inside a CUDA-graph
// capture, where only capture-safe API calls are allowed.
constexpr int kDecode16CtasPerSm = 2;
static_assert(kDecode16CtasPerSm * (Decode16::kSmemBytes + 1024) <= 228 * 1024,
              "two decode CTAs fit one SM's shared memory");

}  // namespace

void fp8_wgmma_f16_set_lean(bool on) { g_lean.store(on ? 1 : 0, std::memory_order_relaxed); }

void fp8_block_wgmma_f16(cudaStream_t stream, const void* xq, const float* sx, const void* wq,
                         const float* sw, int64_t m, int64_t n, int64_t k, void* y, bool y_bf16) {
  ICHECK(k % 16 == 0) << "fp8 gemm (wgmma-f16): K=" << k << " is not a multiple of 16";
  CHECK_KIND(kUnsupported, reinterpret_cast<uintptr_t>(xq) % 16 == 0 &&
                               reinterpret_cast<uintptr_t>(wq) % 16 == 0)
      << "fp8 gemm (wgmma-f16): xq and wq must be 16-byte aligned";
  if (m == 0 || n == 0 || k == 0) return;
  TileParams p{static_cast<const uint8_t*>(xq), sx, static_cast<const uint8_t*>(wq), sw,
              m, n, k, ceil_div64(k, kBlock), ceil_div64(n, kBlock),
              fp8_weight_scale_ld(k, kBlock), y, y_bf16};
  if (m <= kFp8MmaDecodeMaxM) {
    p.split = k_split(ceil_div64(n, Decode16::kBN), ceil_div64(k, kStageK), kDecode16CtasPerSm);
    if (lean_loader()) {
      launch_tiles<Decode16Lean>(fp8_block_wgmma_f16_kernel<Decode16Lean>, p, stream, "wgmma-f16");
    } else {
      launch_tiles<Decode16>(fp8_block_wgmma_f16_kernel<Decode16>, p, stream, "wgmma-f16");
    }
  } else if (lean_loader()) {
    launch_tiles<Prefill16Lean>(fp8_block_wgmma_f16_kernel<Prefill16Lean>, p, stream, "wgmma-f16");
  } else {
    launch_tiles<Prefill16>(fp8_block_wgmma_f16_kernel<Prefill16>, p, stream, "wgmma-f16");
  }
}

}  // namespace deepinfer::gemm_detail
