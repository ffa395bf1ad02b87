// The DSpark drafter (MODEL_SPEC §D), CPU reference, of V4.1 and of V4-Flash-DSpark / 0731; what
// differs between the two is in the config's traits (ModelTraits: single_pass_mhc,
// per_head_q_norm, window rounding, routing, dspark_taps_block_output, dspark_hc_head) and
// DsparkConfig (stage count, experts), never the model type.
//  * Taps (record_dspark_taps, §D.1): per target layer, the mean over the hc streams of the streams
//    entering the layer (V4.1) or after the block (V4-DSpark).
//  * Context (every forward, every row): m_p = RMSNorm_main_norm(main_proj . concat of the taps),
//    and per stage k its context K=V  RoPE_p(kv_norm_k(wkv_k . m_p)) (official numerics: the
//    family's window rounding) in the state's ring, slot p mod n_draft_slots.
//  * Draft after committed positions 0..p and the target's token y for p+1: the block
//    [y, noise x (block-1)] at positions p+1.., embedded into the hc streams, runs through the
//    stages (the family's blocks: V4.1 single-pass mHC with pre_mix threading through the
//    stages, V4 each site with its own pre; the attention reads the stage's context keys of
//    positions max(0, p-W+1)..p and every block key, bidirectionally, with the sink), then the
//    collapse h_i (V4.1: the last site's pre; V4: the last stage's hc_head), the shared LM head
//    on the last stage's norm, and the Markov head sequentially (tok_0 = y; logits_i +=
//    W2 . W1[tok_i]; tok_{i+1} = argmax) with the confidence c_i = w_c . [h_i ; W1[tok_i]].
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/block_parts.h"
#include "model/kv_rounding.h"
#include "model/model_batch.h"
#include "ops/attention/sparse_attention.h"
#include "ops/mhc/mhc.h"
#include "ops/rms_norm/rms_norm.h"

namespace deepinfer {

void record_dspark_taps(const ModelConfig& cfg, int64_t layer, bool after_block, const float* X,
                        int64_t n_rows, float* taps) {
  if (after_block != cfg.traits.dspark_taps_block_output) return;
  const std::vector<int64_t>& layers = cfg.dspark.target_layer_ids;
  const int64_t n_taps = static_cast<int64_t>(layers.size()), D = cfg.hidden_size, hc = cfg.hc_mult;
  for (int64_t t = 0; t < n_taps; ++t) {
    if (layers[t] != layer) continue;
    for (int64_t r = 0; r < n_rows; ++r) {
      float* f = &taps[(r * n_taps + t) * D];
      for (int64_t i = 0; i < D; ++i) {
        float sum = 0.0f;
        for (int64_t j = 0; j < hc; ++j) sum += X[(r * hc + j) * D + i];
        f[i] = sum / static_cast<float>(hc);
      }
    }
  }
}

void Model::write_draft_context(const Batch& batch, const float* taps) const {
  const ModelConfig& cfg = config_;
  const DsparkWeights& w = weights_.dspark;
  const int64_t N = batch.n_rows(), D = cfg.hidden_size, d = cfg.head_dim, r = cfg.rope_dim;
  const int64_t n_taps = static_cast<int64_t>(cfg.dspark.target_layer_ids.size());
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const bool official = options_.numerics == Numerics::kOfficial;
  std::vector<float> m(N * D), kv(N * d);
  linear_ref(taps, N, n_taps * D, w.main_proj.f32(), D, m.data(), gemm_mode_);
  rms_norm_ref(m.data(), w.main_norm.f32(), N, D, D, eps, m.data());
  for (size_t k = 0; k < w.stages.size(); ++k) {
    const AttentionWeights& a = w.stages[k].attn;
    linear_ref(m.data(), N, D, a.wkv.f32(), d, kv.data(), gemm_mode_);
    rms_norm_ref(kv.data(), a.kv_norm.f32(), N, d, d, eps, kv.data());
    for (int64_t row = 0; row < N; ++row) {
      const int64_t pos = batch.positions[row];
      rope_main_.apply(&kv[row * d + d - r], pos);
      if (official) round_window_entry(cfg.traits, &kv[row * d], d, r);
      SequenceState* st = batch.segments[batch.segment_of_row[row]].state;
      std::memcpy(&st->draft_rings[k][(pos % st->n_draft_slots) * d], &kv[row * d], d * sizeof(float));
    }
  }
}

DraftBlock Model::draft_dspark(const SequenceState& state, int32_t next, int64_t n_drafts) const {
  const ModelConfig& cfg = config_;
  CHECK(n_drafts <= cfg.dspark.block_size)
      << "draft: " << n_drafts << " drafts asked for, but the DSpark block has " << cfg.dspark.block_size;
  CHECK(static_cast<int64_t>(state.draft_rings.size()) == static_cast<int64_t>(weights_.dspark.stages.size()))
      << "draft: sequence state belongs to another model";
  const DsparkWeights& w = weights_.dspark;
  const int64_t B = cfg.dspark.block_size, D = cfg.hidden_size, hc = cfg.hc_mult;
  const int64_t H = cfg.num_heads, d = cfg.head_dim, r = cfg.rope_dim, V = cfg.vocab_size;
  const int64_t W = cfg.sliding_window, p = state.n_tokens - 1;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const bool official = options_.numerics == Numerics::kOfficial;
  const int64_t n_experts = cfg.dspark.n_routed_experts > 0 ? cfg.dspark.n_routed_experts : cfg.n_routed_experts;
  MoeShape moe = moe_shape(cfg, /*hash=*/false);
  moe.n_experts = n_experts;
  if (cfg.dspark.n_experts_per_tok > 0) moe.top_k = cfg.dspark.n_experts_per_tok;

  std::vector<int32_t> ids(B, static_cast<int32_t>(cfg.dspark.noise_token_id));
  ids[0] = next;
  std::vector<float> X(B * hc * D), X2(B * hc * D), u(B * D), x(B * D), y(B * D);
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t j = 0; j < hc; ++j) {
      std::memcpy(&X[(i * hc + j) * D], weights_.embed.f32() + static_cast<int64_t>(ids[i]) * D,
                  D * sizeof(float));
    }
  }
  // Single-pass mHC (V4.1): each site collapses with the previous site's pre, the first with e_0;
  // V4: each site with its own.
  const bool single_pass = cfg.traits.single_pass_mhc;
  std::vector<float> pre_mix(B * hc, 0.0f), attn_pre(B * hc), ffn_pre(B * hc), post(B * hc),
      comb(B * hc * hc);
  for (int64_t i = 0; i < B; ++i) pre_mix[i * hc] = 1.0f;
  HcMixParams hp{hc, D, cfg.hc_sinkhorn_iters, static_cast<float>(cfg.hc_eps), eps};
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  for (const DsparkStageWeights& st : w.stages) {
    const size_t k = &st - w.stages.data();
    hc_mix_ref(X.data(), B, st.hc_attn.fn.f32(), st.hc_attn.base.f32(), st.hc_attn.scale.f32(), hp,
               attn_pre.data(), post.data(), comb.data(), gemm_mode_);
    hc_collapse_ref(X.data(), single_pass ? pre_mix.data() : attn_pre.data(), B, hc, D, u.data());
    rms_norm_ref(u.data(), st.attn_norm.f32(), B, D, D, eps, x.data());
    // DSpark attention: context keys of positions <= p, then the whole block, both ways.
    std::vector<float> q_r, q, kv;
    attention_projections(cfg, st.attn, x.data(), B, gemm_mode_, q_r, q, kv);
    for (int64_t i = 0; i < B; ++i) {
      rope_main_.apply_heads(&q[i * H * d], H, d, p + 1 + i);
      rope_main_.apply(&kv[i * d + d - r], p + 1 + i);
      if (official) round_window_entry(cfg.traits, &kv[i * d], d, r);
    }
    std::vector<const float*> keys;
    for (int64_t pos = std::max<int64_t>(0, p - W + 1); pos <= p; ++pos) {
      keys.push_back(&state.draft_rings[k][(pos % state.n_draft_slots) * d]);
    }
    for (int64_t i = 0; i < B; ++i) keys.push_back(&kv[i * d]);
    std::vector<float> o(B * H * d);
    for (int64_t i = 0; i < B; ++i) {
      sparse_attention_row_ref(&q[i * H * d], H, d, keys.data(), static_cast<int64_t>(keys.size()),
                               st.attn.sink.f32(), scale, &o[i * H * d]);
      rope_main_.apply_heads(&o[i * H * d], H, d, p + 1 + i, /*inverse=*/true);
    }
    attention_output(cfg, st.attn, o.data(), B, gemm_mode_, y.data());
    hc_expand_ref(X.data(), y.data(), post.data(), comb.data(), B, hc, D, X2.data());
    X.swap(X2);

    hc_mix_ref(X.data(), B, st.hc_ffn.fn.f32(), st.hc_ffn.base.f32(), st.hc_ffn.scale.f32(), hp,
               ffn_pre.data(), post.data(), comb.data(), gemm_mode_);
    hc_collapse_ref(X.data(), single_pass ? attn_pre.data() : ffn_pre.data(), B, hc, D, u.data());
    rms_norm_ref(u.data(), st.ffn_norm.f32(), B, D, D, eps, x.data());
    moe_forward(st.moe, moe, x.data(), B, ids.data(), y.data(), gemm_mode_);
    hc_expand_ref(X.data(), y.data(), post.data(), comb.data(), B, hc, D, X2.data());
    X.swap(X2);
    if (single_pass) pre_mix.swap(ffn_pre);
  }

  DraftBlock out;
  out.hidden.resize(B * D);
  if (cfg.traits.dspark_hc_head) {
    hc_head_ref(X.data(), B, w.hc_head.fn.f32(), w.hc_head.base.f32(), w.hc_head.scale.f32(), hp,
                out.hidden.data(), gemm_mode_);
  } else {
    hc_collapse_ref(X.data(), pre_mix.data(), B, hc, D, out.hidden.data());
  }
  std::vector<float> hn(B * D);
  rms_norm_ref(out.hidden.data(), w.norm.f32(), B, D, D, eps, hn.data());
  out.logits.resize(B * V);
  linear_ref(hn.data(), B, D, weights_.head.f32(), V, out.logits.data(), gemm_mode_);
  // Markov head and confidence, one draft after the other.
  const int64_t R = cfg.dspark.markov_rank;
  std::vector<float> markov(V), feature(D + R);
  int32_t tok = next;
  for (int64_t i = 0; i < B; ++i) {
    const float* e = w.markov_embed.f32() + static_cast<int64_t>(tok) * R;
    linear_ref(e, 1, R, w.markov_head.f32(), V, markov.data(), gemm_mode_);
    float* row = &out.logits[i * V];
    for (int64_t v = 0; v < V; ++v) row[v] += markov[v];
    std::memcpy(feature.data(), &out.hidden[i * D], D * sizeof(float));
    std::memcpy(feature.data() + D, e, R * sizeof(float));
    float c = 0.0f;
    linear_ref(feature.data(), 1, D + R, w.confidence.f32(), 1, &c, gemm_mode_);
    out.confidence.push_back(c);
    tok = static_cast<int32_t>(std::max_element(row, row + V) - row);
    out.tokens.push_back(tok);
  }
  out.tokens.resize(n_drafts);
  out.logits.resize(n_drafts * V);
  out.confidence.resize(n_drafts);
  out.hidden.resize(n_drafts * D);
  return out;
}

}  // namespace deepinfer
