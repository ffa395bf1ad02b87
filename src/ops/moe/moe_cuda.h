// CUDA pieces of the MoE (math in moe.h). Device pointers; run on `stream`; never allocate
// or synchronise; graph capturable. fp32.
//
//  * route_cuda: from router logits [N, E] (the gate GEMM's output): scores =
//    sqrt(softplus(logits * inv_temp)), selection = top_k of scores + bias (bias may be null;
//    ties: lower index; ids ascending, as topk_indices) or tid2eid[token] [V, top_k] when
//    tid2eid is non-null; weights = scores[sel] / (sum + sum_eps) * routed_scale (normalize
//    off: scores[sel] * routed_scale), as route_ref. ids [N, top_k] int32, weights [N, top_k].
//  * swiglu_cuda: g[i, j] = silu(min(g, limit)) * clamp(v, -limit, limit) * (row_weight ?
//    row_weight[i] : 1) for i < n_rows, j < inter (limit <= 0: no clamp); in place in g.
//  * gather_rows_cuda: out[i, :] = x[rows[i], :] (width floats per row).
//  * moe_combine_cuda: out[r, :] = sum_j y_routed[slot_of[r * top_k + j], :] + y_shared[r, :]
//    (j ascending; y_shared may be null).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/moe/moe.h"

namespace deepinfer {

void route_cuda(cudaStream_t stream, const float* logits, int64_t n_rows, const float* bias,
                const int32_t* tid2eid, const int32_t* tokens, const RouterParams& p,
                int32_t* expert_ids, float* weights);
void swiglu_cuda(cudaStream_t stream, float* g, const float* v, const float* row_weight,
                 int64_t n_rows, int64_t inter, float limit);
void gather_rows_cuda(cudaStream_t stream, const float* x, const int32_t* rows, int64_t n_rows,
                      int64_t width, float* out);
void moe_combine_cuda(cudaStream_t stream, const float* y_routed, const int32_t* slot_of,
                      const float* y_shared, int64_t n_rows, int64_t top_k, int64_t dim,
                      float* out);

}  // namespace deepinfer
