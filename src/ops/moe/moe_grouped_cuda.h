// Routed experts of one MoE layer on the GPU without host synchronisation (MODEL_SPEC §A.8):
// routing ids -> per-expert row blocks (moe_align_cuda) -> grouped FP8 GEMMs over all experts
// in one launch each (grouped_gemm_fp8_cuda) -> clamped SwiGLU x routing weight -> grouped
// down GEMM -> combine in slot order. moe_experts_fp8_cuda chains them.
//
// Every entry takes device pointers, runs on `stream`, never allocates and never
// synchronises, so a layer is CUDA-graph capturable for a fixed T. Buffers are sized for the
// worst case from T alone (moe_rows_cap); the data-dependent sizes (rows per expert, tile
// count) live only on the device.
//
// Determinism: rows of one expert are ordered by slot index s = token * top_k + j (not by
// arrival order of atomics); every output element has a fixed K order; the combine sums a
// token's k slots in j order. A token's output therefore does not depend on the other tokens
// of the batch (bitwise), which batch-invariant mode needs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer {

// Rows of one GEMM tile; every expert's block of rows starts at a multiple of it.
constexpr int64_t kMoeRowTile = 64;

// Worst-case padded rows for T tokens with top_k slots each over n_experts:
// T*k + min(E, T*k) * (kMoeRowTile - 1) (each used expert pads fewer than a tile). Tiles:
// floor(moe_rows_cap / kMoeRowTile) (the padded total is a tile multiple <= the cap).
int64_t moe_rows_cap(int64_t n_tokens, int64_t top_k, int64_t n_experts);
int64_t moe_tiles_cap(int64_t n_tokens, int64_t top_k, int64_t n_experts);

// ---- 1. alignment ----
//
// ids [T, k] int32 in [0, E) (route_cuda's output). An id outside [0, E) gets no row: its
// slot_row is -1 and the combine adds nothing for it. Outputs (caller-allocated):
//   counts     [E]           rows routed to expert e
//   offsets    [E + 1]       exclusive prefix of round_up(counts, kMoeRowTile);
//                            offsets[E] = the padded total
//   row_slot   [rows_cap]    slot s = t*k + j of padded row r, or -1 for a padding row
//                            (rows >= offsets[E] are not written)
//   slot_row   [T * k]       inverse: padded row of slot s (-1 for an out-of-range id)
//   tile_expert[tiles_cap]   expert of tile i, or -1 for i >= offsets[E] / kMoeRowTile
//   tile_row0  [tiles_cap]   first padded row of tile i (written for live tiles only)
// Row order inside an expert: ascending slot s. One CTA; T*k is walked in order.
struct MoeAlignBuffers {
  int32_t* counts = nullptr;
  int32_t* offsets = nullptr;
  int32_t* row_slot = nullptr;
  int32_t* slot_row = nullptr;
  int32_t* tile_expert = nullptr;
  int32_t* tile_row0 = nullptr;
};
constexpr int64_t kMoeAlignMaxExperts = 4096;
void moe_align_cuda(cudaStream_t stream, const int32_t* ids, int64_t n_tokens, int64_t top_k,
                    int64_t n_experts, const MoeAlignBuffers& out);

// ---- 2. grouped FP8 GEMM ----
//
// For every live tile i (tile_expert[i] = e >= 0) and rows r in [tile_row0[i], +kMoeRowTile):
//   c[r, n] = sum_kb (sum_{k in kb} A[r, k] * W_e[n, k]) * sa[kb, arow(r)] * sw_e[n/128, kb]
// (fp32 MMA accumulation inside a 128-wide K block, then scaled and added to an fp32
// accumulator; K blocks in ascending order), n < N. Rows outside live tiles are not written.
//   A:  e4m3 codes. With a_rows == nullptr, row r of A is a + r * K and sa is block-major
//       [ceil(K/128), sa_ld] indexed by r (act_quant_cuda kBlockMajor with m = sa_ld).
//       With a_rows, arow(r) = a_rows[r] / a_rows_div (a_rows[r] < 0: the row is zero, e.g.
//       a padding row; then c[r, :] = 0) — used to read tokens in place through row_slot.
//   W:  e4m3 [E, N, K] contiguous (expert e at w + e*N*K), scales fp32 [E, ceil(N/128), ld]
//       with ld = fp8_weight_scale_ld(K) (ops/gemm/gemm.h; expert e at sw + e*ceil(N/128)*ld).
//   c:  fp32 [rows, ldc] row-major.
// Needs K % 16 == 0, 16-byte aligned a and w, N >= 1. Grid: n_tiles_cap x ceil(N/64) CTAs
// (x 2 with w_b); CTAs of dead tiles exit at once.
struct GroupedGemmFp8Params {
  const uint8_t* a = nullptr;
  const float* sa = nullptr;
  int64_t sa_ld = 0;
  const int32_t* a_rows = nullptr;
  int32_t a_rows_div = 1;
  const uint8_t* w = nullptr;
  const float* sw = nullptr;
  float* c = nullptr;
  int64_t ldc = 0;
  int64_t n = 0, k = 0;
  const int32_t* tile_expert = nullptr;
  const int32_t* tile_row0 = nullptr;
  int64_t n_tiles_cap = 0;
  // Optional second weight of the same shape sharing A (W3 beside W1): when w_b is set, the
  // same product is also computed with (w_b, sw_b) into c_b, in the same launch.
  const uint8_t* w_b = nullptr;
  const float* sw_b = nullptr;
  float* c_b = nullptr;
};
void grouped_gemm_fp8_cuda(cudaStream_t stream, const GroupedGemmFp8Params& p);

// ---- 3. SwiGLU + quantisation, combine ----
//
// For padded rows r < offsets[E] with s = row_slot[r] >= 0:
//   h[r, j] = silu(min(g[r, j], limit)) * clamp(u[r, j], -limit, limit) * weights[s]
// (limit <= 0: no clamp), then quantised per 1x128 block like act_quant (MODEL_SPEC §B.4)
// into hq [rows_cap, I] e4m3 and sh [ceil(I/128), rows_cap] (block-major, row stride
// rows_cap). Padding rows get zero codes and scale 1. g, u fp32 with row stride ldg.
void moe_swiglu_quant_cuda(cudaStream_t stream, const float* g, const float* u, int64_t ldg,
                           const float* weights, const int32_t* row_slot, const int32_t* offsets,
                           int64_t n_experts, int64_t rows_cap, int64_t inter, float limit,
                           uint8_t* hq, float* sh);

// out[t, d] = sum_{j < k} y[slot_row[t*k + j], d] (j ascending, fp32; a slot with
// slot_row < 0 adds nothing) + y_shared[t, d] (if non-null), t < T, d < D. One thread per
// element; y [rows, D] row-major. Shared by the FP8 and the fp32 (moe_grouped_f32_cuda.h)
// layers.
void moe_combine_slots_cuda(cudaStream_t stream, const float* y, const int32_t* slot_row,
                            const float* y_shared, int64_t n_tokens, int64_t top_k, int64_t dim,
                            float* out);

// ---- 4. the layer ----
//
// out[t, :] = sum_{j < k} y[slot_row[t*k + j], :]  (j ascending) + y_shared[t, :], where y is
// the expert output of slot (t, j): W2_e · h, h = SwiGLU(W1_e x_t, W3_e x_t) * weight[t, j]
// (FP8 GEMMs as above; x_t quantised per 1x128 block like act_quant; h is quantised from
// fp32: the official kernel casts h to bf16 before its FP8 quantisation, we do not).
// y_shared [T, D] (the shared expert's output) may be null.
//   x        fp32 [T, D] (D % 16 == 0), device
//   ids      int32 [T, k], weights fp32 [T, k] (route_cuda's outputs)
//   w1, w3   e4m3 [E, I, D] with scales fp32 [E, ceil(I/128), fp8_weight_scale_ld(D)]
//   w2       e4m3 [E, D, I] with scales fp32 [E, ceil(D/128), fp8_weight_scale_ld(I)]
//            (I % 16 == 0; all weight pointers 16-byte aligned)
//   out      fp32 [T, D]: every element written (T == 0: nothing to do)
//   workspace: moe_experts_fp8_workspace_bytes(s) bytes, 256-byte aligned (about
//            rows_cap * (9 I + 4 D + 4 ceil(I/128)) + T * (D + 4 ceil(D/128) + 4 k) + 4 E);
//            contents on return are the intermediates (see MoeExpertsWorkspace).
struct MoeExpertsFp8Weights {
  const uint8_t* w1 = nullptr;
  const float* s1 = nullptr;
  const uint8_t* w3 = nullptr;
  const float* s3 = nullptr;
  const uint8_t* w2 = nullptr;
  const float* s2 = nullptr;
};
struct MoeExpertsShape {
  int64_t n_tokens = 0, top_k = 0, n_experts = 0, dim = 0, inter = 0;
  float swiglu_limit = 0.0f;
};
size_t moe_experts_fp8_workspace_bytes(const MoeExpertsShape& s);

// The carve-up of the workspace (exposed for tests and debugging).
struct MoeExpertsWorkspace {
  MoeAlignBuffers align;
  uint8_t* xq = nullptr;   // [T, D]
  float* sx = nullptr;     // [ceil(D/128), T]
  float* g = nullptr;      // [rows_cap, I]
  float* u = nullptr;      // [rows_cap, I]
  uint8_t* hq = nullptr;   // [rows_cap, I]
  float* sh = nullptr;     // [ceil(I/128), rows_cap]
  float* y = nullptr;      // [rows_cap, D]
};
MoeExpertsWorkspace moe_experts_fp8_workspace(const MoeExpertsShape& s, void* workspace);

void moe_experts_fp8_cuda(cudaStream_t stream, const MoeExpertsShape& s, const float* x,
                          const int32_t* ids, const float* weights, const MoeExpertsFp8Weights& w,
                          const float* y_shared, void* workspace, float* out);

}  // namespace deepinfer
