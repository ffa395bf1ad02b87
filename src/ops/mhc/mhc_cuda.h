// CUDA entries of the mHC ops (contracts in mhc.h; streams X [N, n_hc, D] fp32, all math
// fp32). n_hc <= 4. Device pointers; run on `stream`; never allocate or synchronise; graph
// capturable.
//
//  * hc_mix_cuda: the (2+n_hc)*n_hc projections and the RMS statistic, then sigmoid /
//    softmax / Sinkhorn on one thread per token in the reference's order. kSplitK (default):
//    partial dot products over 256-wide chunks of the width, 8 tokens per block, summed in
//    a fixed order (batch invariant); kGemm: fp32 cuBLASLt GEMM (full fp32) + a finishing
//    kernel (the unfused composition, kept as the oracle / fallback).
//  * hc_collapse_cuda / hc_expand_cuda: elementwise, fp32.
//  * hc_head_cuda: the head mix (n_hc projections) then the collapse; pre_scratch [N, n_hc].
// mix_scratch holds hc_mix_scratch_floats(N, p) floats (enough for either implementation
// and for the head).
// Scratch buffers are caller-provided device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_context.h"
#include "ops/mhc/mhc.h"

namespace deepinfer {

enum class HcMixImpl { kSplitK, kGemm };

int64_t hc_mix_scratch_floats(int64_t n_rows, const HcMixParams& p);

void hc_mix_cuda(cuda::DeviceContext& ctx, const float* x, int64_t n_rows, const float* fn,
                 const float* base, const float* scale, const HcMixParams& p, float* mix_scratch,
                 float* pre, float* post, float* comb, HcMixImpl impl = HcMixImpl::kSplitK);
void hc_collapse_cuda(cudaStream_t stream, const float* x, const float* pre, int64_t n_rows,
                      int64_t n_hc, int64_t dim, float* u);
void hc_expand_cuda(cudaStream_t stream, const float* x, const float* y, const float* post,
                    const float* comb, int64_t n_rows, int64_t n_hc, int64_t dim, float* x_out);
void hc_head_cuda(cuda::DeviceContext& ctx, const float* x, int64_t n_rows, const float* fn,
                  const float* base, const float* scale, const HcMixParams& p, float* mix_scratch,
                  float* pre_scratch, float* h, HcMixImpl impl = HcMixImpl::kSplitK);

}  // namespace deepinfer
