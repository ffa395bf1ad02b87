// CUDA entries of the mHC ops (contracts in mhc.h; streams X [N, n_hc, D] fp32, all math
// fp32). n_hc <= 4. Device pointers; run on `stream`; never allocate or synchronise; graph
// capturable.
//
//  * hc_mix_cuda: one block per token computes the (2+n_hc)*n_hc projections and the RMS
//    statistic in one pass over the token's n_hc*D values, then one thread applies
//    sigmoid / softmax / Sinkhorn exactly in the reference's order. fn rows are re-read per
//    token (from L2): fine for decode; a prefill-sized batch would want a GEMM first.
//  * hc_collapse_cuda / hc_expand_cuda: elementwise, fp32.
//  * hc_head_cuda: the head mix (n_hc projections) then the collapse; pre_scratch [N, n_hc]
//    is caller-provided device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/mhc/mhc.h"

namespace deepinfer {

void hc_mix_cuda(cudaStream_t stream, const float* x, int64_t n_rows, const float* fn,
                 const float* base, const float* scale, const HcMixParams& p, float* pre,
                 float* post, float* comb);
void hc_collapse_cuda(cudaStream_t stream, const float* x, const float* pre, int64_t n_rows,
                      int64_t n_hc, int64_t dim, float* u);
void hc_expand_cuda(cudaStream_t stream, const float* x, const float* y, const float* post,
                    const float* comb, int64_t n_rows, int64_t n_hc, int64_t dim, float* x_out);
void hc_head_cuda(cudaStream_t stream, const float* x, int64_t n_rows, const float* fn,
                  const float* base, const float* scale, const HcMixParams& p, float* pre_scratch,
                  float* h);

}  // namespace deepinfer
