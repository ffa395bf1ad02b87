// Routed experts of one MoE layer on the GPU with fp32 weights, without host synchronisation
// (the fp32 counterpart of moe_grouped_cuda.h, same structure): routing ids -> per-expert row
// blocks (moe_align_cuda) -> grouped fp32 W1 and W3 GEMMs over all experts in one launch
// (grouped_gemm_f32_cuda, x rows read in place) -> clamped SwiGLU x routing weight
// (moe_swiglu_f32_cuda) -> grouped W2 GEMM -> combine in slot order (moe_combine_slots_cuda).
// moe_experts_f32_cuda chains them.
//
// Every entry takes device pointers, runs on `stream`, never allocates and never
// synchronises, so a layer is CUDA-graph capturable for a fixed T. Buffers are sized for the
// worst case from T alone (moe_rows_cap); the data-dependent sizes (rows per expert, tile
// count) live only on the device.
//
// Numerics: fp32 throughout; every GEMM output element is one thread's fp32 FMA chain
// acc = fmaf(a[k], w[k], acc) over k = 0, 1, ..., K-1 in ascending order, starting from +0
// (CUDA cores, no tensor cores, so never TF32). Its value depends only on its row of A and
// its row of W, not on the tile it sits in or on the other rows.
//
// Determinism: rows of one expert are ordered by slot index s = token * top_k + j (not by
// arrival order of atomics); every output element has the fixed K order above; the combine
// sums a token's k slots in j order. A token's output therefore does not depend on the other
// tokens of the batch (bitwise), which batch-invariant mode needs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/moe/moe_grouped_cuda.h"

namespace deepinfer {

// ---- 1. grouped fp32 GEMM ----
//
// For every live tile i (tile_expert[i] = e >= 0; moe_align_cuda's tile list) and rows r in
// [tile_row0[i], +kMoeRowTile):
//   c[r, n] = sum_{k ascending} A[arow(r), k] * W_e[n, k]   (fp32 FMA chain), n < N.
// Rows outside live tiles are not written; every row of a live tile is (all N columns).
//   A:  fp32, row stride lda >= K. With a_rows == nullptr, arow(r) = r. With a_rows,
//       arow(r) = a_rows[r] / a_rows_div (C integer division); a_rows[r] < 0 makes the row
//       zero (c[r, :] = +0), e.g. a padding row. Used to read tokens in place through
//       row_slot (a_rows_div = top_k).
//   W:  fp32 [E, N, K] contiguous (expert e at w + e*N*K).
//   c:  fp32 [rows, ldc] row-major, ldc >= N.
// No alignment or size constraints beyond N, K >= 1. Grid: n_tiles_cap x ceil(N/64) CTAs
// (x 2 with w_b); CTAs of dead tiles exit at once.
struct GroupedGemmF32Params {
  const float* a = nullptr;
  int64_t lda = 0;
  const int32_t* a_rows = nullptr;
  int32_t a_rows_div = 1;
  const float* w = nullptr;
  float* c = nullptr;
  int64_t ldc = 0;
  int64_t n = 0, k = 0;
  const int32_t* tile_expert = nullptr;
  const int32_t* tile_row0 = nullptr;
  int64_t n_tiles_cap = 0;
  // Optional second weight of the same shape sharing A (W3 beside W1): when w_b is set, the
  // same product is also computed with w_b into c_b (same ldc), in the same launch.
  const float* w_b = nullptr;
  float* c_b = nullptr;
};
void grouped_gemm_f32_cuda(cudaStream_t stream, const GroupedGemmF32Params& p);

// ---- 2. SwiGLU x routing weight, in place ----
//
// For padded rows r < offsets[n_experts] (read on the device), j < inter, in place in g
// (row stride inter):
//   s = row_slot[r] >= 0: g[r, j] = silu(min(g, limit)) * clamp(u[r, j], -limit, limit)
//                                   * weights[s]      (limit <= 0: no clamp; the same
//                                   expression and order as swiglu_cuda, moe_cuda.h)
//   s < 0 (padding row):  g[r, j] = +0
// Rows >= offsets[n_experts] are not touched. Launch size: rows_cap * inter threads.
void moe_swiglu_f32_cuda(cudaStream_t stream, float* g, const float* u, const float* weights,
                         const int32_t* row_slot, const int32_t* offsets, int64_t n_experts,
                         int64_t rows_cap, int64_t inter, float limit);

// ---- 3. the layer ----
//
// out[t, :] = sum_{j < k} y[slot_row[t*k + j], :]  (j ascending; a slot without a row adds
// nothing) + y_shared[t, :], where y is the expert output of slot (t, j):
// W2_e · h, h = SwiGLU(W1_e x_t, W3_e x_t) * weight[t, j] (fp32 GEMMs as above).
// An id outside [0, E) (e.g. -1 for a padding row of a graph bucket) gets no row, no GEMM
// work, and that slot contributes nothing; a token whose ids are all out of range gets
// out[t, :] = 0 + y_shared[t, :] (bitwise y_shared). y_shared [T, D] (the shared expert's
// output) may be null.
//   x        fp32 [T, D], device
//   ids      int32 [T, k], weights fp32 [T, k] (route_cuda's outputs)
//   w1, w3   fp32 [E, I, D]; w2 fp32 [E, D, I] (contiguous stacks)
//   out      fp32 [T, D]: every element written (T == 0: nothing to do)
//   workspace: moe_experts_f32_workspace_bytes(s) bytes, 256-byte aligned (about
//            4 rows_cap (2 I + D + 1) + 4 T k + 8 E bytes plus the tile lists, rows_cap =
//            moe_rows_cap(T, k, E)); contents on return are the intermediates (see
//            MoeExpertsF32Workspace). Needs E <= kMoeAlignMaxExperts.
// Shapes: MoeExpertsShape (moe_grouped_cuda.h); no divisibility constraints on D or I.
struct MoeExpertsF32Weights {
  const float* w1 = nullptr;
  const float* w3 = nullptr;
  const float* w2 = nullptr;
};
size_t moe_experts_f32_workspace_bytes(const MoeExpertsShape& s);

// The carve-up of the workspace (exposed for tests and debugging).
struct MoeExpertsF32Workspace {
  MoeAlignBuffers align;
  float* g = nullptr;  // [rows_cap, I]: W1 x, then h (SwiGLU in place)
  float* u = nullptr;  // [rows_cap, I]: W3 x
  float* y = nullptr;  // [rows_cap, D]: W2 h
};
MoeExpertsF32Workspace moe_experts_f32_workspace(const MoeExpertsShape& s, void* workspace);

void moe_experts_f32_cuda(cudaStream_t stream, const MoeExpertsShape& s, const float* x,
                          const int32_t* ids, const float* weights, const MoeExpertsF32Weights& w,
                          const float* y_shared, void* workspace, float* out);

}  // namespace deepinfer
