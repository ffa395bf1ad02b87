#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "base/parallel.h"
#include "io/config_parser.h"
#include "model/block_parts.h"
#include "model/model_batch.h"
#include "model/rope_config.h"
#include "model/swa_replay.h"
#include "ops/mhc/mhc.h"
#include "ops/rms_norm/rms_norm.h"
#include "parallel/expert_parallel.h"

namespace deepinfer {

const char* numerics_name(Numerics numerics) {
  return numerics == Numerics::kOfficial ? "official" : "reference";
}

Numerics parse_numerics(const std::string& name) {
  if (name == "official") return Numerics::kOfficial;
  if (name == "reference") return Numerics::kReference;
  THROW(kInvalidInput) << "unknown numerics '" << name << "' (expected official or reference)";
}

void CompressorState::init(int64_t ratio_in, int64_t width_in, int64_t rollback_depth) {
  ratio = ratio_in;
  width = width_in;
  overlap = ratio == 4;
  const int64_t c = overlap ? 2 : 1;
  n_slots = (overlap ? 2 : 1) * ratio + rollback_depth;
  rows_a.assign(n_slots * c * width, 0.0f);
  rows_z.assign(n_slots * c * width, 0.0f);
  entries.clear();
  n_entries = 0;
}

namespace {

ModelConfig completed(ModelConfig config) {
  complete_model_config(&config);
  return config;
}

}  // namespace

Model::Model(ModelConfig config, ModelWeights weights, ModelOptions options)
    : config_(completed(std::move(config))),
      weights_(std::move(weights)),
      options_(options),
      gemm_mode_(options.batch_invariant ? GemmMode::kFixedOrder : GemmMode::kBlas),
      rope_main_(rope_params(config_, false)),
      rope_compress_(rope_params(config_, true)) {
  if (config_.engram.enabled()) engram_tables_ = engram_primes(config_.engram);
  if (options_.swa_bounded_replay_keep != 0) {
    check_swa_bounded_replay(config_, options_.swa_bounded_replay_keep, rollback_depth(),
                             weights_.has_mtp);
    replay_boundary_ = decoder_boundary(config_);
  }
  if (options_.expert_parallel != nullptr) adopt_routed_experts();
}

std::unique_ptr<Model> Model::from_source(const ModelConfig& config, WeightSource& source,
                                          const ModelOptions& options) {
  const ModelConfig c = completed(config);
  std::function<bool(int64_t, int64_t)> keep_expert;
  if (const ExpertParallel* ep = options.expert_parallel.get()) {
    keep_expert = [ep](int64_t layer, int64_t expert) { return ep->keeps(layer, expert); };
  }
  return std::make_unique<Model>(c, load_model_weights(c, source, keep_expert), options);
}

const char* drafter_kind_name(DrafterKind kind) {
  switch (kind) {
    case DrafterKind::kMtp: return "mtp";
    case DrafterKind::kDspark: return "dspark";
    default: return "none";
  }
}

int64_t Model::draft_length() const {
  switch (drafter_kind()) {
    case DrafterKind::kDspark: return config_.dspark.block_size;
    case DrafterKind::kMtp: return 1;
    default: return 0;
  }
}

int64_t Model::rollback_depth() const {
  if (options_.max_rollback >= 0) return options_.max_rollback;
  return draft_length();
}

DraftBlock Model::draft(const SequenceState& state, int32_t next) const {
  return draft(state, next, draft_length());
}

DraftBlock Model::draft(const SequenceState& state, int32_t next, int64_t n_drafts) const {
  CHECK(has_drafter()) << "draft: the model has no drafter (neither DSpark keys nor mtp.0 tensors)";
  CHECK(state.n_tokens > 0) << "draft: the sequence has no committed position yet";
  CHECK(next >= 0 && next < config_.vocab_size)
      << "draft: token id " << next << " is outside the vocabulary";
  CHECK(n_drafts >= 1) << "draft: " << n_drafts << " drafts asked for";
  if (weights_.has_dspark) return draft_dspark(state, next, n_drafts);
  return draft_mtp(state, next, n_drafts);
}

void Model::truncate(SequenceState& state, int64_t n_tokens) const {
  CHECK(static_cast<int64_t>(state.layers.size()) == config_.num_layers)
      << "truncate: sequence state belongs to another model";
  CHECK(n_tokens >= 0 && n_tokens <= state.n_tokens)
      << "truncate: " << n_tokens << " is outside the sequence's 0.." << state.n_tokens << " positions";
  CHECK(state.n_tokens - n_tokens <= rollback_depth())
      << "truncate: rolling back " << state.n_tokens - n_tokens << " positions, more than the "
      << rollback_depth() << " this model keeps (ModelOptions::max_rollback)";
  CHECK(n_tokens >= state.rollback_floor)
      << "truncate: to " << n_tokens << " positions, below " << state.rollback_floor << " (the rollback depth "
      << rollback_depth() << " behind the longest forward since the state was made; the rings below are overwritten)";
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    SequenceLayerState& ls = state.layers[l];
    const LayerPlan& plan = config_.plan[l];
    if (plan.owns_compressor) {
      ls.compressor.n_entries = n_tokens / plan.ratio;
      ls.compressor.entries.resize(ls.compressor.n_entries * config_.head_dim);
    }
    if (plan.owns_index_keys) {
      if (plan.own_index_compressor) ls.index_compressor.n_entries = n_tokens / plan.ratio;
      ls.index_keys.resize((n_tokens / plan.ratio) * config_.index_head_dim);
    }
  }
  const size_t drop = static_cast<size_t>(state.n_tokens - n_tokens);
  state.recent_tokens.resize(state.recent_tokens.size() - std::min(drop, state.recent_tokens.size()));
  state.n_tokens = n_tokens;
}

std::unique_ptr<SequenceState> Model::new_state() const {
  auto state = std::make_unique<SequenceState>();
  state->layers.resize(config_.num_layers);
  state->n_ring_slots = config_.sliding_window + rollback_depth() + 1;
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    SequenceLayerState& ls = state->layers[l];
    const LayerPlan& plan = config_.plan[l];
    ls.ring.assign(state->n_ring_slots * config_.head_dim, 0.0f);
    if (plan.owns_compressor) ls.compressor.init(plan.ratio, config_.head_dim, rollback_depth());
    if (plan.own_index_compressor) {
      ls.index_compressor.init(plan.ratio, config_.index_head_dim, rollback_depth());
    }
  }
  if (weights_.has_dspark) {
    state->n_draft_slots = config_.sliding_window + config_.dspark.block_size + 1;
    state->draft_rings.assign(weights_.dspark.stages.size(),
                              std::vector<float>(state->n_draft_slots * config_.head_dim, 0.0f));
  }
  if (weights_.has_mtp) {
    state->n_mtp_slots = config_.sliding_window + rollback_depth() + 1;
    state->mtp_ring.assign(state->n_mtp_slots * config_.head_dim, 0.0f);
    state->n_mtp_stream_slots = rollback_depth() + 1;
    state->mtp_streams.assign(state->n_mtp_stream_slots * config_.hc_mult * config_.hidden_size, 0.0f);
  }
  return state;
}

void Model::check_chunk(const SequenceChunk& c) const {
  const ModelConfig& cfg = config_;
  CHECK(c.state != nullptr) << "forward: chunk without a sequence state";
  CHECK(!c.tokens.empty()) << "forward: empty chunk";
  CHECK(static_cast<int64_t>(c.state->layers.size()) == cfg.num_layers)
      << "forward: sequence state belongs to another model";
  for (int32_t t : c.tokens) {
    CHECK(t >= 0 && t < cfg.vocab_size) << "token id " << t << " is outside the vocabulary [0, "
                                        << cfg.vocab_size << ")";
  }
  const int64_t end = c.state->n_tokens + static_cast<int64_t>(c.tokens.size());
  CHECK(cfg.max_position_embeddings <= 0 || end <= cfg.max_position_embeddings)
      << "sequence of " << end << " tokens exceeds the context limit of "
      << cfg.max_position_embeddings;
  CHECK(c.prompt_length == 0 || c.prompt_length >= end)
      << "forward: chunk ends at " << end << ", after its prompt_length " << c.prompt_length;
}

Tensor Model::forward(std::span<const SequenceChunk> chunks) const {
  if (options_.expert_parallel != nullptr) return forward_expert_parallel(chunks);
  return forward_rows(chunks);
}

Tensor Model::forward_rows(std::span<const SequenceChunk> chunks) const {
  const ModelConfig& cfg = config_;
  // Validate everything before any state changes: a bad chunk fails alone.
  int64_t n_rows = 0, n_out = 0;
  for (const SequenceChunk& c : chunks) {
    check_chunk(c);
    CHECK_KIND(kUnsupported, !c.all_logits || replay_boundary_ < 0 || c.prompt_length == 0 ||
                                 c.state->n_tokens >= c.prompt_length - options_.swa_bounded_replay_keep)
        << "forward: every position's logits (prompt logprobs) are not available with "
           "swa_bounded_replay_keep (--swa-bounded-replay): the decoder layers skip positions "
           "before the last "
        << options_.swa_bounded_replay_keep;
    n_rows += static_cast<int64_t>(c.tokens.size());
    n_out += c.all_logits ? static_cast<int64_t>(c.tokens.size()) : 1;
  }
  if (n_rows == 0) return Tensor::empty(DType::F32, {0, cfg.vocab_size});
  if (trace_ != nullptr) {
    CHECK(chunks.size() == 1 && chunks[0].state->n_tokens + n_rows <= trace_->max_positions)
        << "forward: a DecisionTrace records one sequence of at most " << trace_->max_positions
        << " positions";
  }

  Batch batch = Batch::build(chunks);
  batch.selections.resize(cfg.num_layers);
  // SWA bounded replay: the first position each segment's decoder layers compute; the decoder
  // windows never reach below it.
  std::vector<int64_t> keep_from(chunks.size(), 0);
  bool cut = false;
  if (replay_boundary_ >= 0) {
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (chunks[i].prompt_length == 0) continue;
      keep_from[i] = chunks[i].prompt_length - options_.swa_bounded_replay_keep;
      SequenceState& st = *chunks[i].state;
      st.decoder_window_floor = std::max(st.decoder_window_floor, keep_from[i]);
      cut = cut || keep_from[i] > st.n_tokens;
    }
  }
  Batch cut_batch;
  Batch* b = &batch;  // the rows still computed: all, or from the decoder boundary the kept ones
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult;
  int64_t N = n_rows;
  std::vector<float> X(N * hc * D), X2(N * hc * D), u(N * D), x(N * D), y(N * D);
  std::vector<float> attn_pre(N * hc), ffn_pre(N * hc), post(N * hc), comb(N * hc * hc);
  // Single-pass mHC (V4.1, §C.3): each site collapses with the previous site's `pre`;
  // layer 0's attention collapses with stream 0 alone (pre_mix = e_0).
  const bool single_pass = cfg.traits.single_pass_mhc;
  std::vector<float> pre_mix;
  if (single_pass) {
    pre_mix.assign(N * hc, 0.0f);
    for (int64_t row = 0; row < N; ++row) pre_mix[row * hc] = 1.0f;
  }
  const float* embed = weights_.embed.f32();
  for (int64_t r = 0; r < N; ++r) {
    const float* e = embed + static_cast<int64_t>(batch.tokens[r]) * D;
    for (int64_t j = 0; j < hc; ++j) std::memcpy(&X[(r * hc + j) * D], e, D * sizeof(float));
  }
  HcMixParams hp{hc, D, cfg.hc_sinkhorn_iters, static_cast<float>(cfg.hc_eps),
                 static_cast<float>(cfg.rms_norm_eps)};
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  // DSpark taps (§D.1): per target layer the streams entering it (V4.1) or after it (V4-DSpark),
  // averaged over streams (record_dspark_taps).
  const int64_t n_taps = weights_.has_dspark ? static_cast<int64_t>(cfg.dspark.target_layer_ids.size()) : 0;
  std::vector<float> taps(N * n_taps * D);
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const LayerWeights& lw = weights_.layers[l];
    if (lw.has_engram) engram_block(l, batch, X.data());
    if (n_taps > 0) record_dspark_taps(cfg, l, /*after_block=*/false, X.data(), N, taps.data());
    hc_mix_ref(X.data(), N, lw.hc_attn.fn.f32(), lw.hc_attn.base.f32(), lw.hc_attn.scale.f32(), hp,
               attn_pre.data(), post.data(), comb.data(), gemm_mode_);
    hc_collapse_ref(X.data(), single_pass ? pre_mix.data() : attn_pre.data(), N, hc, D, u.data());
    rms_norm_ref(u.data(), lw.attn_norm.f32(), N, D, D, eps, x.data());
    if (cut && l == replay_boundary_) {
      // The source's compressor reads every position; the decoder computes the kept ones.
      feed_compressors(l, batch, x.data());
      batch.compressors_fed = l;
      const std::vector<int64_t> rows = batch.kept_rows(keep_from);
      cut_batch = batch.subset(rows);
      b = &cut_batch;
      N = cut_batch.n_rows();
      gather_rows(X, rows, hc * D);
      gather_rows(x, rows, D);
      gather_rows(attn_pre, rows, hc);
      gather_rows(post, rows, hc);
      gather_rows(comb, rows, hc * hc);
      if (single_pass) gather_rows(pre_mix, rows, hc);
      gather_rows(taps, rows, n_taps * D);
      X2.resize(N * hc * D);
      u.resize(N * D);
      y.resize(N * D);
      ffn_pre.resize(N * hc);
    }
    attention_block(l, *b, x.data(), y.data());
    hc_expand_ref(X.data(), y.data(), post.data(), comb.data(), N, hc, D, X2.data());
    X.swap(X2);

    hc_mix_ref(X.data(), N, lw.hc_ffn.fn.f32(), lw.hc_ffn.base.f32(), lw.hc_ffn.scale.f32(), hp,
               ffn_pre.data(), post.data(), comb.data(), gemm_mode_);
    hc_collapse_ref(X.data(), single_pass ? attn_pre.data() : ffn_pre.data(), N, hc, D, u.data());
    rms_norm_ref(u.data(), lw.ffn_norm.f32(), N, D, D, eps, x.data());
    moe_block(l, *b, x.data(), y.data());
    hc_expand_ref(X.data(), y.data(), post.data(), comb.data(), N, hc, D, X2.data());
    X.swap(X2);
    if (single_pass) pre_mix.swap(ffn_pre);
    if (n_taps > 0) record_dspark_taps(cfg, l, /*after_block=*/true, X.data(), N, taps.data());
  }
  if (n_taps > 0) write_draft_context(*b, taps.data());
  if (weights_.has_mtp) write_mtp_context(*b, X.data());
  advance_states(batch);

  // Final head only for the rows whose logits are wanted (-1: a chunk bounded replay skipped
  // entirely, whose row of logits is NaN).
  std::vector<int64_t> out_rows;
  for (const Batch::Segment& seg : b->segments) {
    if (seg.begin == seg.end) {
      out_rows.push_back(-1);
      continue;
    }
    for (int64_t r = seg.all_logits ? seg.begin : seg.end - 1; r < seg.end; ++r) out_rows.push_back(r);
  }
  ICHECK(static_cast<int64_t>(out_rows.size()) == n_out);
  std::vector<float> Xo(n_out * hc * D, 0.0f);
  for (int64_t i = 0; i < n_out; ++i) {
    if (out_rows[i] < 0) continue;
    std::memcpy(&Xo[i * hc * D], &X[out_rows[i] * hc * D], hc * D * sizeof(float));
  }
  std::vector<float> pre_o;
  if (single_pass) {
    pre_o.assign(n_out * hc, 0.0f);
    for (int64_t i = 0; i < n_out; ++i) {
      if (out_rows[i] < 0) continue;
      std::memcpy(&pre_o[i * hc], &pre_mix[out_rows[i] * hc], hc * sizeof(float));
    }
  }
  Tensor logits = Tensor::empty(DType::F32, {n_out, cfg.vocab_size});
  head(Xo.data(), pre_o.data(), n_out, logits.f32());
  for (int64_t i = 0; i < n_out; ++i) {
    if (out_rows[i] < 0) std::fill_n(logits.f32() + i * cfg.vocab_size, cfg.vocab_size, NAN);
  }
  return logits;
}

void Model::advance_states(const Batch& batch) const {
  // Engram's n-grams of the next chunk reach back max_ngram_size - 1 tokens (more after a
  // rollback).
  const size_t keep = config_.engram.enabled()
                          ? static_cast<size_t>(config_.engram.max_ngram_size - 1 + rollback_depth())
                          : 0;
  for (const Batch::Segment& seg : batch.segments) {
    std::vector<int32_t>& recent = seg.state->recent_tokens;
    recent.insert(recent.end(), batch.tokens.begin() + seg.begin, batch.tokens.begin() + seg.end);
    if (recent.size() > keep) recent.erase(recent.begin(), recent.end() - keep);
  }
  for (const Batch::Segment& seg : batch.segments) {
    SequenceState& st = *seg.state;
    st.n_tokens += seg.end - seg.begin;
    st.rollback_floor = std::max(st.rollback_floor, st.n_tokens - rollback_depth());
  }
}

void Model::head(const float* Xo, const float* pre_o, int64_t n, float* logits) const {
  const ModelConfig& cfg = config_;
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  std::vector<float> h(n * D);
  if (cfg.traits.single_pass_mhc) {
    hc_collapse_ref(Xo, pre_o, n, hc, D, h.data());
  } else {
    HcMixParams hp{hc, D, cfg.hc_sinkhorn_iters, static_cast<float>(cfg.hc_eps), eps};
    hc_head_ref(Xo, n, weights_.hc_head.fn.f32(), weights_.hc_head.base.f32(),
                weights_.hc_head.scale.f32(), hp, h.data(), gemm_mode_);
  }
  rms_norm_ref(h.data(), weights_.norm.f32(), n, D, D, eps, h.data());
  linear_ref(h.data(), n, D, weights_.head.f32(), cfg.vocab_size, logits, gemm_mode_);
}

}  // namespace deepinfer
