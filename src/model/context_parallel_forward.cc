// Context-parallel prefill on the CPU backend (Model::forward_context_parallel; issue 19
// deliverable 5; DeepInfer's zigzag CP, research/deepinfer-source.md §7). The chunk's positions
// are split over the CP ranks (parallel/context_parallel.h); each rank runs the layers for its
// own rows only and gathers, per layer, what attention and the compressors read from the others'
// rows, so every rank builds the complete state of every layer exactly as forward({chunk}) does.
//
// Local to each rank (per row: never exchanged): embedding, mHC streams and their mixes (X, pre,
// post, comb), norms, the q / q_r projections, index queries and head weights, top-k selection
// and candidate blocks (per query row), attention outputs, the output projection, Engram's update
// (its n-grams come from the token history, which every rank has), MoE (a rank's rows route and
// run their experts locally; under expert parallelism (ModelOptions::expert_parallel) the EP
// exchange carries those rows, inside the same begin_step / end_step brackets as forward()).
//
// Gathered per layer (fp32, bytes per token of the chunk; d = head_dim, d_I = index_head_dim;
// V4-Flash d = 512, d_I = 128):
//   * every layer: its window K=V row after RoPE and rounding (d floats: 2 KiB). All ranks put
//     the chunk's last W rows into the ring and read the window keys of their queries from it;
//   * a layer that owns a compressor: the compressor inputs a, z (main_width each: 2d for ratio 4
//     with its overlap, d otherwise): V4 ratio 4 +8 KiB, ratio 128 +4 KiB; V4.1 ratio 2 / 1 +4 KiB;
//   * V4 ratio 4 (own index compressor): ai, zi (2 d_I each): +2 KiB.
//   Every rank then steps the compressors over the whole chunk in position order, which yields
//   the compressed entries and the index keys (V4: the index compressor's output; V4.1 key
//   owners: wk . k_norm of the pooled latent) with no further exchange. V4.1 reuse / reindex
//   layers read their source layer's entries and index keys from the state: they gather only their
//   window rows. So V4-Flash gathers 2 + 12 KiB (CSA), 2 + 6 KiB (HCA), 2 KiB (window) per layer.
// Gathered at the end: the final streams (hc*D floats) when the model carries MTP (its context
// reads every position's X^L), DSpark's taps (n_taps * D floats) when it carries DSpark; then the
// logits: all_logits: each rank's rows of logits (V floats per token); else the last row's final
// streams (and single-pass pre) broadcast from its owner, from which every rank computes the head.
// The gathers pad each rank to 2*ceil(L / 2cp) rows (context_parallel.h).
//
// Bitwise equality with forward({chunk}) under batch_invariant: every op a row goes through is
// row-wise with a fixed reduction order (GemmMode::kFixedOrder), the exchange copies fp32 bits,
// and the compressors see the same rows in the same order; without batch_invariant the BLAS
// GEMMs' blocking may depend on the number of rows, so the logits agree only to rounding.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/parallel.h"
#include "model/block_parts.h"
#include "model/kv_rounding.h"
#include "model/model_batch.h"
#include "ops/attention/sparse_attention.h"
#include "ops/mhc/mhc.h"
#include "ops/rms_norm/rms_norm.h"
#include "parallel/context_parallel.h"
#include "parallel/expert_parallel.h"

namespace deepinfer {

struct Model::CpStep {
  const ContextParallel* cp;
  ZigzagSplit split;
  Batch full;   // every row of the chunk, in position order
  Batch local;  // this rank's rows (split.offsets(rank)), one segment
  std::vector<int64_t> own;
};

void Model::attention_block_cp(int64_t layer, CpStep& step, const float* x, float* out) const {
  const ModelConfig& cfg = config_;
  const LayerPlan& plan = cfg.plan[layer];
  const AttentionWeights& w = weights_.layers[layer].attn;
  Batch& local = step.local;
  const int64_t N = local.n_rows(), L = step.full.n_rows(), H = cfg.num_heads, d = cfg.head_dim;
  const int64_t r = cfg.rope_dim, W = cfg.sliding_window;
  const bool official = options_.numerics == Numerics::kOfficial;
  const RopeTable& rope = plan.ratio > 0 ? rope_compress_ : rope_main_;

  // This rank's queries and K = V rows (attention_block's, for the local rows).
  std::vector<float> q_r, q, kv;
  attention_projections(cfg, w, x, N, gemm_mode_, q_r, q, kv);
  for (int64_t row = 0; row < N; ++row) {
    rope.apply_heads(&q[row * H * d], H, d, local.positions[row]);
    rope.apply(&kv[row * d + d - r], local.positions[row]);
    if (official) round_window_entry(cfg.traits, &kv[row * d], d, r);
  }
  CompressorInputs in;
  if (plan.owns_compressor) in = compressor_inputs(layer, x, N);

  // Gather [K=V | a | z | ai | zi] of every row of the chunk.
  const int64_t cw = in.main_width, iw = in.index_width, P = d + 2 * cw + 2 * iw;
  std::vector<float> mine(N * P), all(L * P);
  for (int64_t row = 0; row < N; ++row) {
    float* dst = &mine[row * P];
    std::memcpy(dst, &kv[row * d], d * sizeof(float));
    if (cw > 0) {
      std::memcpy(dst + d, &in.a[row * cw], cw * sizeof(float));
      std::memcpy(dst + d + cw, &in.z[row * cw], cw * sizeof(float));
    }
    if (iw > 0) {
      std::memcpy(dst + d + 2 * cw, &in.ai[row * iw], iw * sizeof(float));
      std::memcpy(dst + d + 2 * cw + iw, &in.zi[row * iw], iw * sizeof(float));
    }
  }
  step.cp->gather_rows(step.split, mine.data(), P, all.data());
  std::vector<float> kv_all(L * d);
  CompressorInputs in_all;
  in_all.main_width = cw;
  in_all.index_width = iw;
  in_all.a.resize(L * cw);
  in_all.z.resize(L * cw);
  in_all.ai.resize(L * iw);
  in_all.zi.resize(L * iw);
  for (int64_t o = 0; o < L; ++o) {
    const float* src = &all[o * P];
    std::memcpy(&kv_all[o * d], src, d * sizeof(float));
    std::memcpy(in_all.a.data() + o * cw, src + d, cw * sizeof(float));
    std::memcpy(in_all.z.data() + o * cw, src + d + cw, cw * sizeof(float));
    std::memcpy(in_all.ai.data() + o * iw, src + d + 2 * cw, iw * sizeof(float));
    std::memcpy(in_all.zi.data() + o * iw, src + d + 2 * cw + iw, iw * sizeof(float));
  }

  // Every rank compresses the whole chunk, then scores and selects for its own queries.
  if (plan.owns_compressor) step_compressors(layer, step.full, in_all);
  if (plan.scores()) select_entries(layer, local, x, q_r.data());
  const std::vector<std::vector<int64_t>>* picks =
      plan.topk_from >= 0 ? &local.selections[plan.topk_from].picks : nullptr;

  SequenceState& st = *step.full.segments[0].state;
  const int64_t start = step.full.segments[0].start_pos;
  const SequenceLayerState& ls = st.layers[layer];
  std::vector<float> o(N * H * d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  parallel_for(N, [&](int64_t begin, int64_t end) {
    std::vector<const float*> keys;
    for (int64_t row = begin; row < end; ++row) {
      const int64_t pos = local.positions[row];
      keys.clear();
      for (int64_t p = std::max<int64_t>(0, pos - W + 1); p <= pos; ++p) {
        keys.push_back(p >= start ? &kv_all[(p - start) * d] : &ls.ring[(p % st.n_ring_slots) * d]);
      }
      if (plan.kv_from >= 0) {
        const float* entries = st.layers[plan.kv_from].compressor.entries.data();
        if (picks != nullptr) {
          for (int64_t e : (*picks)[row]) keys.push_back(entries + e * d);
        } else {
          const int64_t n_visible = (pos + 1) / plan.ratio;
          for (int64_t e = 0; e < n_visible; ++e) keys.push_back(entries + e * d);
        }
      }
      float* orow = &o[row * H * d];
      sparse_attention_row_ref(&q[row * H * d], H, d, keys.data(), static_cast<int64_t>(keys.size()),
                               w.sink.f32(), scale, orow);
      rope.apply_heads(orow, H, d, pos, /*inverse=*/true);
    }
  });

  // The chunk's last W keys enter the window ring on every rank.
  std::vector<float>& ring = st.layers[layer].ring;
  for (int64_t off = std::max<int64_t>(0, L - W); off < L; ++off) {
    std::memcpy(&ring[((start + off) % st.n_ring_slots) * d], &kv_all[off * d], d * sizeof(float));
  }

  attention_output(cfg, w, o.data(), N, gemm_mode_, out);
}

Tensor Model::forward_context_parallel(const SequenceChunk& chunk, const ContextParallel& cp) const {
  ExpertParallel* ep = options_.expert_parallel.get();
  if (ep == nullptr) return forward_context_parallel_rows(chunk, cp);
  // Expert parallelism: the same step brackets as forward_expert_parallel (moe_block.cc); each
  // CP rank's MoE rows are its own rows.
  ep->begin_step();
  Tensor logits;
  try {
    logits = forward_context_parallel_rows(chunk, cp);
  } catch (...) {
    try {
      ep->end_step();
    } catch (const Error&) {
    }
    throw;
  }
  ep->end_step();
  return logits;
}

Tensor Model::forward_context_parallel_rows(const SequenceChunk& chunk, const ContextParallel& cp) const {
  const ModelConfig& cfg = config_;
  CHECK(chunk.state != nullptr) << "forward_context_parallel: chunk without a sequence state";
  const int64_t L = static_cast<int64_t>(chunk.tokens.size());
  // Agree first, so that a bad chunk fails the same way on every rank instead of leaving the
  // others waiting in a collective.
  cp.check_agree({chunk.state->n_tokens, L, hash_tokens(chunk.tokens.data(), L), chunk.all_logits ? 1 : 0},
                 "the context-parallel chunk (start position, length, token hash, all_logits)");
  check_chunk(chunk);
  CHECK_KIND(kUnsupported, replay_boundary_ < 0)
      << "context-parallel prefill does not run with swa_bounded_replay_keep (--swa-bounded-replay)";
  CHECK_KIND(kUnsupported, trace_ == nullptr)
      << "context-parallel prefill does not record a DecisionTrace (each rank sees its own rows)";

  CpStep step{&cp, ZigzagSplit(L, cp.size()), Batch::build(std::span<const SequenceChunk>(&chunk, 1)), {}, {}};
  step.own = step.split.offsets(cp.rank());
  const Batch& full = step.full;
  Batch& local = step.local;
  for (int64_t off : step.own) {
    local.tokens.push_back(full.tokens[off]);
    local.positions.push_back(full.positions[off]);
    local.segment_of_row.push_back(0);
  }
  const int64_t N = local.n_rows();
  local.segments.push_back({chunk.state, 0, N, N > 0 ? local.positions[0] : full.positions[L - 1] + 1,
                            chunk.all_logits});
  local.selections.resize(cfg.num_layers);

  // The layers for the local rows: Model::forward's loop without SWA bounded replay.
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult;
  std::vector<float> X(N * hc * D), X2(N * hc * D), u(N * D), x(N * D), y(N * D);
  std::vector<float> attn_pre(N * hc), ffn_pre(N * hc), post(N * hc), comb(N * hc * hc);
  const bool single_pass = cfg.traits.single_pass_mhc;
  std::vector<float> pre_mix;
  if (single_pass) {
    pre_mix.assign(N * hc, 0.0f);
    for (int64_t row = 0; row < N; ++row) pre_mix[row * hc] = 1.0f;
  }
  const float* embed = weights_.embed.f32();
  for (int64_t row = 0; row < N; ++row) {
    const float* e = embed + static_cast<int64_t>(local.tokens[row]) * D;
    for (int64_t j = 0; j < hc; ++j) std::memcpy(&X[(row * hc + j) * D], e, D * sizeof(float));
  }
  HcMixParams hp{hc, D, cfg.hc_sinkhorn_iters, static_cast<float>(cfg.hc_eps),
                 static_cast<float>(cfg.rms_norm_eps)};
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const int64_t n_taps = weights_.has_dspark ? static_cast<int64_t>(cfg.dspark.target_layer_ids.size()) : 0;
  std::vector<float> taps(N * n_taps * D);
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const LayerWeights& lw = weights_.layers[l];
    if (lw.has_engram) {
      // The n-grams of the whole chunk (the token history is known everywhere), this rank's rows.
      const std::vector<int32_t> rows_all = engram_rows(l, full);
      const int64_t g = engram_tables_of(l).max_ngram;
      std::vector<int32_t> rows(N * g);
      for (int64_t row = 0; row < N; ++row) {
        std::memcpy(&rows[row * g], &rows_all[step.own[row] * g], g * sizeof(int32_t));
      }
      engram_apply(l, rows.data(), N, X.data());
    }
    if (n_taps > 0) record_dspark_taps(cfg, l, /*after_block=*/false, X.data(), N, taps.data());
    hc_mix_ref(X.data(), N, lw.hc_attn.fn.f32(), lw.hc_attn.base.f32(), lw.hc_attn.scale.f32(), hp,
               attn_pre.data(), post.data(), comb.data(), gemm_mode_);
    hc_collapse_ref(X.data(), single_pass ? pre_mix.data() : attn_pre.data(), N, hc, D, u.data());
    rms_norm_ref(u.data(), lw.attn_norm.f32(), N, D, D, eps, x.data());
    attention_block_cp(l, step, x.data(), y.data());
    hc_expand_ref(X.data(), y.data(), post.data(), comb.data(), N, hc, D, X2.data());
    X.swap(X2);

    hc_mix_ref(X.data(), N, lw.hc_ffn.fn.f32(), lw.hc_ffn.base.f32(), lw.hc_ffn.scale.f32(), hp,
               ffn_pre.data(), post.data(), comb.data(), gemm_mode_);
    hc_collapse_ref(X.data(), single_pass ? attn_pre.data() : ffn_pre.data(), N, hc, D, u.data());
    rms_norm_ref(u.data(), lw.ffn_norm.f32(), N, D, D, eps, x.data());
    moe_block(l, local, x.data(), y.data());
    hc_expand_ref(X.data(), y.data(), post.data(), comb.data(), N, hc, D, X2.data());
    X.swap(X2);
    if (single_pass) pre_mix.swap(ffn_pre);
    if (n_taps > 0) record_dspark_taps(cfg, l, /*after_block=*/true, X.data(), N, taps.data());
  }

  // The drafters' context reads every row: gather the final streams (MTP) and the taps (DSpark).
  const int64_t xw = weights_.has_mtp ? hc * D : 0, tw = n_taps * D;
  if (xw + tw > 0) {
    std::vector<float> mine(N * (xw + tw)), all(L * (xw + tw));
    for (int64_t row = 0; row < N; ++row) {
      std::memcpy(&mine[row * (xw + tw)], X.data() + row * xw, xw * sizeof(float));
      std::memcpy(&mine[row * (xw + tw) + xw], taps.data() + row * tw, tw * sizeof(float));
    }
    cp.gather_rows(step.split, mine.data(), xw + tw, all.data());
    std::vector<float> X_all(L * xw), taps_all(L * tw);
    for (int64_t o = 0; o < L; ++o) {
      std::memcpy(X_all.data() + o * xw, &all[o * (xw + tw)], xw * sizeof(float));
      std::memcpy(taps_all.data() + o * tw, &all[o * (xw + tw) + xw], tw * sizeof(float));
    }
    if (n_taps > 0) write_draft_context(full, taps_all.data());
    if (weights_.has_mtp) write_mtp_context(full, X_all.data());
  }
  advance_states(full);

  const int64_t V = cfg.vocab_size;
  if (chunk.all_logits) {
    std::vector<float> mine(N * V);
    head(X.data(), pre_mix.data(), N, mine.data());
    Tensor logits = Tensor::empty(DType::F32, {L, V});
    cp.gather_rows(step.split, mine.data(), V, logits.f32());
    return logits;
  }
  // The last row's final streams (and single-pass pre), from the rank that owns it.
  const int owner = step.split.owner(L - 1);
  const int64_t pw = single_pass ? hc : 0;
  std::vector<float> last(hc * D + pw);
  if (owner == cp.rank()) {
    std::memcpy(last.data(), &X[(N - 1) * hc * D], hc * D * sizeof(float));
    if (single_pass) std::memcpy(last.data() + hc * D, &pre_mix[(N - 1) * hc], hc * sizeof(float));
  }
  cp.comm().broadcast(last.data(), static_cast<int64_t>(last.size() * sizeof(float)), owner);
  Tensor logits = Tensor::empty(DType::F32, {1, V});
  head(last.data(), last.data() + hc * D, 1, logits.f32());
  return logits;
}

}  // namespace deepinfer
