// Grouped block-scaled FP8 GEMM for the routed experts (contract in moe_grouped_cuda.h).
// Needs sm_89+ (mma.sync ... e4m3; we build for sm_90a).
//
// CTA tile 64 rows x 64 columns, K in 128-wide blocks (one activation scale and one weight
// scale per block), 4 warps in a 2x2 arrangement, each warp 32x32 = 2 x 4 m16n8k32 MMAs per
// 32-wide K step. Tiles of A and W go to shared memory with cp.async (zero-filled outside the
// matrix or for padding rows), a 4-stage pipeline (3 K blocks in flight while one is
// multiplied; dynamic shared memory, 73.7 KB). Per K block the MMAs accumulate from zero in fp32;
// the block result is then scaled by sa * sw (both powers of two, so the product is exact) and
// added to the running fp32 accumulator (DeepGEMM's promotion). Every output element sees its
// K blocks in ascending order and the same MMA sequence, whatever the other rows are.
#include <cuda_runtime.h>

#include <mutex>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/gemm/gemm.h"
#include "ops/moe/moe_grouped_cuda.h"

namespace deepinfer {
namespace {

constexpr int kBm = static_cast<int>(kMoeRowTile);  // 64
constexpr int kBn = 64;
constexpr int kBk = 128;
constexpr int kThreads = 128;
constexpr int kRowBytes = kBk + 16;  // padded smem row: fragment loads are conflict-free
constexpr int kStages = 4;
constexpr int kStageBytes = (kBm + kBn) * kRowBytes;  // A tile then W tile
constexpr int kSmemBytes = kStages * kStageBytes;
static_assert(kBm == 64, "the tile list is built for 64-row tiles");

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void mma_e4m3(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

__global__ void __launch_bounds__(kThreads) grouped_gemm_fp8_kernel(GroupedGemmFp8Params p) {
  const int expert = p.tile_expert[blockIdx.x];
  if (expert < 0) return;
  const int64_t r0 = p.tile_row0[blockIdx.x];
  const int64_t n_col_blocks = (p.n + kBn - 1) / kBn;
  const bool second = blockIdx.y >= n_col_blocks;  // only with w_b
  const int64_t n0 = static_cast<int64_t>(second ? blockIdx.y - n_col_blocks : blockIdx.y) * kBn;
  const int64_t n_kb = (p.k + kBk - 1) / kBk;
  const int64_t sw_ld = (n_kb + 3) / 4 * 4;  // fp8_weight_scale_ld(K) (host-only there)
  const uint8_t* w = (second ? p.w_b : p.w) + static_cast<int64_t>(expert) * p.n * p.k;
  const float* sw = (second ? p.sw_b : p.sw) +
                    (static_cast<int64_t>(expert) * ((p.n + 127) / 128) + n0 / 128) * sw_ld;
  float* c_out = second ? p.c_b : p.c;

  extern __shared__ __align__(16) uint8_t smem[];
  auto smem_a = [&](int stage) { return smem + stage * kStageBytes; };
  auto smem_b = [&](int stage) { return smem + stage * kStageBytes + kBm * kRowBytes; };

  const int tid = threadIdx.x;
  // Loader: thread tid copies 16-byte chunk (tid % 8) of rows tid / 8 + 16 i, i < 4, of both
  // tiles. The source rows are fixed for the whole K loop.
  const int chunk = tid % 8;
  const uint8_t* a_src[4];
  const uint8_t* b_src[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = tid / 8 + 16 * i;
    int64_t arow = r0 + row;
    if (p.a_rows != nullptr) {
      const int32_t v = p.a_rows[arow];
      arow = v < 0 ? -1 : v / p.a_rows_div;
    }
    a_src[i] = arow < 0 ? nullptr : p.a + arow * p.k;
    b_src[i] = n0 + row < p.n ? w + (n0 + row) * p.k : nullptr;
  }
  auto load_stage = [&](int stage, int64_t kb) {
    const int64_t k = kb * kBk + chunk * 16;
    const bool k_ok = k < p.k;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = tid / 8 + 16 * i;
      const bool a_ok = k_ok && a_src[i] != nullptr;
      const bool b_ok = k_ok && b_src[i] != nullptr;
      cp_async16(smem_a(stage) + row * kRowBytes + chunk * 16, a_ok ? a_src[i] + k : p.a, a_ok);
      cp_async16(smem_b(stage) + row * kRowBytes + chunk * 16, b_ok ? b_src[i] + k : w, b_ok);
    }
  };

  const int warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;

  // Activation rows of this thread's accumulators: [mt][half] -> tile row wm + 16 mt + 8 half + g.
  int64_t sa_row[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int64_t arow = r0 + wm + 16 * mt + 8 * h + g;
      if (p.a_rows != nullptr) {
        const int32_t v = p.a_rows[arow];
        arow = v < 0 ? -1 : v / p.a_rows_div;
      }
      sa_row[mt][h] = arow;
    }
  }

  float acc[2][4][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;

  // Prologue: K blocks 0 .. kStages - 2 in flight (one commit group each, empty past n_kb).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_kb) load_stage(s, s);
    cp_async_commit();
  }
  for (int64_t kb = 0; kb < n_kb; ++kb) {
    const int stage = static_cast<int>(kb % kStages);
    cp_async_wait<kStages - 2>();  // block kb has landed (this thread's copies)
    __syncthreads();               // ... everyone's; and block kb - 1's stage is free again
    if (kb + kStages - 1 < n_kb) {
      load_stage(static_cast<int>((kb + kStages - 1) % kStages), kb + kStages - 1);
    }
    cp_async_commit();  // possibly empty: keeps one group per iteration

    float blk[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) blk[mt][nt][i] = 0.0f;
    const uint8_t* sa_tile = smem_a(stage);
    const uint8_t* sb_tile = smem_b(stage);
#pragma unroll
    for (int ks = 0; ks < kBk / 32; ++ks) {
      const int kc = ks * 32 + t4 * 4;
      uint32_t af[2][4], bf[4][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const uint8_t* lo = sa_tile + (wm + 16 * mt + g) * kRowBytes;
        const uint8_t* hi = lo + 8 * kRowBytes;
        af[mt][0] = lds32(lo + kc);
        af[mt][1] = lds32(hi + kc);
        af[mt][2] = lds32(lo + kc + 16);
        af[mt][3] = lds32(hi + kc + 16);
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const uint8_t* col = sb_tile + (wn + 8 * nt + g) * kRowBytes;
        bf[nt][0] = lds32(col + kc);
        bf[nt][1] = lds32(col + kc + 16);
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_e4m3(blk[mt][nt], af[mt], bf[nt]);
    }
    // Promotion: acc += blk * (sa * sw); the scale product is exact (powers of two).
    const float swv = sw[kb];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t arow = sa_row[mt][h];
        const float s = arow < 0 ? 0.0f : p.sa[kb * p.sa_ld + arow] * swv;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          acc[mt][nt][2 * h] = fmaf(blk[mt][nt][2 * h], s, acc[mt][nt][2 * h]);
          acc[mt][nt][2 * h + 1] = fmaf(blk[mt][nt][2 * h + 1], s, acc[mt][nt][2 * h + 1]);
        }
      }
    }
  }

  // C fragment: element 2h + i of [mt][nt] is row wm + 16 mt + 8 h + g,
  // column wn + 8 nt + 2 t4 + i.
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float* crow = c_out + (r0 + wm + 16 * mt + 8 * h + g) * p.ldc;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int64_t n = n0 + wn + 8 * nt + 2 * t4;
        if (n + 1 < p.n && p.ldc % 2 == 0) {
          *reinterpret_cast<float2*>(crow + n) =
              make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
        } else {
          if (n < p.n) crow[n] = acc[mt][nt][2 * h];
          if (n + 1 < p.n) crow[n + 1] = acc[mt][nt][2 * h + 1];
        }
      }
    }
  }
}

}  // namespace

void grouped_gemm_fp8_cuda(cudaStream_t stream, const GroupedGemmFp8Params& p) {
  CHECK(p.n >= 1 && p.k >= 1) << "grouped_gemm_fp8: N=" << p.n << " K=" << p.k;
  CHECK_KIND(kUnsupported, p.k % 16 == 0)
      << "grouped_gemm_fp8: K=" << p.k << " is not a multiple of 16";
  CHECK_KIND(kUnsupported, reinterpret_cast<uintptr_t>(p.a) % 16 == 0 &&
                               reinterpret_cast<uintptr_t>(p.w) % 16 == 0)
      << "grouped_gemm_fp8: A and W must be 16-byte aligned";
  CHECK(p.a_rows_div >= 1 && p.ldc >= p.n) << "grouped_gemm_fp8: a_rows_div " << p.a_rows_div
                                          << ", ldc " << p.ldc << " < N " << p.n;
  CHECK(p.w_b == nullptr || (p.sw_b != nullptr && p.c_b != nullptr &&
                              reinterpret_cast<uintptr_t>(p.w_b) % 16 == 0))
      << "grouped_gemm_fp8: the second weight needs its scales, an output and 16-byte alignment";
  if (p.n_tiles_cap == 0) return;
  const int64_t n_blocks = (p.n + kBn - 1) / kBn * (p.w_b != nullptr ? 2 : 1);
  CHECK_KIND(kUnsupported, p.n_tiles_cap < (int64_t{1} << 31) && n_blocks <= 65535)
      << "grouped_gemm_fp8: " << p.n_tiles_cap << " tiles x " << n_blocks << " column blocks";
  const dim3 grid(static_cast<unsigned>(p.n_tiles_cap), static_cast<unsigned>(n_blocks));
  static std::once_flag once;  // opt in to more than 48 KB of dynamic shared memory
  std::call_once(once, [] {
    CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_fp8_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  });
  grouped_gemm_fp8_kernel<<<grid, kThreads, kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
