// Device helpers of GpuModel (src/runtime/gpu_kernels.cu): counter-hash random fills (dummy
// weights and synthetic state are generated on the device, never uploaded), the per-expert
// scale segmentation of the MoE activation quantisation, a batch-invariant fp32 GEMM, and the
// bandwidth / GEMM-ceiling helpers the GPU benchmark uses. Device pointers; each runs on
// `s`, never allocates or synchronises (copy_uint4 queries the SM count on its first call);
// graph capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

// Uniform values with the given mean and standard deviation, from hash(i, seed).
void fill_uniform_f32(cudaStream_t s, float* p, int64_t n, float mean, float std, uint64_t seed);
void fill_uniform_bf16(cudaStream_t s, void* p, int64_t n, float half_width, uint64_t seed);
// e4m3 codes of a uniform value in [-448, 448).
void fill_random_e4m3(cudaStream_t s, uint8_t* p, int64_t n, uint64_t seed);
void fill_const_f32(cudaStream_t s, float* p, int64_t n, float value);
// Regroups row-major activation scales in [n_rows, n_kb] into per-expert block-major
// segments: out[row0[r] * n_kb + kb * m[r] + (r - row0[r])] = in[r * n_kb + kb] for rows
// with m[r] > 0 (segment of m[r] rows starting at row0[r]).
void segment_scales(cudaStream_t s, const float* in, int64_t n_rows, int64_t n_kb,
                    const int32_t* row0, const int32_t* m, float* out);
// y[m, n] = x[m, k] · w[n, k]^T in fp32, one warp per output element, each lane summing a
// fixed strided subset of k in order, then a fixed xor-shuffle tree: the value of a row
// depends only on that row of x and on w, never on m (the batch-invariant fp32 GEMM).
void gemm_f32_rowwise_cuda(cudaStream_t s, const float* x, const float* w, int64_t m, int64_t n,
                           int64_t k, float* y);
// Device-to-device copy of `bytes` (a multiple of 16) with 16-byte streaming loads/stores.
void copy_uint4(cudaStream_t s, const void* src, void* dst, int64_t bytes);

}  // namespace deepinfer
