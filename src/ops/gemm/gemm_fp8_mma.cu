// Block-scaled FP8 GEMM on tensor cores (gemm.h's contract; launcher in gemm_fp8_kernels.h).
//
// y[m, n] = Σ_kb (Σ_{k ∈ kb} xq[m, k] · wq[n, k]) · sx[kb, m] · sw[n / b, kb], b = 32 or 128.
//
// Instruction: mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 (PTX ISA, sm_89+). One mma
// covers 32 of K, i.e. exactly one block-32 K block. Per K block the products are summed by the
// tensor core into fresh fp32 registers (C = 0), and that partial is promoted into the running
// fp32 accumulator as acc += partial · (sx · sw): for b = 32 after every mma, for b = 128 after
// the 4 mmas of the block. This is the reference's arithmetic (exact e4m3 products, fp32 sums
// per block, one fp32 multiply-add per block) up to the summation order inside a block.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k32", 8-bit types), with
// g = lane / 4 and t = lane % 4:
//   A (16 x 32, row): a0 = row g,   K bytes 4t..4t+3;   a1 = row g+8, K bytes 4t..4t+3;
//                     a2 = row g,   K bytes 16+4t..;    a3 = row g+8, K bytes 16+4t..
//   B (32 x 8, col):  b0 = col g,   K bytes 4t..4t+3;   b1 = col g,   K bytes 16+4t..
//   C (16 x 8, f32):  c0, c1 = row g, cols 2t, 2t+1;    c2, c3 = row g+8, cols 2t, 2t+1.
// Each register is 4 consecutive K bytes of one row (of x) or one column (a row of w, which
// is [N, K] row-major), which is what ldmatrix.m8n8.b16 hands lane l from an 8-row x 16-byte
// matrix (row l / 4, bytes 4 (l % 4)..+3): A's four registers are ldmatrix.x4 of the
// (rows 0-7 | 8-15) x (K 0-15 | 16-31) quarters, B's of two n8 tiles' (K 0-15 | 16-31) halves.
//
// Tiling: 8 warps, each 64 (M) x 32 (N) = 4 m16 x 4 n8 mma tiles; the CTA is 2 x 4 warps
// (128 x 128) or 1 x 8 (64 x 256, for M <= 64). K advances 128 bytes per stage (4 block-32 K
// blocks or one block-128 block); a 3-stage cp.async pipeline stages the x and w tiles (rows
// padded to 144 bytes: ldmatrix's 8 row addresses then hit distinct banks) and the tile's
// scales (sx [K blocks][BM], sw [K blocks][BN / b]). Ragged M / N rows, K chunks past K and
// K blocks past n_kb are zero-filled (zero codes contribute 0; zero scales multiply 0). The
// warp's 32 columns lie in one block-32 (and the CTA's in whole block-128) weight block, so
// one sw value per warp and K block. No split K: a fixed reduction order (deterministic).
//
// Decode variant (fp8_block_mma_decode, block 32, M <= 64): the 64 x 256 tile leaves most SMs
// idle on V4.1's narrow projections (wo_b N 5120: 20 CTAs; wq_a 1280: 5), so the CTA is
// 64 x 64 with its 8 warps as 2 (N) x 4 (K): warp wk takes the mma of K block kk == wk of
// every 128-byte stage, and a cluster of `split` CTAs along z takes consecutive ranges of K
// stages (split from N and K only, never M: a row's sums do not depend on the batch). The
// partial sums are added in one fixed order: the 4 K warps in shared memory (wk 0 + 1 + 2 +
// 3), then the cluster's CTAs through distributed shared memory (rank 0 + 1 + ...); rank 0's
// K-warp 0 writes y. Same products and per-block promotions as the plain kernel, another fp32
// summation order across blocks.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "base/error.h"
#include "cuda/cluster_launch.h"
#include "cuda/cuda_check.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_fp8_kernels.h"

namespace deepinfer::gemm_detail {
namespace {

constexpr int kThreads = 256;  // 8 warps
constexpr int kTileK = 128;    // K bytes per stage
constexpr int kRowBytes = kTileK + 16;
constexpr int kStages = 3;

struct MmaParams {
  const uint8_t* xq;
  const float* sx;  // [n_kb, m]
  const uint8_t* wq;
  const float* sw;  // [n_nb, sw_ld]
  int64_t m, n, k, n_kb, n_nb, sw_ld;
  void* y;
  bool y_bf16;
  int split = 1;  // CTAs per cluster along z, each a range of K stages (decode variant)
};

template <int kKbPerTile_, int kWarpsM_, int kWarpsK_ = 1>
struct Cfg {
  static constexpr int kKbPerTile = kKbPerTile_;
  static constexpr int kBlock = kTileK / kKbPerTile_;  // 32 or 128
  static constexpr int kWarpsM = kWarpsM_;
  static constexpr int kWarpsK = kWarpsK_;  // warps splitting each stage's 4 K blocks
  static constexpr int kWarpsN = 8 / (kWarpsM * kWarpsK);
  static_assert(kWarpsK == 1 || (kWarpsK == 4 && kKbPerTile == 4), "K warps: block 32, one K block each");
  static constexpr int kBM = kWarpsM * 64;
  static constexpr int kBN = kWarpsN * 32;
  static constexpr int kNbPerTile = kBN / kBlock;  // weight blocks along N per CTA
  static constexpr int kABytes = kBM * kRowBytes;
  static constexpr int kBBytes = kBN * kRowBytes;
  static constexpr int kSxFloats = kKbPerTile * kBM;
  static constexpr int kSwFloats = kKbPerTile * kNbPerTile;
  static constexpr int kStageBytes = kABytes + kBBytes + 4 * (kSxFloats + (kSwFloats + 3) / 4 * 4);
  static constexpr int kSmemBytes = kStages * kStageBytes;
  // The reductions reuse the stages: (kWarpsK - 1) K warps' and then one CTA's accumulators
  // (64 floats per lane) per M x N warp position.
  static constexpr int kAccBytes = 64 * 32 * 4;
  static_assert(kStageBytes % 16 == 0, "stage bases must stay 16-byte aligned");
  static_assert(kSmemBytes >= (kWarpsK - 1) * kWarpsM * kWarpsN * kAccBytes &&
                    kSmemBytes >= kWarpsM * kWarpsN * kAccBytes,
                "the reduction buffers fit in the stages");
  static_assert(kBN % kBlock == 0, "a CTA covers whole weight blocks along N");
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async with zero fill: src_bytes 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// d = a · b + c on one m16n8k32 e4m3 tile.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1, const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}

// A lane's 64 accumulators to / from a reduction buffer: element (i * 4 + j) * 4 + c at
// p[e * 32] (p already offset by the lane), so a warp's accesses are conflict-free.
__device__ __forceinline__ void store_acc(const float (&acc)[4][4][4], float* p) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) p[((i * 4 + j) * 4 + c) * 32] = acc[i][j][c];
}
__device__ __forceinline__ void add_acc(float (&acc)[4][4][4], const float* p) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] += p[((i * 4 + j) * 4 + c) * 32];
}

// Issues the cp.asyncs of K tile kt into one stage.
template <class C>
__device__ __forceinline__ void load_tile(const MmaParams& p, uint8_t* stage, int64_t m0,
                                          int64_t n0, int64_t kt) {
  uint8_t* a = stage;
  uint8_t* b = stage + C::kABytes;
  float* sx = reinterpret_cast<float*>(stage + C::kABytes + C::kBBytes);
  float* sw = sx + C::kSxFloats;
  const int64_t k0 = kt * kTileK;
  for (int i = threadIdx.x; i < C::kBM * (kTileK / 16); i += kThreads) {
    const int r = i / (kTileK / 16), c = i % (kTileK / 16);
    const int64_t m = m0 + r, k = k0 + c * 16;
    const bool ok = m < p.m && k < p.k;
    cp_async_16(a + r * kRowBytes + c * 16, ok ? p.xq + m * p.k + k : p.xq, ok);
  }
  for (int i = threadIdx.x; i < C::kBN * (kTileK / 16); i += kThreads) {
    const int r = i / (kTileK / 16), c = i % (kTileK / 16);
    const int64_t n = n0 + r, k = k0 + c * 16;
    const bool ok = n < p.n && k < p.k;
    cp_async_16(b + r * kRowBytes + c * 16, ok ? p.wq + n * p.k + k : p.wq, ok);
  }
  for (int i = threadIdx.x; i < C::kSxFloats; i += kThreads) {
    const int q = i / C::kBM, r = i % C::kBM;
    const int64_t kb = kt * C::kKbPerTile + q, m = m0 + r;
    const bool ok = kb < p.n_kb && m < p.m;
    cp_async_4(sx + i, ok ? p.sx + kb * p.m + m : p.sx, ok);
  }
  for (int i = threadIdx.x; i < C::kSwFloats; i += kThreads) {
    const int q = i / C::kNbPerTile, c = i % C::kNbPerTile;
    const int64_t kb = kt * C::kKbPerTile + q, nb = n0 / C::kBlock + c;
    const bool ok = kb < p.n_kb && nb < p.n_nb;
    cp_async_4(sw + i, ok ? p.sw + nb * p.sw_ld + kb : p.sw, ok);
  }
}

template <class C>
__global__ void __launch_bounds__(kThreads, 1) fp8_block_mma_kernel(MmaParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int q = lane / 8, r8 = lane % 8;  // ldmatrix: this lane's matrix and row address
  const int wk = warp % C::kWarpsK, wmn = warp / C::kWarpsK;  // K warp; M x N warp position
  const int wm = (wmn / C::kWarpsN) * 64, wn = (wmn % C::kWarpsN) * 32;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * C::kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * C::kBN;
  // This CTA's K stages [kt0, n_kt): all of them, or its cluster rank's range (split > 1).
  const int64_t n_kt_all = (p.k + kTileK - 1) / kTileK;
  const int64_t per_split = (n_kt_all + p.split - 1) / p.split;
  const int64_t kt0 = min(n_kt_all, static_cast<int64_t>(blockIdx.z) * per_split);
  const int64_t n_kt = min(n_kt_all, kt0 + per_split);
  const int sw_col = wn / C::kBlock;  // this warp's weight block along N, within the CTA
  constexpr float kZero[4] = {0.0f, 0.0f, 0.0f, 0.0f};

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (kt0 + s < n_kt) load_tile<C>(p, smem + s * C::kStageBytes, m0, n0, kt0 + s);
    cp_async_commit();
  }

  for (int64_t kt = kt0; kt < n_kt; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile kt is visible to all; every warp is done with tile kt - 1
    const int64_t next = kt + kStages - 1;
    if (next < n_kt) load_tile<C>(p, smem + ((next - kt0) % kStages) * C::kStageBytes, m0, n0, next);
    cp_async_commit();

    const uint8_t* a = smem + ((kt - kt0) % kStages) * C::kStageBytes;
    const uint8_t* b = a + C::kABytes;
    const float* sxs = reinterpret_cast<const float*>(b + C::kBBytes);
    const float* sws = sxs + C::kSxFloats;
    float part[4][4][4];  // block 128: the block's fp32 partial sums (unused for block 32)
    if constexpr (C::kKbPerTile == 1) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) part[i][j][e] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < kTileK / 32; ++kk) {
      if (C::kWarpsK > 1 && kk % C::kWarpsK != wk) continue;  // another K warp's block
      if (kt * kTileK + kk * 32 >= p.k) break;  // past K (the last tile only): zeros
      uint32_t af[4][4], bf[4][2];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        ldmatrix_x4(af[i], a + (wm + i * 16 + r8 + (q & 1) * 8) * kRowBytes + kk * 32 +
                               (q >> 1) * 16);
#pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        uint32_t v[4];
        ldmatrix_x4(v, b + (wn + (jp * 2 + (q >> 1)) * 8 + r8) * kRowBytes + kk * 32 +
                           (q & 1) * 16);
        bf[2 * jp][0] = v[0];
        bf[2 * jp][1] = v[1];
        bf[2 * jp + 1][0] = v[2];
        bf[2 * jp + 1][1] = v[3];
      }
      if constexpr (C::kKbPerTile == 4) {
        // Block 32: this mma is the whole K block; promote at once.
        const float swv = sws[kk * C::kNbPerTile + sw_col];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float s_lo = sxs[kk * C::kBM + wm + i * 16 + g] * swv;
          const float s_hi = sxs[kk * C::kBM + wm + i * 16 + g + 8] * swv;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            float d[4];
            mma_e4m3(d, af[i], bf[j][0], bf[j][1], kZero);
            acc[i][j][0] = fmaf(d[0], s_lo, acc[i][j][0]);
            acc[i][j][1] = fmaf(d[1], s_lo, acc[i][j][1]);
            acc[i][j][2] = fmaf(d[2], s_hi, acc[i][j][2]);
            acc[i][j][3] = fmaf(d[3], s_hi, acc[i][j][3]);
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) mma_e4m3(part[i][j], af[i], bf[j][0], bf[j][1], part[i][j]);
      }
    }
    if constexpr (C::kKbPerTile == 1) {
      // Block 128: the 4 mmas of this K block are summed; promote once.
      const float swv = sws[sw_col];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float s_lo = sxs[wm + i * 16 + g] * swv;
        const float s_hi = sxs[wm + i * 16 + g + 8] * swv;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[i][j][0] = fmaf(part[i][j][0], s_lo, acc[i][j][0]);
          acc[i][j][1] = fmaf(part[i][j][1], s_lo, acc[i][j][1]);
          acc[i][j][2] = fmaf(part[i][j][2], s_hi, acc[i][j][2]);
          acc[i][j][3] = fmaf(part[i][j][3], s_hi, acc[i][j][3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // acc element e = (i * 4 + j) * 4 + c of lane l sits at buffer [position][e][l].
  float* red = reinterpret_cast<float*>(smem);
  if constexpr (C::kWarpsK > 1) {  // K warps 1.. into shared memory, K warp 0 adds them in order
    __syncthreads();  // every warp is done with the stages
    if (wk > 0) {
      float* dst = red + ((wk - 1) * C::kWarpsM * C::kWarpsN + wmn) * 64 * 32 + lane;
      store_acc(acc, dst);
    }
    __syncthreads();
    if (wk == 0) {
      for (int w = 1; w < C::kWarpsK; ++w) {
        const float* src = red + ((w - 1) * C::kWarpsM * C::kWarpsN + wmn) * 64 * 32 + lane;
        add_acc(acc, src);
      }
    }
  }
  if (p.split > 1) {  // the cluster's ranks 1.. into their shared memory, rank 0 adds them in order
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    const unsigned rank = cluster.block_rank();
    __syncthreads();  // the K-warp buffer (same bytes) has been read
    float* mine = red + wmn * 64 * 32 + lane;
    if (rank != 0 && wk == 0) {
      store_acc(acc, mine);
    }
    cluster.sync();
    if (rank == 0 && wk == 0) {
      for (int r = 1; r < p.split; ++r) {
        const float* src = cluster.map_shared_rank(mine, static_cast<unsigned>(r));
        add_acc(acc, src);
      }
    }
    cluster.sync();  // rank 0 has read every rank's buffer: they may exit
    if (rank != 0) return;
  }
  if (wk != 0) return;  // K warps 1..: their sums are in K warp 0's

#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t m = m0 + wm + i * 16 + g + half * 8;
      if (m >= p.m) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t n = n0 + wn + j * 8 + 2 * t + e;
          if (n >= p.n) continue;
          const float v = acc[i][j][half * 2 + e];
          if (p.y_bf16) {
            static_cast<__nv_bfloat16*>(p.y)[m * p.n + n] = __float2bfloat16(v);
          } else {
            static_cast<float*>(p.y)[m * p.n + n] = v;
          }
        }
      }
    }
  }
}

template <int kKbPerTile, int kWarpsM, int kWarpsK = 1>
void launch_mma(const MmaParams& p, cudaStream_t stream) {
  using C = Cfg<kKbPerTile, kWarpsM, kWarpsK>;
  static const bool attr_set = [] {
    CUDA_CHECK(cudaFuncSetAttribute(fp8_block_mma_kernel<C>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    return true;
  }();
  (void)attr_set;
  const dim3 grid(static_cast<unsigned>(ceil_div64(p.n, C::kBN)),
                  static_cast<unsigned>(ceil_div64(p.m, C::kBM)), static_cast<unsigned>(p.split));
  CHECK_KIND(kUnsupported, ceil_div64(p.m, C::kBM) <= 65535)
      << "fp8 gemm (mma): M=" << p.m << " too large";
  if (p.split == 1) {
    fp8_block_mma_kernel<C><<<grid, kThreads, C::kSmemBytes, stream>>>(p);
  } else {
    ICHECK(p.split >= 2 && p.split <= 8) << "fp8 gemm (mma): split " << p.split << " (a portable cluster)";
    cuda::launch_clustered(fp8_block_mma_kernel<C>, grid, dim3(kThreads), C::kSmemBytes, stream,
                           dim3(1, 1, static_cast<unsigned>(p.split)), p);
  }
  CUDA_CHECK_LAUNCH();
}

// K-stage ranges of the decode variant, from N, K and the device only (never M): one CTA per
// SM at a time (about 200 registers a thread), so the split (1..8, a portable cluster; at
// least 2 stages per CTA) that wastes the least of the last wave, the smaller on a tie.
int decode_split(int64_t n, int64_t k) {
  static const int sms = [] {
    int dev = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  const int64_t tiles = ceil_div64(n, Cfg<4, 1, 4>::kBN), stages = ceil_div64(k, kTileK);
  int best = 1;
  double best_use = 0.0;
  for (int s = 1; s <= 8 && (s == 1 || stages >= 2 * s); ++s) {
    const int64_t ctas = tiles * s;
    const double use = static_cast<double>(ctas) / static_cast<double>(ceil_div64(ctas, sms) * sms);
    if (use > best_use + 1e-9) {
      best_use = use;
      best = s;
    }
  }
  return best;
}

}  // namespace

void fp8_block_mma(cudaStream_t stream, const void* xq, const float* sx, const void* wq,
                   const float* sw, int64_t m, int64_t n, int64_t k, void* y, bool y_bf16,
                   int64_t block) {
  ICHECK(block == 32 || block == 128) << "fp8 gemm (mma): block " << block;
  ICHECK(k % 16 == 0) << "fp8 gemm (mma): K=" << k << " is not a multiple of 16";
  CHECK_KIND(kUnsupported, reinterpret_cast<uintptr_t>(xq) % 16 == 0 &&
                               reinterpret_cast<uintptr_t>(wq) % 16 == 0)
      << "fp8 gemm (mma): xq and wq must be 16-byte aligned";
  if (m == 0 || n == 0 || k == 0) return;  // the dispatcher handles K == 0 (zeros)
  const MmaParams p{static_cast<const uint8_t*>(xq), sx, static_cast<const uint8_t*>(wq), sw,
                    m, n, k, ceil_div64(k, block), ceil_div64(n, block),
                    fp8_weight_scale_ld(k, block), y, y_bf16};
  const bool small_m = m <= 64;
  if (block == 32) {
    small_m ? launch_mma<4, 1>(p, stream) : launch_mma<4, 2>(p, stream);
  } else {
    small_m ? launch_mma<1, 1>(p, stream) : launch_mma<1, 2>(p, stream);
  }
}

void fp8_block_mma_decode(cudaStream_t stream, const void* xq, const float* sx, const void* wq,
                          const float* sw, int64_t m, int64_t n, int64_t k, void* y, bool y_bf16) {
  constexpr int64_t block = 32;
  CHECK_KIND(kUnsupported, m <= kFp8MmaDecodeMaxM)
      << "fp8 gemm (mma-split): M=" << m << " (decode variant: M <= " << kFp8MmaDecodeMaxM << ")";
  ICHECK(k % 16 == 0) << "fp8 gemm (mma-split): K=" << k << " is not a multiple of 16";
  CHECK_KIND(kUnsupported, reinterpret_cast<uintptr_t>(xq) % 16 == 0 &&
                               reinterpret_cast<uintptr_t>(wq) % 16 == 0)
      << "fp8 gemm (mma-split): xq and wq must be 16-byte aligned";
  if (m == 0 || n == 0 || k == 0) return;
  MmaParams p{static_cast<const uint8_t*>(xq), sx, static_cast<const uint8_t*>(wq), sw,
              m, n, k, ceil_div64(k, block), ceil_div64(n, block),
              fp8_weight_scale_ld(k, block), y, y_bf16};
  p.split = decode_split(n, k);
  launch_mma<4, 1, 4>(p, stream);
}

}  // namespace deepinfer::gemm_detail
