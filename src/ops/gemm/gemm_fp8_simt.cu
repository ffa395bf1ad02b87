// SIMT block-scaled FP8 kernel (gemm.h's contract; launcher in gemm_fp8_kernels.h): any M,
// the fast path for decode-sized M and the batch-invariant path.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_fp8_kernels.h"

namespace deepinfer::gemm_detail {
namespace {

// ---- SIMT block-scaled FP8 kernel (any M; the fast path for decode-sized M) ----
//
// One warp per output column n and tile of kRows rows (kRows in {1, 2, 4, 8}, chosen from
// M). Each lane streams 16 weight bytes per chunk, kUnroll chunks in flight at once (a warp
// covers kUnroll * 512 K values per step), converts them to fp32 once and reuses them for
// every row of the tile; per 16-element chunk the partial dot product is scaled by
// sx[m, kb] * sw[n / b, kb] (b = p.block, 128 or 32: K % 16 == 0 and b % 16 == 0, so a chunk
// never straddles a block). Weights are read once per kRows rows. The arithmetic of a row
// depends on k and b only (never on M): the batch-invariant path for both block sizes.
constexpr int kSimtWarps = 4;
constexpr int kSimtUnroll = 4;

struct SimtParams {
  const uint8_t* xq;
  const float* sx;  // [n_kb, m]
  const uint8_t* wq;
  const float* sw;  // [n_nb, sw_ld]
  int64_t m, n, k, sw_ld, block;
  void* y;
  bool y_bf16;
};

__device__ __forceinline__ void e4m3x16_to_f32(const uint4& v, float* out) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __nv_fp8x2_storage_t pair = static_cast<__nv_fp8x2_storage_t>(words[i] >> (16 * j));
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
      out[4 * i + 2 * j] = f.x;
      out[4 * i + 2 * j + 1] = f.y;
    }
  }
}

template <int kRows>
__global__ void __launch_bounds__(kSimtWarps * 32) fp8_block_simt_kernel(SimtParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kSimtWarps + warp;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kRows;
  if (n >= p.n) return;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kRows), p.m - m0));
  const uint8_t* w = p.wq + n * p.k;
  const float* sw = p.sw + (n / p.block) * p.sw_ld;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  constexpr int64_t kStep = 32 * 16 * kSimtUnroll;
  for (int64_t base = lane * 16; base < p.k; base += kStep) {
    uint4 wv[kSimtUnroll];
#pragma unroll
    for (int u = 0; u < kSimtUnroll; ++u) {
      const int64_t k0 = base + u * 512;
      wv[u] = k0 < p.k ? __ldcs(reinterpret_cast<const uint4*>(w + k0)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kSimtUnroll; ++u) {
      const int64_t k0 = base + u * 512;
      if (k0 >= p.k) break;
      float wf[16];
      e4m3x16_to_f32(wv[u], wf);
      const int64_t kb = k0 / p.block;
      const float swv = sw[kb];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r < rows) {
          float xf[16];
          e4m3x16_to_f32(__ldg(reinterpret_cast<const uint4*>(p.xq + (m0 + r) * p.k + k0)), xf);
          float part = 0.0f;
#pragma unroll
          for (int i = 0; i < 16; ++i) part = fmaf(xf[i], wf[i], part);
          acc[r] = fmaf(part, __ldg(p.sx + kb * p.m + m0 + r) * swv, acc[r]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float v = acc[r];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0 && r < rows) {
      const int64_t idx = (m0 + r) * p.n + n;
      if (p.y_bf16) {
        static_cast<__nv_bfloat16*>(p.y)[idx] = __float2bfloat16(v);
      } else {
        static_cast<float*>(p.y)[idx] = v;
      }
    }
  }
}

template <int kRows>
void launch_simt(const SimtParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div64(p.n, kSimtWarps)),
                  static_cast<unsigned>(ceil_div64(p.m, kRows)));
  CHECK_KIND(kUnsupported, grid.y <= 65535u) << "fp8 gemm (SIMT): M=" << p.m << " too large";
  fp8_block_simt_kernel<kRows><<<grid, kSimtWarps * 32, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void fp8_block_simt(cudaStream_t stream, const void* xq, const float* sx, const void* wq,
                    const float* sw, int64_t m, int64_t n, int64_t k, void* y, bool y_bf16,
                    int64_t block) {
  CHECK_KIND(kUnsupported, reinterpret_cast<uintptr_t>(xq) % 16 == 0 &&
                               reinterpret_cast<uintptr_t>(wq) % 16 == 0)
      << "fp8 gemm (SIMT): xq and wq must be 16-byte aligned";
  const SimtParams p{static_cast<const uint8_t*>(xq), sx, static_cast<const uint8_t*>(wq), sw,
                     m, n, k, fp8_weight_scale_ld(k, block), block, y, y_bf16};
  if (m == 1) {
    launch_simt<1>(p, stream);
  } else if (m == 2) {
    launch_simt<2>(p, stream);
  } else if (m <= 4) {
    launch_simt<4>(p, stream);
  } else {
    launch_simt<8>(p, stream);
  }
}

}  // namespace deepinfer::gemm_detail
