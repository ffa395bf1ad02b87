// The MTP-1 drafter of V4-Flash / V4-Pro (MODEL_SPEC §A.9, §D.7), CPU reference.
//  * MTP position t combines the backbone's final streams X^L[t] (before hc_head) with token
//    t+1:  Z_j = e_proj(enorm(embed(tok_{t+1}))) + h_proj(hnorm(X^L[t, j])) for each stream j,
//    then one V4 block (local-pre mHC, per-head q norm, sliding-window attention with the sink
//    over the MTP keys of positions t-W+1..t, score-routed MoE with bias), then
//    logits = head . norm(hc_head_mtp(streams)), the prediction for position t+2. RoPE at t
//    (the block is ratio 0: theta = rope_theta, no YaRN).
//  * Context (every forward): the MTP key of position t needs token t+1, so a forward over
//    positions s..e-1 writes the keys of s-1 (from the streams saved by the previous forward)
//    .. e-2, and saves the streams of its last positions. After a rollback the keys of the
//    rolled-back positions are stale but never read: a draft at p reads keys < p only, and the
//    forward after it rewrites p onward (slots as the backbone's rings: W + depth + 1).
//  * Draft after committed positions 0..p with the target's token y for p+1: step 0 is MTP
//    position p with (X^L[p], y); for more drafts the chain continues at p+1, p+2, .. with the
//    MTP block's own output streams and its own argmax (a choice: DeepSeek's MTP has depth 1),
//    attending to the committed keys and the chain's keys.
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
namespace {

// Z [M, hc, D] from streams h [M, hc, D] and tokens tok [M] (the MTP block's input).
void mtp_input(const ModelConfig& cfg, const ModelWeights& w, const float* h, const int32_t* tok,
               int64_t M, GemmMode mode, float* Z) {
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  std::vector<float> e(M * D), ep(M * D), hn(M * hc * D), hp(M * hc * D);
  for (int64_t m = 0; m < M; ++m) {
    std::memcpy(&e[m * D], w.embed.f32() + static_cast<int64_t>(tok[m]) * D, D * sizeof(float));
  }
  rms_norm_ref(e.data(), w.mtp.enorm.f32(), M, D, D, eps, e.data());
  linear_ref(e.data(), M, D, w.mtp.e_proj.f32(), D, ep.data(), mode);
  rms_norm_ref(h, w.mtp.hnorm.f32(), M * hc, D, D, eps, hn.data());
  linear_ref(hn.data(), M * hc, D, w.mtp.h_proj.f32(), D, hp.data(), mode);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t j = 0; j < hc; ++j) {
      for (int64_t i = 0; i < D; ++i) Z[(m * hc + j) * D + i] = ep[m * D + i] + hp[(m * hc + j) * D + i];
    }
  }
}

}  // namespace

void Model::write_mtp_context(const Batch& batch, const float* X) const {
  const ModelConfig& cfg = config_;
  const DsparkStageWeights& b = weights_.mtp.block;
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult, d = cfg.head_dim, r = cfg.rope_dim;
  const int64_t W = cfg.sliding_window, depth = rollback_depth();
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  // Rows whose next token this forward sees: position t with streams h and token t+1.
  std::vector<float> H;
  std::vector<int32_t> tok;
  std::vector<int64_t> pos;
  std::vector<SequenceState*> owner;
  for (const Batch::Segment& seg : batch.segments) {
    SequenceState* st = seg.state;
    const int64_t s = seg.start_pos, e = s + (seg.end - seg.begin);
    // Keys older than W + depth positions before the end are never read again.
    for (int64_t t = std::max({int64_t{0}, s - 1, e - 1 - W - depth}); t <= e - 2; ++t) {
      const float* h = t >= s ? &X[(seg.begin + t - s) * hc * D]
                              : &st->mtp_streams[(t % st->n_mtp_stream_slots) * hc * D];
      H.insert(H.end(), h, h + hc * D);
      tok.push_back(batch.tokens[seg.begin + t + 1 - s]);
      pos.push_back(t);
      owner.push_back(st);
    }
  }
  for (const Batch::Segment& seg : batch.segments) {
    SequenceState* st = seg.state;
    const int64_t S = st->n_mtp_stream_slots;
    for (int64_t row = std::max(seg.begin, seg.end - S); row < seg.end; ++row) {
      std::memcpy(&st->mtp_streams[(batch.positions[row] % S) * hc * D], &X[row * hc * D],
                  hc * D * sizeof(float));
    }
  }
  const int64_t M = static_cast<int64_t>(tok.size());
  if (M == 0) return;
  std::vector<float> Z(M * hc * D), u(M * D), x(M * D), kv(M * d);
  std::vector<float> pre(M * hc), post(M * hc), comb(M * hc * hc);
  mtp_input(cfg, weights_, H.data(), tok.data(), M, gemm_mode_, Z.data());
  HcMixParams hp{hc, D, cfg.hc_sinkhorn_iters, static_cast<float>(cfg.hc_eps), eps};
  hc_mix_ref(Z.data(), M, b.hc_attn.fn.f32(), b.hc_attn.base.f32(), b.hc_attn.scale.f32(), hp,
             pre.data(), post.data(), comb.data(), gemm_mode_);
  hc_collapse_ref(Z.data(), pre.data(), M, hc, D, u.data());
  rms_norm_ref(u.data(), b.attn_norm.f32(), M, D, D, eps, x.data());
  // kv = kv_norm(wkv x), as attention_projections computes it.
  linear_ref(x.data(), M, D, b.attn.wkv.f32(), d, kv.data(), gemm_mode_);
  rms_norm_ref(kv.data(), b.attn.kv_norm.f32(), M, d, d, eps, kv.data());
  const bool official = options_.numerics == Numerics::kOfficial;
  for (int64_t m = 0; m < M; ++m) {
    rope_main_.apply(&kv[m * d + d - r], pos[m]);
    if (official) round_window_entry(cfg.traits, &kv[m * d], d, r);
    SequenceState* st = owner[m];
    std::memcpy(&st->mtp_ring[(pos[m] % st->n_mtp_slots) * d], &kv[m * d], d * sizeof(float));
  }
}

DraftBlock Model::draft_mtp(const SequenceState& state, int32_t next, int64_t n_drafts) const {
  const ModelConfig& cfg = config_;
  const DsparkStageWeights& b = weights_.mtp.block;
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult, H = cfg.num_heads, d = cfg.head_dim;
  const int64_t r = cfg.rope_dim, V = cfg.vocab_size, W = cfg.sliding_window;
  CHECK(state.n_mtp_slots > 0 && static_cast<int64_t>(state.mtp_ring.size()) == state.n_mtp_slots * d &&
        static_cast<int64_t>(state.mtp_streams.size()) == state.n_mtp_stream_slots * hc * D)
      << "draft: sequence state belongs to another model";
  const int64_t p = state.n_tokens - 1;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const bool official = options_.numerics == Numerics::kOfficial;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const MoeShape moe = moe_shape(cfg, /*hash=*/false);
  HcMixParams hp{hc, D, cfg.hc_sinkhorn_iters, static_cast<float>(cfg.hc_eps), eps};

  std::vector<float> h(&state.mtp_streams[(p % state.n_mtp_stream_slots) * hc * D],
                       &state.mtp_streams[(p % state.n_mtp_stream_slots) * hc * D] + hc * D);
  std::vector<float> Z(hc * D), Z2(hc * D), u(D), x(D), y(D), o(H * d), hn(D);
  std::vector<float> pre(hc), post(hc), comb(hc * hc), chain_kv;
  std::vector<const float*> keys;
  DraftBlock out;
  int32_t tok = next;
  for (int64_t i = 0; i < n_drafts; ++i) {
    const int64_t pos = p + i;
    mtp_input(cfg, weights_, h.data(), &tok, 1, gemm_mode_, Z.data());
    hc_mix_ref(Z.data(), 1, b.hc_attn.fn.f32(), b.hc_attn.base.f32(), b.hc_attn.scale.f32(), hp,
               pre.data(), post.data(), comb.data(), gemm_mode_);
    hc_collapse_ref(Z.data(), pre.data(), 1, hc, D, u.data());
    rms_norm_ref(u.data(), b.attn_norm.f32(), 1, D, D, eps, x.data());
    std::vector<float> q_r, q, kv;
    attention_projections(cfg, b.attn, x.data(), 1, gemm_mode_, q_r, q, kv);
    rope_main_.apply_heads(q.data(), H, d, pos);
    rope_main_.apply(&kv[d - r], pos);
    if (official) round_window_entry(cfg.traits, kv.data(), d, r);
    chain_kv.insert(chain_kv.end(), kv.begin(), kv.end());
    keys.clear();
    for (int64_t t = std::max<int64_t>(0, pos - W + 1); t <= pos; ++t) {
      keys.push_back(t < p ? &state.mtp_ring[(t % state.n_mtp_slots) * d] : &chain_kv[(t - p) * d]);
    }
    sparse_attention_row_ref(q.data(), H, d, keys.data(), static_cast<int64_t>(keys.size()),
                             b.attn.sink.f32(), scale, o.data());
    rope_main_.apply_heads(o.data(), H, d, pos, /*inverse=*/true);
    attention_output(cfg, b.attn, o.data(), 1, gemm_mode_, y.data());
    hc_expand_ref(Z.data(), y.data(), post.data(), comb.data(), 1, hc, D, Z2.data());
    Z.swap(Z2);

    hc_mix_ref(Z.data(), 1, b.hc_ffn.fn.f32(), b.hc_ffn.base.f32(), b.hc_ffn.scale.f32(), hp,
               pre.data(), post.data(), comb.data(), gemm_mode_);
    hc_collapse_ref(Z.data(), pre.data(), 1, hc, D, u.data());
    rms_norm_ref(u.data(), b.ffn_norm.f32(), 1, D, D, eps, x.data());
    moe_forward(b.moe, moe, x.data(), 1, &tok, y.data(), gemm_mode_);
    hc_expand_ref(Z.data(), y.data(), post.data(), comb.data(), 1, hc, D, Z2.data());
    Z.swap(Z2);

    const MtpWeights& m = weights_.mtp;
    const size_t at = out.hidden.size();
    out.hidden.resize(at + D);
    hc_head_ref(Z.data(), 1, m.hc_head.fn.f32(), m.hc_head.base.f32(), m.hc_head.scale.f32(), hp,
                &out.hidden[at], gemm_mode_);
    rms_norm_ref(&out.hidden[at], m.norm.f32(), 1, D, D, eps, hn.data());
    out.logits.resize((i + 1) * V);
    float* row = &out.logits[i * V];
    linear_ref(hn.data(), 1, D, weights_.head.f32(), V, row, gemm_mode_);
    tok = static_cast<int32_t>(std::max_element(row, row + V) - row);
    out.tokens.push_back(tok);
    h = Z;  // the next chain step continues from the MTP block's own output streams
  }
  return out;
}

}  // namespace deepinfer
