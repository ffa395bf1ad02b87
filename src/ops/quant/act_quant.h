// act_quant: activation quantisation to FP8 e4m3 for the block-scaled GEMMs
// (MODEL_SPEC §B.4). Per row of x [M, K], blocks of `block` consecutive K elements
// (128 for V4, 32 for V4.1; the last block of a row may be partial):
//   amax = max(max|x|, 1e-4);  s = 2^ceil(log2(amax / 448)) (from the fp32 bits of amax/448,
//   see pow2_scale in qat.h);  q = e4m3_RNE(clamp(x / s, -448, 448)).
// Outputs: q [M, K] e4m3 codes, s as fp32 (exact powers of two) in one of two layouts:
//   kRowMajor   [M, n_kb]  (n_kb = ceil(K / block); the reference layout)
//   kBlockMajor [n_kb, M]  (the scales of one K block for all rows contiguous: what the CUDA
//                           FP8 GEMM (ops/gemm/gemm.h) takes)
// Inputs are finite; x may be BF16 (raw bits) or F32. q·s reproduces fp8_roundtrip (qat.h).
#pragma once

#include <cstdint>

#include "base/dtype.h"

#ifdef DEEPINFER_CUDA
#include <cuda_runtime.h>
#endif

namespace deepinfer {

enum class ScaleLayout { kRowMajor, kBlockMajor };

void act_quant_ref(const float* x, int64_t m, int64_t k, int64_t block, uint8_t* q, float* scale,
                   ScaleLayout layout = ScaleLayout::kRowMajor);
void act_quant_bf16_ref(const uint16_t* x, int64_t m, int64_t k, int64_t block, uint8_t* q,
                        float* scale, ScaleLayout layout = ScaleLayout::kRowMajor);

#ifdef DEEPINFER_CUDA
// Device pointers; x_dtype is BF16 or F32; block in [1, 1024]. Runs on `stream`, never
// allocates or synchronises; graph capturable.
void act_quant_cuda(cudaStream_t stream, const void* x, DType x_dtype, int64_t m, int64_t k,
                    int64_t block, uint8_t* q, float* scale,
                    ScaleLayout layout = ScaleLayout::kBlockMajor);
#endif

}  // namespace deepinfer
