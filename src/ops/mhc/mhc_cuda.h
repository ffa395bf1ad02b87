// CUDA entries of the mHC ops (contracts in mhc.h; streams X [N, n_hc, D] fp32, all math
// fp32). n_hc <= 4. Device pointers; run on `stream`; never allocate or synchronise; graph
// capturable.
//
//  * hc_mix_cuda: the (2+n_hc)*n_hc projections as one fp32 GEMM (cuBLASLt, full fp32, into
//    mix_scratch [N, (2+n_hc)*n_hc]), then one block per token computes the RMS statistic
//    and one thread applies sigmoid / softmax / Sinkhorn in the reference's order. The
//    weights are read once per call whatever N is.
//  * hc_collapse_cuda / hc_expand_cuda: elementwise, fp32.
//  * hc_head_cuda: the head mix (n_hc projections, mix_scratch [N, n_hc]) then the collapse;
//    pre_scratch [N, n_hc].
// Scratch buffers are caller-provided device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_context.h"
#include "ops/mhc/mhc.h"

namespace deepinfer {

void hc_mix_cuda(cuda::DeviceContext& ctx, const float* x, int64_t n_rows, const float* fn,
                 const float* base, const float* scale, const HcMixParams& p, float* mix_scratch,
                 float* pre, float* post, float* comb);
void hc_collapse_cuda(cudaStream_t stream, const float* x, const float* pre, int64_t n_rows,
                      int64_t n_hc, int64_t dim, float* u);
void hc_expand_cuda(cudaStream_t stream, const float* x, const float* y, const float* post,
                    const float* comb, int64_t n_rows, int64_t n_hc, int64_t dim, float* x_out);
void hc_head_cuda(cuda::DeviceContext& ctx, const float* x, int64_t n_rows, const float* fn,
                  const float* base, const float* scale, const HcMixParams& p, float* mix_scratch,
                  float* pre_scratch, float* h);

}  // namespace deepinfer
