#include "runtime/gpu_runner_sizing.h"

#include <algorithm>
#include <cstdio>

#include "base/error.h"
#include "io/config_parser.h"
#include "ops/moe/moe_w4a8.h"
#include "runtime/fp8_weight_quant.h"

namespace deepinfer {
namespace {

constexpr int64_t kF32 = 4;
constexpr int64_t kWorkspaceBytes = int64_t(32) << 20;  // DeviceContext's cuBLASLt workspace
constexpr int64_t kExpertRowAlign = 64;                 // gpu_model.cc pads each expert's rows

// Bytes of one [rows, cols] projection: fp32, or FP8 codes + one fp32 scale per block x block
// (GpuModel's scale grid pads each row of blocks to a multiple of 4: fp8_weight_scale_ld).
int64_t matrix_bytes(int64_t rows, int64_t cols, bool fp8, int64_t block) {
  if (!fp8) return rows * cols * kF32;
  const int64_t kb = (cols + block - 1) / block;
  return rows * cols + ((rows + block - 1) / block) * ((kb + 3) / 4 * 4) * kF32;
}

// One routed expert matrix [rows, cols] in W4A8 (ops/moe/moe_w4a8.h): FP4 codes and one UE8M0
// byte per 32 of K, K padded to the kernel's group.
int64_t w4a8_matrix_bytes(int64_t rows, int64_t cols) {
  return w4a8_code_bytes(rows, cols) + w4a8_scale_bytes(rows, cols);
}

}  // namespace

GpuSizing estimate_gpu_sizing(const ModelConfig& config, int64_t max_context,
                              int64_t max_batch_tokens, bool fp8, bool w4a8_experts) {
  // What each layer owns comes from its plan (io/layer_plan.h), as GpuModel allocates it.
  ModelConfig c = config;
  if (static_cast<int64_t>(c.plan.size()) != c.num_layers) complete_model_config(&c);
  CHECK(max_context > 0 && max_batch_tokens > 0) << "gpu sizing: max_context and max_batch_tokens must be positive";
  const int64_t V = c.vocab_size, D = c.hidden_size, H = c.num_heads, d = c.head_dim, hc = c.hc_mult;
  const int64_t Rq = c.q_lora_rank, G = c.o_groups, Ro = c.o_lora_rank, W = c.sliding_window;
  const int64_t HI = c.index_n_heads, dI = c.index_head_dim, E = c.n_routed_experts;
  const int64_t k = c.n_experts_per_tok, I = c.moe_intermediate_size, Is = I * c.n_shared_experts;
  const int64_t T = max_batch_tokens;
  const int64_t b = fp8_weight_block(c);  // 128 V4, 32 V4.1
  auto matrix_bytes = [b](int64_t rows, int64_t cols, bool f8) { return deepinfer::matrix_bytes(rows, cols, f8, b); };
  GpuSizing s;

  // Weights.
  int64_t w = V * D * kF32 + matrix_bytes(V, D, fp8) + D * kF32;  // embed, head, norm
  const int64_t hc_mix = (2 + hc) * hc;
  if (!c.traits.single_pass_mhc) w += (hc * hc * D + hc + 1) * kF32;  // hc head (V4)
  bool any_indexer = false;
  int64_t min_score_ratio = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerPlan& lp = c.plan[l];
    const int64_t ratio = lp.ratio;
    w += (2 * D + 2 * (hc_mix * hc * D + hc_mix + 3)) * kF32;  // norms, mHC
    w += matrix_bytes(Rq, D, fp8) + matrix_bytes(H * d, Rq, fp8) + matrix_bytes(d, D, fp8) +
         matrix_bytes(G * Ro, H * d / std::max<int64_t>(G, 1), fp8) + matrix_bytes(D, G * Ro, fp8) +
         (Rq + d + H) * kF32;
    // wkv, wgate (ratio > 1), ape (V4), norm.
    auto compressor = [&](int64_t width) {
      const int64_t cw = (ratio == 4 ? 2 : 1) * width;
      return (ratio > 1 ? 2 : 1) * matrix_bytes(cw, D, fp8) +
             ((c.traits.compressor_ape ? ratio * cw : 0) + width) * kF32;
    };
    if (lp.owns_compressor) w += compressor(d);
    if (lp.scores() && HI > 0) {
      any_indexer = true;
      min_score_ratio = min_score_ratio == 0 ? ratio : std::min(min_score_ratio, ratio);
      w += matrix_bytes(HI * dI, Rq, fp8) + HI * D * kF32;
    }
    if (lp.owns_index_keys && HI > 0) {  // V4: its own compressor; V4.1: wk and k_norm
      w += lp.own_index_compressor ? compressor(dI) : matrix_bytes(dI, d, fp8) + dI * kF32;
    }
    w += (E * D + E) * kF32;  // router gate, bias
    if (!c.hash_layers.empty() && c.is_hash_layer(l)) w += V * k * 4;
    w += E * (w4a8_experts ? 2 * w4a8_matrix_bytes(I, D) + w4a8_matrix_bytes(D, I)
                           : 2 * matrix_bytes(I, D, fp8) + matrix_bytes(D, I, fp8));
    w += 2 * matrix_bytes(Is, D, fp8) + matrix_bytes(D, Is, fp8);
  }
  s.weight_bytes = w;

  // Activations (gpu_model.cc's constructor).
  const int64_t moe_rows = T * k + E * kExpertRowAlign;
  int64_t a = T * (4 * hc * D + 4 * D + 2 * hc + hc * hc + Rq + 2 * H * d + d + H * d / std::max<int64_t>(G, 1) +
                   Ro + G * Ro + 4 * std::max(d, dI) + E + 2 * k + 2 * Is + hc + V);
  a += moe_rows * (2 * D + 2 * I) + 2 * moe_rows + T * k;
  a += T * hc_mix * 4;  // mHC mix scratch (generous)
  if (any_indexer) {  // queries, head weights, scores, top-k per scoring layer
    a += T * (HI * dI + HI + max_context / min_score_ratio);
    for (const LayerPlan& lp : c.plan) a += lp.scores() ? T * (c.index_topk + 1) : 0;
  }
  a += T * 16;  // row metadata sections
  s.activation_bytes = a * kF32 + kWorkspaceBytes;

  // Per-sequence state pools.
  int64_t st = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerPlan& lp = c.plan[l];
    const int64_t ratio = lp.ratio;
    st += W * d;
    if (lp.owns_compressor) {
      const int64_t cw = (ratio == 4 ? 2 : 1) * d;
      st += 2 * (2 * ratio * cw) + (max_context / ratio) * d;
    }
    if (lp.owns_index_keys && HI > 0) {
      if (lp.own_index_compressor) st += 2 * (2 * ratio * 2 * dI);
      st += (max_context / ratio) * dI;
    }
  }
  s.state_bytes_per_sequence = st * kF32;
  return s;
}

int64_t gpu_sequences_that_fit(const GpuSizing& s, int64_t free_bytes, int64_t total_bytes,
                               double utilization, int64_t max_sequences) {
  CHECK(utilization > 0.0 && utilization <= 1.0) << "gpu_memory_utilization must be in (0, 1], got "
                                                << utilization;
  const int64_t used_by_others = std::max<int64_t>(0, total_bytes - free_bytes);
  const int64_t budget = int64_t(double(total_bytes) * utilization) - used_by_others;
  // 2% of the estimate held back for allocator rounding and what the estimate misses.
  const int64_t fixed = s.weight_bytes + s.activation_bytes;
  const int64_t left = budget - fixed - fixed / 50;
  if (left <= 0) return 0;
  if (s.state_bytes_per_sequence <= 0) return max_sequences;
  return std::min(max_sequences, left / s.state_bytes_per_sequence);
}

std::string gpu_sizing_summary(const GpuSizing& s) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "weights %.2f GiB, activations %.2f GiB, %.1f MiB state per sequence",
                double(s.weight_bytes) / double(1 << 30), double(s.activation_bytes) / double(1 << 30),
                double(s.state_bytes_per_sequence) / double(1 << 20));
  return buf;
}

}  // namespace deepinfer
