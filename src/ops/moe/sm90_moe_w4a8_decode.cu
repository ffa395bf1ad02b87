// W4A8 routed experts for decode (contract in moe_w4a8_cuda.h; weight format in moe_w4a8.h).
// Needs sm_89+ (mma.sync ... e4m3); built for sm_90a.
//
// One kernel template serves both projections (kMats = 2: W1 and W3 sharing x, SwiGLU +
// quantisation epilogue; kMats = 1: W2, fp32 y epilogue). A CTA is 8 warps and owns 128 output
// rows (warp w: rows 16 w .. 16 w + 15, one m16 MMA tile per matrix) of one live 64-row tile of
// moe_align_cuda (one expert). Its tokens go through in passes of up to 16 (two n8 tiles):
//   1. the first kDepth K chunks (128 elements: 64 code bytes + 4 scale bytes per row) of the
//      warp's weight rows (one row group of moe_w4a8.h's tiled layout: a chunk of the warp is
//      1 KB of consecutive code bytes and 64 of scales) are requested with 16-byte ld.global.nc.L1::no_allocate loads into
//      registers (weights go global -> registers, never through shared memory);
//   2. meanwhile the pass's activation rows (e4m3, the whole K) and their scales (x 2^6) go to
//      shared memory; each 8-byte unit stored as its even then its odd bytes (see below);
//   3. per chunk and per scale block j (4 per chunk): the quad's lane t holds, from its 16-byte
//      load, 4 code bytes of block j for row g and 4 for row g + 8 (moe_w4a8.h's transposed
//      words), i.e. elements 32 j + 8 t + 0..7. Low nibbles (even elements) become A registers
//      a0 / a1, high nibbles (odd elements) a2 / a3, each nibble c -> e4m3 byte
//      (c & 8) << 4 | (c & 7) << 2, which is exactly e2m1(c) * 2^-6 (so the activation scales
//      carry the 2^6). The MMA's K order is thereby a permutation of the block's 32 elements,
//      and the activation's B registers hold the same permutation (the even/odd split of step
//      2), so the MMA sums exactly the block's 32 products. Its fp32 result is multiplied by
//      the row's UE8M0 scale times the token's activation scale and added to the accumulator:
//      one fixed chain of FMAs per output element, ascending K;
//   4. the next chunk's loads are issued as soon as a register buffer is consumed (kDepth
//      chunks in flight per warp).
// Epilogue of the up projection: h = silu(min(g, l)) * clamp(u, -l, l) * routing weight, then
// per 1 x act_block block of h (128: the CTA's whole 128 columns; 32: two warps) the act_quant
// rule (amax >= 1e-4, s = 2^ceil(log2(amax / 448)) from the fp32 bits, RNE, satfinite) into hq
// (by slot, in step 2's byte order, so the down kernel copies it as is) and sh.
#include <cooperative_groups.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <mutex>
#include <type_traits>

#include "base/error.h"
#include "cuda/cluster_launch.h"
#include "cuda/cuda_check.h"
#include "ops/moe/moe_w4a8_cuda.h"
#include "ops/quant/act_quant.h"

namespace deepinfer {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kCtaRows = 16 * kWarps;  // 128 output rows per CTA
constexpr int kPassMax = 16;           // tokens per pass: two n8 MMA tiles (kNt = 2)
constexpr int kNtMax = kPassMax / 8;
constexpr int kSmemPad = 32;  // activation row stride kp + 32: the B loads are conflict-free
constexpr int kSmemLimit = 227 * 1024;

struct GemmParams {
  // Activations: row of pass token p is a + arow * a_ld, arow = row_slot[row] / a_div; a_k
  // valid bytes per row (the rest of kp is zero); a_permuted: already in step 2's order.
  const uint8_t* a = nullptr;
  int64_t a_ld = 0, a_k = 0;
  int32_t a_div = 1;
  bool a_permuted = false;
  const float* sa = nullptr;  // [rows, sa_ld] row-major, sa_n valid blocks per row
  int64_t sa_ld = 0, sa_n = 0;
  const uint8_t* w[2] = {nullptr, nullptr};
  const uint8_t* ws[2] = {nullptr, nullptr};
  int64_t n = 0, kp = 0;  // output rows, padded K
  const int32_t *counts = nullptr, *offsets = nullptr, *row_slot = nullptr;
  const int32_t *tile_expert = nullptr, *tile_row0 = nullptr;
  int32_t pass = kPassMax;
  // kMats == 2 epilogue
  const float* route_w = nullptr;
  float limit = 0.0f;
  uint8_t* hq = nullptr;
  float* sh = nullptr;
  int64_t hq_ld = 0, sh_ld = 0;
  // kMats == 1 epilogue
  float* y = nullptr;
  int64_t y_ld = 0;
  // Split K (kFast): the CTAs of one cluster (its size `split`, along z) take consecutive
  // ranges of K chunks by cluster rank; red_off: byte offset of the reduction buffer in smem.
  int32_t split = 1;
  int64_t red_off = 0;
  int64_t stage_off = 0;  // kFast: byte offset of the weight stages in smem
};

__device__ __forceinline__ uint4 ldg_stream(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// cp.async of 16 (L2 only) / 4 bytes into shared memory; pred false: zeros.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool pred) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool pred) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(pred ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void mma_e4m3(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Low nibbles of the 4 bytes of w -> 4 e4m3 codes of e2m1 * 2^-6; high nibbles likewise.
__device__ __forceinline__ uint32_t fp4_even(uint32_t w) {
  return ((w << 4) & 0x80808080u) | ((w << 2) & 0x1c1c1c1cu);
}
__device__ __forceinline__ uint32_t fp4_odd(uint32_t w) {
  return (w & 0x80808080u) | ((w >> 2) & 0x1c1c1c1cu);
}

// 2^(b - 127) from b << 23 (b a UE8M0 byte in bits 23..30, the rest zero); b = 0: 2^-127
// (0x00400000: every other b gives bits >= 0x00800000, so one max serves).
__device__ __forceinline__ float ue8m0_bits(uint32_t b_shifted) {
  return __uint_as_float(max(b_shifted, 0x00400000u));
}
// Byte j of a scale word, shifted to bits 23..30.
__device__ __forceinline__ uint32_t scale_byte_bits(uint32_t word, int j) {
  return j < 3 ? (word << (23 - 8 * j)) & 0x7f800000u : (word >> 1) & 0x7f800000u;
}

// 8 bytes in natural order -> even bytes then odd bytes (the B operand's K order).
__device__ __forceinline__ uint2 split_even_odd(uint2 v) {
  return make_uint2(__byte_perm(v.x, v.y, 0x6420), __byte_perm(v.x, v.y, 0x7531));
}

// Byte position of element n of a row in that order.
__device__ __forceinline__ int64_t permuted_pos(int64_t n) {
  const int64_t o = n & 7;
  return (n & ~int64_t{7}) + ((o & 1) ? 4 + (o >> 1) : (o >> 1));
}

// 2^ceil(log2(amax / 448)) from the fp32 bits of the IEEE quotient (act_quant's rule).
__device__ __forceinline__ int pow2_scale_exponent(float amax) {
  const float ratio = __fdiv_rn(amax, 448.0f);
  const unsigned bits = __float_as_uint(ratio);
  return static_cast<int>((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0 ? 1 : 0);
}

template <int kMats>
struct Frag {
  uint4 c[kMats][2];     // codes of rows g, g + 8 for this chunk
  uint32_t s[kMats][2];  // their 4 scale bytes
};

// kFast: the weights go global -> shared memory with cp.async (kDepth stages of 2 chunks per
// warp, each warp staging its own rows as whole 128-byte lines: no CTA barrier), so no
// registers hold loads in flight and DRAM sees 128 contiguous bytes per row and request; for act_block 128 the four per-32 partial products of a chunk are first summed with
// their weight scales and then multiplied once by the activation scale (same products,
// another fp32 rounding order than kPlain; a UE8M0 byte 0 counts as 0, not 2^-127). Also
// kFast: split K over the cluster (p.split CTAs along z, one range of chunks per cluster
// rank); after the K loop ranks 1.. put their accumulators in shared memory and rank 0 adds
// them to its own in rank order (one fixed order, independent of timing), then alone runs the
// epilogue.
// kNt: n8 tiles per pass (pass <= 8 kNt tokens). kNt = 1 (the narrow plain kernels,
// moe_w4a8_set_pass_max(8)) fits 2 CTAs per SM for the up projection too; a token's sums are
// the same bits at either width (the MMA's columns are independent, the K order is one).
template <int kMats, int kActBlock, int kDepth, bool kFast, int kNt = kNtMax>
__global__ void __launch_bounds__(kThreads, kMats == 1 || kNt == 1 ? 2 : 1)
    w4a8_gemm_kernel(GemmParams p) {
  const int e = p.tile_expert[blockIdx.x];
  if (e < 0) return;
  const int r0 = p.tile_row0[blockIdx.x];
  const int n_rows = min(static_cast<int>(kMoeRowTile), p.offsets[e] + p.counts[e] - r0);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const int64_t cta_n0 = static_cast<int64_t>(blockIdx.y) * kCtaRows;
  const int64_t row_a = cta_n0 + 16 * warp + g, row_b = row_a + 8;
  const bool ok[2] = {row_a < p.n, row_b < p.n};
  const int64_t code_ld = p.kp / 2, scale_ld = p.kp / 32;
  // The warp's 16 rows are one row group of moe_w4a8.h's tiled layout (w4a8_code_offset /
  // w4a8_scale_offset): gh rows, chunk-major, so a row's next chunk is gh * 64 code bytes (gh
  // scale words) further and each chunk of the warp is 1 KB of consecutive bytes.
  const int64_t g0 = cta_n0 + 16 * warp;
  const int64_t gh = g0 < p.n ? w4a8_group_rows(p.n, g0) : 0;
  const int64_t chunk_bytes = gh * 64;  // code bytes of one chunk of the warp's group
  const int n_chunks_all = static_cast<int>(p.kp / kW4a8Group);
  int rank = 0;
  if constexpr (kFast) rank = static_cast<int>(cooperative_groups::this_cluster().block_rank());
  const int per_rank = (n_chunks_all + p.split - 1) / p.split;
  const int cb = min(n_chunks_all, rank * per_rank);           // first chunk of this CTA
  const int n_chunks = min(n_chunks_all, cb + per_rank);       // one past its last chunk
  // Rows g (row_a) and g + 8 (row_b) of the warp's group: row_b's chunk sits 512 code bytes
  // (8 scale words) after row_a's, so one pointer per matrix serves both.
  const uint8_t* cw[kMats];
  const uint32_t* sw[kMats];
  const uint32_t chunk_bytes32 = static_cast<uint32_t>(chunk_bytes), chunk_words = static_cast<uint32_t>(gh);
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
    const uint8_t* codes = p.w[m] + static_cast<int64_t>(e) * p.n * code_ld;
    const uint8_t* scales = p.ws[m] + static_cast<int64_t>(e) * p.n * scale_ld;
    cw[m] = codes + (ok[0] ? w4a8_code_offset(p.n, p.kp, row_a, 0) + 16 * t4 : 0);
    sw[m] = reinterpret_cast<const uint32_t*>(scales + (ok[0] ? w4a8_scale_offset(p.n, p.kp, row_a, 0) : 0));
  }
  auto load = [&](Frag<kMats>& f, int chunk) {
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      // A group's chunk is at most 1 KB and a matrix row group at most 16 * kp / 2 bytes,
      // so the in-group offset fits 32 bits.
      const uint8_t* c = cw[m] + static_cast<uint32_t>(chunk) * chunk_bytes32;
      const uint32_t* sc = sw[m] + static_cast<uint32_t>(chunk) * chunk_words;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (ok[h]) {
          f.c[m][h] = ldg_stream(c + 512 * h);
          f.s[m][h] = __ldg(sc + 8 * h);
        } else {
          f.c[m][h] = make_uint4(0, 0, 0, 0);
          f.s[m][h] = 0x7f7f7f7fu;
        }
      }
    }
  };

  // Shared memory: activations [pass][kp + pad], scales [kp / kActBlock][pass], slots, amax.
  extern __shared__ __align__(16) uint8_t smem[];
  const int P = p.pass;
  const int64_t stride = p.kp + kSmemPad;
  uint8_t* x_s = smem;
  float* sa_s = reinterpret_cast<float*>(smem + P * stride);
  const int n_ab = static_cast<int>(p.kp / kActBlock);
  int32_t* slot_s = reinterpret_cast<int32_t*>(sa_s + n_ab * P);
  float* amax_s = reinterpret_cast<float*>(slot_s + P);

  for (int pb = 0; pb < n_rows; pb += P) {
    const int np = min(P, n_rows - pb);
    const int nt_live = (np + 7) / 8;
    // kFast stages: per warp and matrix, its 16 rows x 2 chunks (128 contiguous code bytes
    // of a row, 8 lanes per row: whole 128-byte lines) and their 8 scale bytes. 16-byte unit
    // u of row r sits at unit u ^ 4 (r & 1): the fragment reads (rows g, g + 1 per 8 lanes)
    // hit 32 distinct banks.
    uint8_t* st_c = smem + p.stage_off;  // [kDepth][kWarps][kMats][16][128]
    uint8_t* st_s = st_c + kDepth * kWarps * kMats * 2048;  // [kDepth][kWarps][kMats][16][8]
    auto issue = [&](int chunk, int slot) {  // chunks chunk, chunk + 1 into stage slot
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        const uint8_t* codes = p.w[m] + static_cast<int64_t>(e) * p.n * code_ld;
        const uint8_t* scales = p.ws[m] + static_cast<int64_t>(e) * p.n * scale_ld;
        uint8_t* dc = st_c + ((slot * kWarps + warp) * kMats + m) * 2048;
        uint8_t* ds = st_s + ((slot * kWarps + warp) * kMats + m) * 128;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int idx = 32 * i + lane, r = idx / 8, u = idx % 8;
          const int64_t row = cta_n0 + 16 * warp + r;
          const int cc = chunk + u / 4;
          const bool v = row < p.n && cc < n_chunks;
          cp_async16(dc + r * 128 + ((u ^ (4 * (r & 1))) * 16),
                     codes + (v ? w4a8_code_offset(p.n, p.kp, row, cc) + (u % 4) * 16 : 0), v);
        }
        {
          const int r = lane / 2, which = lane % 2;
          const int64_t row = cta_n0 + 16 * warp + r;
          const bool v = row < p.n && chunk + which < n_chunks;
          cp_async4(ds + r * 8 + which * 4,
                    scales + (v ? w4a8_scale_offset(p.n, p.kp, row, chunk + which) : 0), v);
        }
      }
    };
    Frag<kMats> buf[kFast ? 1 : kDepth];
    if constexpr (kFast) {
      __syncwarp();  // the warp is done with its stages from the previous pass
#pragma unroll
      for (int s = 0; s < kDepth - 1; ++s) {
        if (cb + 2 * s < n_chunks) issue(cb + 2 * s, s);
        cp_async_commit();
      }
    } else {
#pragma unroll
      for (int s = 0; s < kDepth; ++s) {
        if (cb + s < n_chunks) load(buf[s], cb + s);
      }
    }
    __syncthreads();  // the previous pass is done with shared memory
    if (tid < P) slot_s[tid] = tid < np ? p.row_slot[r0 + pb + tid] : -1;
    __syncthreads();
    // This CTA's chunks only (16-byte units [8 cb, 8 n_chunks) of each row).
    const int64_t units = 8 * static_cast<int64_t>(max(0, n_chunks - cb));
    // Every one of the P rows is written (rows np..P-1 as zeros): the n8 tiles read whole
    // groups of 8 pass tokens.
    for (int64_t i = tid; i < P * units; i += kThreads) {
      const int pp = static_cast<int>(i / units);
      const int64_t k = (8 * static_cast<int64_t>(cb) + i % units) * 16;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (pp < np && k < p.a_k) {
        const int64_t arow = slot_s[pp] / p.a_div;
        v = *reinterpret_cast<const uint4*>(p.a + arow * p.a_ld + k);
      }
      if (!p.a_permuted) {
        const uint2 lo = split_even_odd(make_uint2(v.x, v.y));
        const uint2 hi = split_even_odd(make_uint2(v.z, v.w));
        v = make_uint4(lo.x, lo.y, hi.x, hi.y);
      }
      *reinterpret_cast<uint4*>(x_s + pp * stride + k) = v;
    }
    for (int i = tid; i < P * n_ab; i += kThreads) {
      const int pp = i % P, b = i / P;
      sa_s[b * P + pp] =
          pp < np && b < p.sa_n ? p.sa[(slot_s[pp] / p.a_div) * p.sa_ld + b] * 64.0f : 0.0f;
    }
    __syncthreads();

    float acc[kMats][kNt][4];
#pragma unroll
    for (int m = 0; m < kMats; ++m)
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[m][nt][i] = 0.0f;

    if constexpr (kFast) {
      int slot = 0;  // stage of chunk c
      for (int c = cb; c < n_chunks; ++c) {
        const int sub = (c - cb) & 1;
        if (sub == 0) {
          __syncwarp();  // every lane is done with the stage read last (refilled now)
          const int next = slot == 0 ? kDepth - 1 : slot - 1;
          const int c_next = c + 2 * (kDepth - 1);
          if (c_next < n_chunks) issue(c_next, next);
          cp_async_commit();
          cp_async_wait<kDepth - 1>();  // this thread's copies of chunks c, c + 1 landed
          __syncwarp();                 // and the other lanes' too
        }
        Frag<kMats> f;
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          const uint8_t* dc = st_c + ((slot * kWarps + warp) * kMats + m) * 2048;
          const uint8_t* ds = st_s + ((slot * kWarps + warp) * kMats + m) * 128;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = g + 8 * h;
            f.c[m][h] = *reinterpret_cast<const uint4*>(dc + r * 128 + (((4 * sub + t4) ^ (4 * (r & 1))) * 16));
            f.s[m][h] = *reinterpret_cast<const uint32_t*>(ds + r * 8 + 4 * sub);
          }
        }
        if (sub == 1) slot = slot + 1 == kDepth ? 0 : slot + 1;
        float part[kMats][kNt][4];  // act_block 128: sum over j of d_j * weight scale
#pragma unroll
        for (int m = 0; m < kMats; ++m)
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) part[m][nt][i] = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t a[kMats][4];
          float sg[kMats][2];
#pragma unroll
          for (int m = 0; m < kMats; ++m) {
            const uint32_t wa = reinterpret_cast<const uint32_t*>(&f.c[m][0])[j];
            const uint32_t wb = reinterpret_cast<const uint32_t*>(&f.c[m][1])[j];
            a[m][0] = fp4_even(wa);
            a[m][1] = fp4_even(wb);
            a[m][2] = fp4_odd(wa);
            a[m][3] = fp4_odd(wb);
            // 2^(b - 127) from byte j of the scale word (b = 0: 0).
            sg[m][0] = __uint_as_float(scale_byte_bits(f.s[m][0], j));
            sg[m][1] = __uint_as_float(scale_byte_bits(f.s[m][1], j));
          }
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt) {
            if (nt >= nt_live) break;
            const uint2 bv = *reinterpret_cast<const uint2*>(
                x_s + (8 * nt + g) * stride + static_cast<int64_t>(c) * kW4a8Group + 32 * j + 8 * t4);
#pragma unroll
            for (int m = 0; m < kMats; ++m) {
              float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
              mma_e4m3(d, a[m], bv.x, bv.y);
              if constexpr (kActBlock == 128) {
                part[m][nt][0] = fmaf(d[0], sg[m][0], part[m][nt][0]);
                part[m][nt][1] = fmaf(d[1], sg[m][0], part[m][nt][1]);
                part[m][nt][2] = fmaf(d[2], sg[m][1], part[m][nt][2]);
                part[m][nt][3] = fmaf(d[3], sg[m][1], part[m][nt][3]);
              } else {
                const float2 sa =
                    *reinterpret_cast<const float2*>(sa_s + (4 * c + j) * P + 8 * nt + 2 * t4);
                acc[m][nt][0] = fmaf(d[0], sg[m][0] * sa.x, acc[m][nt][0]);
                acc[m][nt][1] = fmaf(d[1], sg[m][0] * sa.y, acc[m][nt][1]);
                acc[m][nt][2] = fmaf(d[2], sg[m][1] * sa.x, acc[m][nt][2]);
                acc[m][nt][3] = fmaf(d[3], sg[m][1] * sa.y, acc[m][nt][3]);
              }
            }
          }
        }
        if constexpr (kActBlock == 128) {
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt) {
            if (nt >= nt_live) break;
            const float2 sa = *reinterpret_cast<const float2*>(sa_s + c * P + 8 * nt + 2 * t4);
#pragma unroll
            for (int m = 0; m < kMats; ++m) {
              acc[m][nt][0] = fmaf(part[m][nt][0], sa.x, acc[m][nt][0]);
              acc[m][nt][1] = fmaf(part[m][nt][1], sa.y, acc[m][nt][1]);
              acc[m][nt][2] = fmaf(part[m][nt][2], sa.x, acc[m][nt][2]);
              acc[m][nt][3] = fmaf(part[m][nt][3], sa.y, acc[m][nt][3]);
            }
          }
        }
      }
    }
    for (int c0 = cb; !kFast && c0 < n_chunks; c0 += kDepth) {
#pragma unroll
      for (int s = 0; s < kDepth; ++s) {
        const int c = c0 + s;
        if (c >= n_chunks) break;
        const Frag<kMats> f = buf[s];
        if (c + kDepth < n_chunks) load(buf[s], c + kDepth);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t a[kMats][4];
          float sg[kMats][2];
#pragma unroll
          for (int m = 0; m < kMats; ++m) {
            const uint32_t wa = reinterpret_cast<const uint32_t*>(&f.c[m][0])[j];
            const uint32_t wb = reinterpret_cast<const uint32_t*>(&f.c[m][1])[j];
            a[m][0] = fp4_even(wa);
            a[m][1] = fp4_even(wb);
            a[m][2] = fp4_odd(wa);
            a[m][3] = fp4_odd(wb);
            sg[m][0] = ue8m0_bits(scale_byte_bits(f.s[m][0], j));
            sg[m][1] = ue8m0_bits(scale_byte_bits(f.s[m][1], j));
          }
          const int ab = kActBlock == 128 ? c : 4 * c + j;
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt) {
            if (nt >= nt_live) break;
            const uint2 bv = *reinterpret_cast<const uint2*>(
                x_s + (8 * nt + g) * stride + static_cast<int64_t>(c) * kW4a8Group + 32 * j + 8 * t4);
            const float2 sa = *reinterpret_cast<const float2*>(sa_s + ab * P + 8 * nt + 2 * t4);
#pragma unroll
            for (int m = 0; m < kMats; ++m) {
              float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
              mma_e4m3(d, a[m], bv.x, bv.y);
              acc[m][nt][0] = fmaf(d[0], sg[m][0] * sa.x, acc[m][nt][0]);
              acc[m][nt][1] = fmaf(d[1], sg[m][0] * sa.y, acc[m][nt][1]);
              acc[m][nt][2] = fmaf(d[2], sg[m][1] * sa.x, acc[m][nt][2]);
              acc[m][nt][3] = fmaf(d[3], sg[m][1] * sa.y, acc[m][nt][3]);
            }
          }
        }
      }
    }

    if constexpr (kFast) {
      if (p.split > 1) {
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        float* red = reinterpret_cast<float*>(smem + p.red_off);
        if (rank != 0) {
#pragma unroll
          for (int m = 0; m < kMats; ++m)
#pragma unroll
            for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
              for (int i = 0; i < 4; ++i) red[((m * kNt + nt) * 4 + i) * kThreads + tid] = acc[m][nt][i];
        }
        cluster.sync();  // the partial sums of ranks 1.. are in their shared memory
        if (rank == 0) {
          for (int r = 1; r < p.split; ++r) {
            const float* rr = cluster.map_shared_rank(red, r);
#pragma unroll
            for (int m = 0; m < kMats; ++m)
#pragma unroll
              for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[m][nt][i] += rr[((m * kNt + nt) * 4 + i) * kThreads + tid];
          }
        }
        cluster.sync();  // rank 0 has read them: the others may reuse or release their smem
        if (rank != 0) continue;
      }
    }

    // Accumulator element i of n-tile nt: row (i < 2 ? row_a : row_b), pass token
    // 8 nt + 2 t4 + (i & 1).
    if constexpr (kMats == 1) {
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int pp = 8 * nt + 2 * t4 + (i & 1);
          const int64_t row = i < 2 ? row_a : row_b;
          if (pp < np && row < p.n) {
            p.y[static_cast<int64_t>(slot_s[pp]) * p.y_ld + row] = acc[0][nt][i];
          }
        }
      }
    } else {
      float hv[kNt][4];
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int pp = 8 * nt + 2 * t4 + (i & 1);
          const int64_t row = i < 2 ? row_a : row_b;
          hv[nt][i] = 0.0f;
          if (pp < np && row < p.n) {
            float gate = acc[0][nt][i], up = acc[1][nt][i];
            if (p.limit > 0.0f) {
              gate = fminf(gate, p.limit);
              up = fminf(p.limit, fmaxf(-p.limit, up));
            }
            hv[nt][i] = gate / (1.0f + expf(-gate)) * up * p.route_w[slot_s[pp]];
          }
        }
      }
      // amax of each pass token over the warp's 16 rows, then over the block's warps.
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          float m = fmaxf(fabsf(hv[nt][q]), fabsf(hv[nt][2 + q]));
          for (int o = 4; o < 32; o *= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
          const int pp = 8 * nt + 2 * t4 + q;
          if (g == 0 && pp < P) amax_s[warp * P + pp] = m;
        }
      }
      __syncthreads();
      constexpr int kWarpsPerBlock = kActBlock / 16;
      const int w0 = warp / kWarpsPerBlock * kWarpsPerBlock;
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int pp = 8 * nt + 2 * t4 + q;
          if (pp >= np) continue;
          float am = 0.0f;
          for (int w = w0; w < w0 + kWarpsPerBlock; ++w) am = fmaxf(am, amax_s[w * P + pp]);
          am = fmaxf(am, 1e-4f);
          const int ex = pow2_scale_exponent(am);
          const float inv_s = __uint_as_float(static_cast<unsigned>(127 - ex) << 23);
          uint8_t* hrow = p.hq + static_cast<int64_t>(slot_s[pp]) * p.hq_ld;
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int64_t row = hh == 0 ? row_a : row_b;
            const float v = fminf(448.0f, fmaxf(-448.0f, hv[nt][2 * hh + q] * inv_s));
            hrow[permuted_pos(row)] =
                static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
          }
          if (warp == w0 && g == 0) {
            p.sh[static_cast<int64_t>(slot_s[pp]) * p.sh_ld + (cta_n0 + 16 * w0) / kActBlock] =
                __uint_as_float(static_cast<unsigned>(ex + 127) << 23);
          }
        }
      }
    }
  }
}

// out[t, d] = sum_j (slot t*k + j has a row ? y[t*k + j, d] : 0) (j ascending) + y_shared.
__global__ void w4a8_combine_kernel(const float* y, const int32_t* slot_row,
                                    const float* y_shared, int64_t n_tokens, int64_t k,
                                    int64_t dim, float* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_tokens * dim) return;
  const int64_t t = idx / dim, d = idx % dim;
  float acc = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    if (slot_row[t * k + j] >= 0) acc += y[(t * k + j) * dim + d];
  }
  if (y_shared != nullptr) acc += y_shared[idx];
  out[idx] = acc;
}

__global__ void w4a8_read_probe_kernel(const uint8_t* p, int64_t n16, uint32_t* sink) {
  uint32_t acc = 0;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n16; i += step) {
    const uint4 v = ldg_stream(p + 16 * i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // practically never: keeps the loads
}

int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int kRegions = 11;
struct Layout {
  int64_t sizes[kRegions];
};

void check_shape(const MoeExpertsShape& s, int64_t act_block) {
  CHECK(s.n_tokens >= 0 && s.top_k >= 1 && s.n_experts >= 1 && s.dim >= 1 && s.inter >= 1)
      << "moe experts w4a8: T=" << s.n_tokens << " k=" << s.top_k << " E=" << s.n_experts
      << " D=" << s.dim << " I=" << s.inter;
  CHECK_KIND(kUnsupported, s.dim % 32 == 0 && s.inter % 32 == 0)
      << "moe experts w4a8: D=" << s.dim << " and I=" << s.inter
      << " must be multiples of 32 (FP4 scale blocks)";
  CHECK_KIND(kUnsupported, act_block == 32 || act_block == 128)
      << "moe experts w4a8: activation block " << act_block << " (32 or 128)";
  CHECK_KIND(kUnsupported, s.n_tokens <= kW4a8MaxTokens)
      << "moe experts w4a8: " << s.n_tokens << " tokens (decode path: at most " << kW4a8MaxTokens
      << "; use the FP8 grouped path for prefill)";
}

Layout layout_of(const MoeExpertsShape& s, int64_t ab) {
  const int64_t T = s.n_tokens, k = s.top_k, E = s.n_experts;
  const int64_t cap = moe_rows_cap(T, k, E), tiles = moe_tiles_cap(T, k, E);
  const int64_t ip = w4a8_padded_k(s.inter);
  return Layout{{4 * E, 4 * (E + 1), 4 * cap, 4 * T * k, 4 * tiles, 4 * tiles, T * s.dim,
                 4 * T * ceil_div(s.dim, ab), T * k * ip, 4 * T * k * (ip / ab),
                 4 * T * k * s.dim}};
}

int64_t smem_bytes(int64_t pass, int64_t kp, int64_t ab) {
  return pass * (kp + kSmemPad) + 4 * (kp / ab) * pass + 4 * pass + 4 * kWarps * pass;
}

// The kFast reduction buffer: kMats x kNt x 4 floats per thread, after smem_bytes (16-aligned).
int64_t red_bytes(int mats) { return int64_t{4} * mats * kNtMax * 4 * kThreads; }

template <int kMats, int kActBlock, int kDepth, bool kFast, int kNt = kNtMax>
void launch_gemm(cudaStream_t stream, GemmParams p, int64_t tiles, int64_t n_tiles) {
  CHECK(p.pass >= 1 && p.pass <= 8 * kNt) << "moe experts w4a8: pass " << p.pass << " > " << 8 * kNt;
  if (!kFast) p.split = 1;
  int64_t smem = smem_bytes(p.pass, p.kp, kActBlock);
  if (kFast) {
    p.stage_off = round_up(smem, 16);
    smem = p.stage_off + int64_t{kDepth} * kWarps * kMats * (2048 + 128);
  }
  if (kFast && p.split > 1) {
    p.red_off = round_up(smem, 16);
    smem = p.red_off + red_bytes(kMats);
  }
  CHECK_KIND(kUnsupported, smem <= kSmemLimit)
      << "moe experts w4a8: K=" << p.kp << " needs " << smem << " bytes of shared memory";
  CHECK_KIND(kUnsupported, tiles < (int64_t{1} << 31) && n_tiles <= 65535)
      << "moe experts w4a8: " << tiles << " tiles x " << n_tiles << " column blocks";
  static std::once_flag once;  // opt in to more than 48 KB of dynamic shared memory
  std::call_once(once, [] {
    CUDA_CHECK(cudaFuncSetAttribute(w4a8_gemm_kernel<kMats, kActBlock, kDepth, kFast, kNt>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemLimit));
  });
  if constexpr (!kFast) {
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(n_tiles));
    w4a8_gemm_kernel<kMats, kActBlock, kDepth, false, kNt><<<grid, kThreads, smem, stream>>>(p);
    CUDA_CHECK_LAUNCH();
  } else {
  CHECK_KIND(kUnsupported, p.split >= 1 && p.split <= 8)
      << "moe experts w4a8: split " << p.split << " (1..8, a portable cluster)";
  cuda::launch_clustered(w4a8_gemm_kernel<kMats, kActBlock, kDepth, true>,
                         dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(n_tiles),
                              static_cast<unsigned>(p.split)),
                         dim3(kThreads), static_cast<size_t>(smem), stream,
                         dim3(1, 1, static_cast<unsigned>(p.split)), p);
  }
}

constexpr int kUpDepth = 3, kDownDepth = 4;
constexpr int kNarrowUpDepth = 2;  // kNt = 1: 2 CTAs per SM within 128 registers, no spills
constexpr int kFastUpStages = 3, kFastDownStages = 3;  // kFast: cp.async stages of 2 chunks

// kFast K splits (cluster sizes). Fixed per process, never a function of T: a token's sums
// must not depend on the batch (batch invariance).
int g_split_up = 1, g_split_down = 1;
// kPlain: tokens per pass, 16 (kNt 2) or 8 (kNt 1: the narrow kernels); 0: by T (narrow_pass).
int g_pass_max = 0;

// The measured choice (H200 2026-12-04, w4a8-narrow-h200-2026-12-04-733cb98.md, V4.1 plain path
// in % of copy, pass 16 -> 8): T 4 67 -> 74, T 16 66 -> 76, T 64 67 -> 71, T 256 57 -> 58;
// T 1 (6 rows, one pass either way) 55 -> 50: the narrow up kernel's shallower K pipeline
// costs more than its second CTA per SM gives when 108 CTAs do not fill 132 SMs. Both widths
// give a token the same bits, so choosing by T keeps batch invariance.
bool narrow_pass(int64_t T, int64_t k) {
  if (g_pass_max != 0) return g_pass_max == 8;
  return T * k > 8 && T <= 64;
}

}  // namespace

size_t moe_experts_w4a8_workspace_bytes(const MoeExpertsShape& s, int64_t act_block) {
  check_shape(s, act_block);
  const Layout l = layout_of(s, act_block);
  int64_t total = 0;
  for (int64_t b : l.sizes) total += round_up(b, 256);
  return static_cast<size_t>(total);
}

MoeW4a8Workspace moe_experts_w4a8_workspace(const MoeExpertsShape& s, int64_t act_block,
                                            void* workspace) {
  check_shape(s, act_block);
  CHECK(reinterpret_cast<uintptr_t>(workspace) % 256 == 0)
      << "moe experts w4a8: workspace must be 256-byte aligned";
  const Layout l = layout_of(s, act_block);
  uint8_t* at = static_cast<uint8_t*>(workspace);
  void* region[kRegions];
  for (int i = 0; i < kRegions; ++i) {
    region[i] = at;
    at += round_up(l.sizes[i], 256);
  }
  MoeW4a8Workspace ws;
  ws.align.counts = static_cast<int32_t*>(region[0]);
  ws.align.offsets = static_cast<int32_t*>(region[1]);
  ws.align.row_slot = static_cast<int32_t*>(region[2]);
  ws.align.slot_row = static_cast<int32_t*>(region[3]);
  ws.align.tile_expert = static_cast<int32_t*>(region[4]);
  ws.align.tile_row0 = static_cast<int32_t*>(region[5]);
  ws.xq = static_cast<uint8_t*>(region[6]);
  ws.sx = static_cast<float*>(region[7]);
  ws.hq = static_cast<uint8_t*>(region[8]);
  ws.sh = static_cast<float*>(region[9]);
  ws.y = static_cast<float*>(region[10]);
  return ws;
}

void moe_experts_w4a8_cuda(cudaStream_t stream, const MoeExpertsShape& s, int64_t act_block,
                           const float* x, const int32_t* ids, const float* weights,
                           const MoeW4a8Weights& w, const float* y_shared, void* workspace,
                           float* out, MoeW4a8Kernel kernel) {
  const MoeW4a8Workspace ws = moe_experts_w4a8_workspace(s, act_block, workspace);
  if (s.n_tokens == 0) return;
  for (const uint8_t* ptr : {w.w1, w.s1, w.w3, w.s3, w.w2, w.s2}) {
    CHECK_KIND(kUnsupported, ptr != nullptr && reinterpret_cast<uintptr_t>(ptr) % 16 == 0)
        << "moe experts w4a8: every weight and scale stack must be set and 16-byte aligned";
  }
  const int64_t T = s.n_tokens, k = s.top_k, E = s.n_experts, D = s.dim, I = s.inter;
  const int64_t dp = w4a8_padded_k(D), ip = w4a8_padded_k(I);
  const int64_t tiles = moe_tiles_cap(T, k, E);
  const bool narrow = kernel == MoeW4a8Kernel::kPlain && narrow_pass(T, k);
  const int64_t pass_max = narrow ? 8 : kPassMax;
  const int32_t pass = static_cast<int32_t>(std::min<int64_t>(pass_max, round_up(T * k, 8)));
  moe_align_cuda(stream, ids, T, k, E, ws.align);
  act_quant_cuda(stream, x, DType::F32, T, D, act_block, ws.xq, ws.sx, ScaleLayout::kRowMajor);

  GemmParams up;
  up.a = ws.xq;
  up.a_ld = D;
  up.a_k = D;
  up.a_div = static_cast<int32_t>(k);
  up.a_permuted = false;
  up.sa = ws.sx;
  up.sa_ld = ceil_div(D, act_block);
  up.sa_n = up.sa_ld;
  up.w[0] = w.w1;
  up.ws[0] = w.s1;
  up.w[1] = w.w3;
  up.ws[1] = w.s3;
  up.n = I;
  up.kp = dp;
  up.counts = ws.align.counts;
  up.offsets = ws.align.offsets;
  up.row_slot = ws.align.row_slot;
  up.tile_expert = ws.align.tile_expert;
  up.tile_row0 = ws.align.tile_row0;
  up.pass = pass;
  up.route_w = weights;
  up.limit = s.swiglu_limit;
  up.hq = ws.hq;
  up.sh = ws.sh;
  up.hq_ld = ip;
  up.sh_ld = ip / act_block;

  GemmParams down = up;
  down.a = ws.hq;
  down.a_ld = ip;
  down.a_k = ip;
  down.a_div = 1;
  down.a_permuted = true;
  down.sa = ws.sh;
  down.sa_ld = ip / act_block;
  down.sa_n = down.sa_ld;
  down.w[0] = w.w2;
  down.ws[0] = w.s2;
  down.w[1] = nullptr;
  down.ws[1] = nullptr;
  down.n = D;
  down.kp = ip;
  down.y = ws.y;
  down.y_ld = D;

  up.split = g_split_up;
  down.split = g_split_down;
  const int64_t up_cols = ip / kCtaRows, down_cols = ceil_div(D, kCtaRows);
  // The up and the down projection of one kernel family, for either activation block.
  auto run = [&](auto up_depth, auto down_depth, auto fast, auto nt) {
    constexpr int kU = decltype(up_depth)::value, kD = decltype(down_depth)::value;
    constexpr bool kF = decltype(fast)::value;
    constexpr int kN = decltype(nt)::value;
    if (act_block == 128) {
      launch_gemm<2, 128, kU, kF, kN>(stream, up, tiles, up_cols);
      launch_gemm<1, 128, kD, kF, kN>(stream, down, tiles, down_cols);
    } else {
      launch_gemm<2, 32, kU, kF, kN>(stream, up, tiles, up_cols);
      launch_gemm<1, 32, kD, kF, kN>(stream, down, tiles, down_cols);
    }
  };
  using std::integral_constant;
  if (narrow) {
    run(integral_constant<int, kNarrowUpDepth>{}, integral_constant<int, kDownDepth>{},
        std::false_type{}, integral_constant<int, 1>{});
  } else if (kernel == MoeW4a8Kernel::kPlain) {
    run(integral_constant<int, kUpDepth>{}, integral_constant<int, kDownDepth>{},
        std::false_type{}, integral_constant<int, kNtMax>{});
  } else {
    run(integral_constant<int, kFastUpStages>{}, integral_constant<int, kFastDownStages>{},
        std::true_type{}, integral_constant<int, kNtMax>{});
  }
  constexpr int kBlock = 256;
  w4a8_combine_kernel<<<static_cast<unsigned>(ceil_div(T * D, kBlock)), kBlock, 0, stream>>>(
      ws.y, ws.align.slot_row, y_shared, T, k, D, out);
  CUDA_CHECK_LAUNCH();
}

void moe_w4a8_set_fast_split(int up, int down) {
  CHECK_KIND(kUnsupported, up >= 1 && up <= 8 && down >= 1 && down <= 8)
      << "moe experts w4a8: K splits " << up << ", " << down << " (1..8)";
  g_split_up = up;
  g_split_down = down;
}

void moe_w4a8_set_pass_max(int pass) {
  CHECK_KIND(kUnsupported, pass == 0 || pass == 8 || pass == 16)
      << "moe experts w4a8: pass " << pass << " (0: by T, 8: the narrow kernels, or 16)";
  g_pass_max = pass;
}

void w4a8_read_probe_cuda(cudaStream_t stream, const void* p, int64_t bytes, uint32_t* sink) {
  CHECK(bytes % 16 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0)
      << "w4a8_read_probe: " << bytes << " bytes at a pointer that must be 16-byte aligned";
  int sms = 0, dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  w4a8_read_probe_kernel<<<4 * sms, 512, 0, stream>>>(static_cast<const uint8_t*>(p), bytes / 16,
                                                      sink);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
