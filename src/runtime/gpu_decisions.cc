// GpuModel::force_decisions / record_decisions (gpu_model.h) and the two points of the forward
// where discrete choices are made: the routing of MoE layers (Impl::route, from gpu_moe.cc) and
// the indexer top-k (Impl::indexer_choices, from gpu_attention.cc).
#include <algorithm>
#include <utility>
#include <vector>

#include "cuda/cuda_check.h"
#include "ops/moe/moe_cuda.h"
#include "runtime/forced_decisions.h"
#include "runtime/gpu_model_impl.h"

namespace deepinfer {

void GpuModel::force_decisions(const DecisionTrace* trace) {
  Impl& m = *impl_;
  if (trace == nullptr) {
    m.forcing = false;
    return;
  }
  const ModelConfig& cfg = m.cfg;
  const int64_t L = cfg.num_layers, P = m.opt.max_context;
  CHECK(trace->top_k == cfg.n_experts_per_tok && trace->index_topk == cfg.index_topk &&
        static_cast<int64_t>(trace->experts.size()) == L &&
        static_cast<int64_t>(trace->picks.size()) == L)
      << "force_decisions: a trace of top_k " << trace->top_k << ", index_topk "
      << trace->index_topk << " over " << trace->experts.size() << " layers for a model of "
      << cfg.n_experts_per_tok << ", " << cfg.index_topk << ", " << L;
  const int64_t k = cfg.n_experts_per_tok, ki = cfg.index_topk;
  if (m.forced_mem == nullptr) {
    int64_t ints = 0;
    for (int64_t l = 0; l < L; ++l) {
      ints += !cfg.is_hash_layer(l) ? P * k : 0;
      ints += m.layers[l].has_indexer ? P * ki : 0;
    }
    m.forced_mem = static_cast<int32_t*>(m.raw_alloc(std::max<int64_t>(ints, 1) * 4));
    m.forced_experts.assign(L, nullptr);
    m.forced_picks.assign(L, nullptr);
    int32_t* at = m.forced_mem;
    for (int64_t l = 0; l < L; ++l) {
      if (!cfg.is_hash_layer(l)) m.forced_experts[l] = std::exchange(at, at + P * k);
      if (m.layers[l].has_indexer) m.forced_picks[l] = std::exchange(at, at + P * ki);
    }
  }
  // Host copy per table: the trace's rows, then -1 up to max_context.
  auto upload = [&](int32_t* dst, const std::vector<int32_t>& rows, int64_t width,
                    const char* what, int64_t layer) {
    if (dst == nullptr) return;
    CHECK(rows.empty() || static_cast<int64_t>(rows.size()) == trace->max_positions * width)
        << "force_decisions: layer " << layer << " " << what << " has " << rows.size()
        << " entries, not " << trace->max_positions << " x " << width;
    std::vector<int32_t> host(P * width, -1);
    std::copy_n(rows.begin(), std::min<int64_t>(rows.size(), P * width), host.begin());
    CUDA_CHECK(cudaMemcpy(dst, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  };
  CUDA_CHECK(cudaStreamSynchronize(m.ctx.stream()));
  for (int64_t l = 0; l < L; ++l) {
    upload(m.forced_experts[l], trace->experts[l], k, "experts", l);
    upload(m.forced_picks[l], trace->picks[l], ki, "picks", l);
  }
  m.forcing = true;
}

void GpuModel::record_decisions(DecisionTrace* trace) {
  Impl& m = *impl_;
  if (trace != nullptr) {
    CHECK(trace->top_k == m.cfg.n_experts_per_tok && trace->index_topk == m.cfg.index_topk &&
          static_cast<int64_t>(trace->experts.size()) == m.cfg.num_layers &&
          static_cast<int64_t>(trace->picks.size()) == m.cfg.num_layers)
        << "record_decisions: the trace was made for another model";
  }
  m.recording = trace;
}

void GpuModel::Impl::route(int64_t layer) {
  const GpuLayerW& w = layers[layer];
  const int64_t k = cfg.n_experts_per_tok;
  const float scale = static_cast<float>(cfg.routed_scaling_factor);
  const bool replay = forcing && forced_experts[layer] != nullptr;
  if (replay) {
    replay_routes_cuda(ctx.stream(), forced_experts[layer], sec(kPositions), n_rows, router,
                       cfg.n_routed_experts, k, scale, route_ids, route_w);
  } else {
    route_cuda(ctx.stream(), router, n_rows, w.tid2eid != nullptr ? nullptr : w.bias, w.tid2eid,
               sec(kTokens), router_params(), route_ids, route_w);
  }
  if (recording != nullptr && w.tid2eid == nullptr) record_rows(layer, route_ids, k, true);
}

void GpuModel::Impl::indexer_choices(int64_t layer) {
  if (forcing && forced_picks[layer] != nullptr) {
    replay_picks_cuda(ctx.stream(), forced_picks[layer], sec(kPositions), n_rows, cfg.index_topk,
                      sel, n_sel);
  }
  if (recording != nullptr) record_rows(layer, sel, cfg.index_topk, false);
}

// Copies the real rows' choices [rows, width] of `layer` to the trace at their positions
// (synchronises: test instrumentation). Indexer rows: the first n_sel entries, then -1.
void GpuModel::Impl::record_rows(int64_t layer, const int32_t* rows_dev, int64_t width, bool experts) {
  cudaStream_t stream = ctx.stream();
  int32_t n_real = 0;
  CUDA_CHECK(cudaMemcpyAsync(&n_real, counts() + kRealRows, 4, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<int32_t> pos(n_real), vals(n_real * width), n(n_real, static_cast<int32_t>(width));
  CUDA_CHECK(cudaMemcpy(pos.data(), sec(kPositions), n_real * 4, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(vals.data(), rows_dev, vals.size() * 4, cudaMemcpyDeviceToHost));
  if (!experts) CUDA_CHECK(cudaMemcpy(n.data(), n_sel, n_real * 4, cudaMemcpyDeviceToHost));
  for (int64_t r = 0; r < n_real; ++r) {
    CHECK(pos[r] < recording->max_positions)
        << "record_decisions: position " << pos[r] << " past the trace's " << recording->max_positions;
    int32_t* at = experts ? recording->experts_at(layer, pos[r]) : recording->picks_at(layer, pos[r]);
    if (at == nullptr) continue;
    for (int64_t j = 0; j < width; ++j) at[j] = j < n[r] ? vals[r * width + j] : -1;
  }
}

}  // namespace deepinfer
