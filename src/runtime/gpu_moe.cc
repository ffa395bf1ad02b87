// MoE block on the GPU, mirroring Model::moe_block (src/model/moe_block.cc): router GEMM +
// routing kernel, then (after reading the routing back to the host) rows grouped by expert,
// one fp32 GEMM pair + SwiGLU + down GEMM per used expert, the shared expert over all rows,
// and a combine that sums each row's k expert outputs (in its selection order) plus the
// shared expert's.
#include <algorithm>

#include "cuda/cuda_check.h"
#include "ops/gemm/gemm.h"
#include "ops/moe/moe_cuda.h"
#include "runtime/gpu_model_impl.h"

namespace deepinfer {

void GpuModel::Impl::moe_block(int64_t layer, const float* x_in, float* out) {
  cudaStream_t stream = ctx.stream();
  const GpuLayerW& w = layers[layer];
  const int64_t N = n_rows, D = cfg.hidden_size, E = cfg.n_routed_experts;
  const int64_t k = cfg.n_experts_per_tok, I = cfg.moe_intermediate_size;
  const int64_t Is = I * cfg.n_shared_experts;
  const float limit = static_cast<float>(cfg.swiglu_limit);
  constexpr int64_t kAlign = 64;

  gemm_f32_cuda(ctx, x_in, w.gate, N, E, D, router);
  const RouterParams rp{E, k, static_cast<float>(cfg.routed_scaling_factor)};
  route_cuda(stream, router, N, w.tid2eid != nullptr ? nullptr : w.bias, w.tid2eid, sec(kTokens), rp,
             route_ids, route_w);
  CUDA_CHECK(cudaMemcpyAsync(route_ids_host, route_ids, N * k * sizeof(int32_t),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(route_w_host, route_w, N * k * sizeof(float), cudaMemcpyDeviceToHost,
                             stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));

  // Group the (row, j) slots by expert; each expert's block starts at a multiple of kAlign.
  std::vector<int64_t> count(E, 0), offset(E + 1, 0);
  for (int64_t i = 0; i < N * k; ++i) {
    const int32_t e = route_ids_host[i];
    ICHECK(e >= 0 && e < E) << "routing produced expert " << e;
    ++count[e];
  }
  for (int64_t e = 0; e < E; ++e) offset[e + 1] = offset[e] + (count[e] + kAlign - 1) / kAlign * kAlign;
  const int64_t total = offset[E];
  ICHECK(total <= moe_rows_cap) << "moe: " << total << " rows exceed " << moe_rows_cap;
  int32_t* perm_rows = moe_meta_host;
  int32_t* slot_of = moe_meta_host + moe_rows_cap;
  float* perm_w = reinterpret_cast<float*>(moe_meta_host + moe_rows_cap + N * k);
  std::fill(perm_rows, perm_rows + total, 0);
  std::fill(perm_w, perm_w + total, 0.0f);
  std::vector<int64_t> fill(offset.begin(), offset.end() - 1);
  for (int64_t row = 0; row < N; ++row) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = route_ids_host[row * k + j], at = fill[e]++;
      perm_rows[at] = static_cast<int32_t>(row);
      perm_w[at] = route_w_host[row * k + j];
      slot_of[row * k + j] = static_cast<int32_t>(at);
    }
  }
  int32_t* d_perm_rows = moe_meta;
  int32_t* d_slot_of = moe_meta + moe_rows_cap;
  float* d_perm_w = reinterpret_cast<float*>(moe_meta + moe_rows_cap + N * k);
  CUDA_CHECK(cudaMemcpyAsync(d_perm_rows, perm_rows, total * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(d_slot_of, slot_of, N * k * sizeof(int32_t), cudaMemcpyHostToDevice,
                             stream));
  CUDA_CHECK(cudaMemcpyAsync(d_perm_w, perm_w, total * sizeof(float), cudaMemcpyHostToDevice,
                             stream));

  gather_rows_cuda(stream, x_in, d_perm_rows, total, D, xs);
  for (int64_t e = 0; e < E; ++e) {
    if (count[e] == 0) continue;
    gemm_f32_cuda(ctx, xs + offset[e] * D, w.w1[e], count[e], I, D, eg + offset[e] * I);
    gemm_f32_cuda(ctx, xs + offset[e] * D, w.w3[e], count[e], I, D, ev + offset[e] * I);
  }
  // Padding rows (never read by the down GEMM) go through SwiGLU too; harmless.
  swiglu_cuda(stream, eg, ev, d_perm_w, total, I, limit);
  for (int64_t e = 0; e < E; ++e) {
    if (count[e] == 0) continue;
    gemm_f32_cuda(ctx, eg + offset[e] * I, w.w2[e], count[e], D, I, ys + offset[e] * D);
  }
  gemm_f32_cuda(ctx, x_in, w.sw1, N, Is, D, sg);
  gemm_f32_cuda(ctx, x_in, w.sw3, N, Is, D, sv);
  swiglu_cuda(stream, sg, sv, nullptr, N, Is, limit);
  gemm_f32_cuda(ctx, sg, w.sw2, N, D, Is, ysh);
  moe_combine_cuda(stream, ys, d_slot_of, ysh, N, k, D, out);
}

}  // namespace deepinfer
