// MoE block on the GPU, mirroring Model::moe_block (src/model/moe_block.cc): router GEMM
// (fp32) + routing kernel, the shared expert over all rows, the routed experts, and a combine
// that sums each row's k expert outputs (in its selection order) plus the shared expert's.
//
// Routed experts, two implementations (GpuModelOptions::moe_impl):
//  * kGrouped (the default, both formats): moe_experts_fp8_cuda (kFp8) or
//    moe_experts_f32_cuda (kF32) over the stacked expert weights, or moe_experts_w4a8_cuda
//    (expert_format kW4a8, either weight format: FP4 stacks, activation blocks of
//    w4a8_act_block), no host sync; the shared expert's output goes in as its y_shared. Rows
//    at or past the forward's count of real rows (counts()[kRealRows], padding rows of a
//    graph bucket) get expert id -1: no expert row, no GEMM work, output = the shared
//    expert's only. kW4a8 runs over consecutive pieces of at most w4a8_rows rows (the
//    kernel's kW4a8MaxTokens; a decode bucket is one piece): every launch size comes from
//    n_rows, so graph capture holds, and a token's output never depends on the other rows.
//  * kPerExpert (plain path, the oracle, for tests): after reading the routing back to the
//    host (one stream synchronisation per MoE layer), rows grouped by expert and per used
//    expert the w1 / w3 GEMMs + SwiGLU + the w2 GEMM.
//    FP8: the grouped rows are quantised once (row-major scales, regrouped into per-expert
//    block-major segments by segment_scales) and each expert runs over M_e rows: the count
//    when it is below 4 or batch_invariant (SIMT kernel), else the count rounded up to 4
//    (cuBLASLt; padding rows carry weight 0 and are never combined).
#include <algorithm>

#include "cuda/cuda_check.h"
#include "ops/gemm/gemm.h"
#include "ops/moe/moe_cuda.h"
#include "ops/moe/moe_grouped_cuda.h"
#include "ops/moe/moe_grouped_f32_cuda.h"
#include "ops/quant/act_quant.h"
#include "runtime/gpu_kernels.h"
#include "runtime/gpu_model_impl.h"
#include "runtime/moe_rows.h"

namespace deepinfer {

MoeExpertsShape GpuModel::Impl::moe_shape(int64_t n_tokens) const {
  MoeExpertsShape s;
  s.n_tokens = n_tokens;
  s.top_k = cfg.n_experts_per_tok;
  s.n_experts = cfg.n_routed_experts;
  s.dim = cfg.hidden_size;
  s.inter = cfg.moe_intermediate_size;
  s.swiglu_limit = static_cast<float>(cfg.swiglu_limit);
  return s;
}

RouterParams GpuModel::Impl::router_params() const {
  RouterParams p;
  p.n_experts = cfg.n_routed_experts;
  p.top_k = cfg.n_experts_per_tok;
  p.routed_scale = static_cast<float>(cfg.routed_scaling_factor);
  p.inv_temp = static_cast<float>(1.0 / cfg.gate_temp);
  p.sum_eps = static_cast<float>(cfg.traits.route_norm_eps);
  p.normalize = cfg.traits.route_normalize_always || (cfg.norm_topk_prob && p.top_k > 1);
  return p;
}

void GpuModel::Impl::moe_block(int64_t layer, const float* x_in, float* out) {
  cudaStream_t stream = ctx.stream();
  const GpuLayerW& w = layers[layer];
  const int64_t N = n_rows, D = cfg.hidden_size;
  const int64_t k = cfg.n_experts_per_tok, I = cfg.moe_intermediate_size;
  const int64_t Is = I * cfg.n_shared_experts;
  const float limit = static_cast<float>(cfg.swiglu_limit);

  lin(w.gate, x_in, N, router, a_gen);  // fp32
  route(layer);  // route_cuda (or, in tests, replayed / recorded: gpu_decisions.cc)
  if (!grouped_moe) moe_experts_per_expert(layer, x_in);  // fills ys (needs the host routing)
  if (fp8()) act_quantize(ctx, x_in, N, D, a_in);
  lin_in(w.sw1, x_in, a_in, N, sg);
  lin_in(w.sw3, x_in, a_in, N, sv);
  swiglu_cuda(stream, sg, sv, nullptr, N, Is, limit);
  lin(w.sw2, sg, N, ysh, a_gen);
  if (grouped_moe) {
    moe_experts_grouped(layer, x_in, out);
  } else {
    moe_combine_cuda(stream, ys, moe_meta + moe_rows_cap, ysh, N, k, D, out);
  }
}

void GpuModel::Impl::moe_experts_grouped(int64_t layer, const float* x_in, float* out) {
  cudaStream_t stream = ctx.stream();
  const int64_t N = n_rows, E = cfg.n_routed_experts, k = cfg.n_experts_per_tok;
  mask_padding_slots_cuda(stream, route_ids, N, k, counts() + kRealRows);
  if (w4a8()) {
    const int64_t D = cfg.hidden_size;
    const GpuLayerW& w = layers[layer];
    for (int64_t r0 = 0, piece = 0; r0 < N; r0 += w4a8_rows, ++piece) {
      const MoeExpertsShape shape = moe_shape(std::min(w4a8_rows, N - r0));
      moe_experts_w4a8_cuda(stream, shape, w4a8_act_block, x_in + r0 * D, route_ids + r0 * k,
                            route_w + r0 * k, w.experts_w4a8, ysh + r0 * D, moe_ws, out + r0 * D);
      const int32_t* counts_e = moe_experts_w4a8_workspace(shape, w4a8_act_block, moe_ws).align.counts;
      CUDA_CHECK(cudaMemcpyAsync(expert_counts + (layer * expert_count_pieces + piece) * E, counts_e,
                                 E * sizeof(int32_t), cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  const MoeExpertsShape shape = moe_shape(N);
  const int32_t* counts_e = nullptr;  // rows per expert, in the workspace
  if (fp8()) {
    moe_experts_fp8_cuda(stream, shape, x_in, route_ids, route_w, layers[layer].experts, ysh,
                         moe_ws, out);
    counts_e = moe_experts_fp8_workspace(shape, moe_ws).align.counts;
  } else {
    moe_experts_f32_cuda(stream, shape, x_in, route_ids, route_w, layers[layer].experts_f32, ysh,
                         moe_ws, out);
    counts_e = moe_experts_f32_workspace(shape, moe_ws).align.counts;
  }
  CUDA_CHECK(cudaMemcpyAsync(expert_counts + layer * expert_count_pieces * E, counts_e,
                             E * sizeof(int32_t), cudaMemcpyDeviceToDevice, stream));
}

void GpuModel::Impl::finish_expert_work() {
  if (!expert_work_pending) return;
  expert_work_pending = false;
  const int64_t L = cfg.num_layers, E = cfg.n_routed_experts, P = expert_count_pieces;
  // Pieces the last forward ran (kW4a8; the counts of later pieces are stale).
  const int64_t used = w4a8() ? ceil_div64(n_rows, w4a8_rows) : 1;
  CUDA_CHECK(cudaMemcpyAsync(expert_counts_host, expert_counts, L * P * E * sizeof(int32_t),
                             cudaMemcpyDeviceToHost, ctx.stream()));
  CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t e = 0; e < E; ++e) {
      bool any = false;
      for (int64_t p = 0; p < used; ++p) any = any || expert_counts_host[(l * P + p) * E + e] != 0;
      if (!any) continue;
      ++work.experts_used;
      work.weight_bytes += layers[l].expert_bytes_each;
    }
  }
}

// Routed experts through per-expert GEMMs into ys (slot_of in moe_meta); the combine runs in
// moe_block.
void GpuModel::Impl::moe_experts_per_expert(int64_t layer, const float* x_in) {
  cudaStream_t stream = ctx.stream();
  const GpuLayerW& w = layers[layer];
  const int64_t N = n_rows, D = cfg.hidden_size, E = cfg.n_routed_experts;
  const int64_t k = cfg.n_experts_per_tok, I = cfg.moe_intermediate_size;
  const float limit = static_cast<float>(cfg.swiglu_limit);
  constexpr int64_t kAlign = 64;

  CUDA_CHECK(cudaMemcpyAsync(route_ids_host, route_ids, N * k * sizeof(int32_t),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(route_w_host, route_w, N * k * sizeof(float), cudaMemcpyDeviceToHost,
                             stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));

  // Group the (row, j) slots by expert; each expert's block starts at a multiple of kAlign.
  std::vector<int64_t> count(E, 0), offset(E + 1, 0), m_e(E, 0);
  for (int64_t i = 0; i < N * k; ++i) {
    const int32_t e = route_ids_host[i];
    ICHECK(e >= 0 && e < E) << "routing produced expert " << e;
    ++count[e];
  }
  for (int64_t e = 0; e < E; ++e) {
    offset[e + 1] = offset[e] + (count[e] + kAlign - 1) / kAlign * kAlign;
    m_e[e] = (!fp8() || opt.batch_invariant || count[e] < 4) ? count[e] : (count[e] + 3) / 4 * 4;
  }
  const int64_t total = offset[E];
  ICHECK(total <= moe_rows_cap) << "moe: " << total << " rows exceed " << moe_rows_cap;
  int32_t* perm_rows = moe_meta_host;
  int32_t* slot_of = perm_rows + moe_rows_cap;
  float* perm_w = reinterpret_cast<float*>(slot_of + N * k);
  int32_t* seg_row0 = reinterpret_cast<int32_t*>(perm_w + moe_rows_cap);
  int32_t* seg_m = seg_row0 + moe_rows_cap;
  std::fill(perm_rows, perm_rows + total, 0);
  std::fill(perm_w, perm_w + total, 0.0f);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t r = offset[e]; r < offset[e + 1]; ++r) {
      seg_row0[r] = static_cast<int32_t>(offset[e]);
      seg_m[r] = r - offset[e] < m_e[e] ? static_cast<int32_t>(m_e[e]) : 0;
    }
  }
  std::vector<int64_t> fill(offset.begin(), offset.end() - 1);
  for (int64_t row = 0; row < N; ++row) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = route_ids_host[row * k + j], at = fill[e]++;
      perm_rows[at] = static_cast<int32_t>(row);
      perm_w[at] = route_w_host[row * k + j];
      slot_of[row * k + j] = static_cast<int32_t>(at);
    }
  }
  // One copy of the whole metadata block (the parts past N*k / total are stale and unread).
  CUDA_CHECK(cudaMemcpyAsync(moe_meta, moe_meta_host, (4 * moe_rows_cap + N * k) * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream));
  const int32_t* d_perm_rows = moe_meta;
  const int32_t* d_slot_of = moe_meta + moe_rows_cap;
  const float* d_perm_w = reinterpret_cast<const float*>(d_slot_of + N * k);
  const int32_t* d_row0 = reinterpret_cast<const int32_t*>(d_perm_w + moe_rows_cap);
  const int32_t* d_m = d_row0 + moe_rows_cap;

  gather_rows_cuda(stream, x_in, d_perm_rows, total, D, xs);
  const int64_t kb_d = ceil_div64(D, kFp8GemmBlock), kb_i = ceil_div64(I, kFp8GemmBlock);
  if (fp8()) {
    act_quant_cuda(stream, xs, DType::F32, total, D, kFp8GemmBlock, moe_q, moe_s_rm,
                   ScaleLayout::kRowMajor);
    segment_scales(stream, moe_s_rm, total, kb_d, d_row0, d_m, moe_s_seg);
  }
  for (int64_t e = 0; e < E; ++e) {
    if (count[e] == 0) continue;
    ++work.experts_used;
    work.weight_bytes += w.w1[e].bytes() + w.w3[e].bytes() + w.w2[e].bytes();
    work.gemm_flops += 2.0 * count[e] * 3.0 * I * D;
    float* g_out = eg + offset[e] * I;
    float* v_out = ev + offset[e] * I;
    if (fp8()) {
      const ActScratch xe{moe_q + offset[e] * D, moe_s_seg + offset[e] * kb_d};
      linear_run_quantized(ctx, w.w1[e], xe, m_e[e], g_out, opt.batch_invariant);
      linear_run_quantized(ctx, w.w3[e], xe, m_e[e], v_out, opt.batch_invariant);
    } else {
      linear_run(ctx, w.w1[e], xs + offset[e] * D, m_e[e], g_out, {}, opt.batch_invariant);
      linear_run(ctx, w.w3[e], xs + offset[e] * D, m_e[e], v_out, {}, opt.batch_invariant);
    }
  }
  // Padding rows (never combined) go through SwiGLU too; harmless (weight 0, finite inputs).
  swiglu_cuda(stream, eg, ev, d_perm_w, total, I, limit);
  if (fp8()) {
    act_quant_cuda(stream, eg, DType::F32, total, I, kFp8GemmBlock, moe_q, moe_s_rm,
                   ScaleLayout::kRowMajor);
    segment_scales(stream, moe_s_rm, total, kb_i, d_row0, d_m, moe_s_seg);
  }
  for (int64_t e = 0; e < E; ++e) {
    if (count[e] == 0) continue;
    float* y_out = ys + offset[e] * D;
    if (fp8()) {
      const ActScratch ge{moe_q + offset[e] * I, moe_s_seg + offset[e] * kb_i};
      linear_run_quantized(ctx, w.w2[e], ge, m_e[e], y_out, opt.batch_invariant);
    } else {
      linear_run(ctx, w.w2[e], eg + offset[e] * I, m_e[e], y_out, {}, opt.batch_invariant);
    }
  }
}

}  // namespace deepinfer
