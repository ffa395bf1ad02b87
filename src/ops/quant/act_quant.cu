// One warp per (row, K block): a max-reduction over the block, then each lane quantises its
// elements. Memory-bound. The common case (bf16, block 128, K % 128 == 0, 8-byte aligned
// rows) keeps the block in registers: one 8-byte load and one 4-byte store per lane. Other
// cases loop over the block twice (the second pass hits L1).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/quant/act_quant.h"

namespace deepinfer {
namespace {

struct Params {
  const void* x;
  int64_t m, k, block, n_kb;
  uint8_t* q;
  float* scale;
  bool block_major;
};

__device__ __forceinline__ float load_x(const float* x, int64_t i) { return x[i]; }
__device__ __forceinline__ float load_x(const __nv_bfloat16* x, int64_t i) {
  return __bfloat162float(x[i]);
}

// 2^ceil(log2(amax / 448)) from the fp32 bits of the quotient (IEEE division, as the
// reference kernels compute it); returns the exponent.
__device__ __forceinline__ int pow2_scale_exponent(float amax) {
  const float ratio = __fdiv_rn(amax, 448.0f);
  const unsigned bits = __float_as_uint(ratio);
  return static_cast<int>((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0 ? 1 : 0);
}

template <typename T>
__global__ void act_quant_kernel(Params p) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= p.m * p.n_kb) return;
  const int64_t row = warp / p.n_kb, kb = warp % p.n_kb;
  const int64_t k0 = kb * p.block;
  const int64_t k1 = min(p.k, k0 + p.block);
  const T* x = static_cast<const T*>(p.x) + row * p.k;

  float amax = 0.0f;
  for (int64_t i = k0 + lane; i < k1; i += 32) amax = fmaxf(amax, fabsf(load_x(x, i)));
  for (int offset = 16; offset > 0; offset /= 2)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  amax = fmaxf(amax, 1e-4f);
  const int e = pow2_scale_exponent(amax);
  const float s = __uint_as_float(static_cast<unsigned>(e + 127) << 23);
  const float inv_s = __uint_as_float(static_cast<unsigned>(127 - e) << 23);  // exact

  uint8_t* q = p.q + row * p.k;
  for (int64_t i = k0 + lane; i < k1; i += 32) {
    const float v = fminf(448.0f, fmaxf(-448.0f, load_x(x, i) * inv_s));
    q[i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
  }
  if (lane == 0) p.scale[p.block_major ? kb * p.m + row : row * p.n_kb + kb] = s;
}

// bf16, block 128: lane l holds elements 4l..4l+3 of the block.
__global__ void act_quant_bf16_128_kernel(Params p) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= p.m * p.n_kb) return;
  const int64_t offset = warp * 128 + lane * 4;  // row-major [m, k] with k = n_kb * 128
  const uint2 raw = __ldcs(reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(p.x) + offset));
  const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
  const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
  const float v[4] = {__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi)};
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  amax = fmaxf(amax, 1e-4f);
  const int e = pow2_scale_exponent(amax);
  const float inv_s = __uint_as_float(static_cast<unsigned>(127 - e) << 23);
  uint32_t packed = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float q = fminf(448.0f, fmaxf(-448.0f, v[i] * inv_s));
    packed |= static_cast<uint32_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3)) << (8 * i);
  }
  __stcs(reinterpret_cast<uint32_t*>(p.q + offset), packed);
  if (lane == 0) {
    const int64_t row = warp / p.n_kb, kb = warp % p.n_kb;
    p.scale[p.block_major ? kb * p.m + row : row * p.n_kb + kb] =
        __uint_as_float(static_cast<unsigned>(e + 127) << 23);
  }
}

}  // namespace

void act_quant_cuda(cudaStream_t stream, const void* x, DType x_dtype, int64_t m, int64_t k,
                    int64_t block, uint8_t* q, float* scale, ScaleLayout layout) {
  CHECK(block >= 1 && block <= 1024) << "act_quant: block " << block << " (want 1..1024)";
  CHECK_KIND(kUnsupported, x_dtype == DType::BF16 || x_dtype == DType::F32)
      << "act_quant: input dtype " << dtype_name(x_dtype) << " (want BF16 or F32)";
  if (m == 0 || k == 0) return;
  Params p{x, m, k, block, (k + block - 1) / block, q, scale,
           layout == ScaleLayout::kBlockMajor};
  constexpr int kThreads = 256;
  const int64_t n_warps = p.m * p.n_kb;
  const int64_t n_blocks = (n_warps * 32 + kThreads - 1) / kThreads;
  CHECK_KIND(kUnsupported, n_blocks < (int64_t{1} << 31)) << "act_quant: problem too large";
  const bool fast = x_dtype == DType::BF16 && block == 128 && k % 128 == 0 &&
                    reinterpret_cast<uintptr_t>(x) % 8 == 0 && reinterpret_cast<uintptr_t>(q) % 4 == 0;
  if (fast) {
    act_quant_bf16_128_kernel<<<static_cast<unsigned>(n_blocks), kThreads, 0, stream>>>(p);
  } else if (x_dtype == DType::BF16) {
    act_quant_kernel<__nv_bfloat16><<<static_cast<unsigned>(n_blocks), kThreads, 0, stream>>>(p);
  } else {
    act_quant_kernel<float><<<static_cast<unsigned>(n_blocks), kThreads, 0, stream>>>(p);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
