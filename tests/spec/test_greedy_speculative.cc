// Greedy speculative decoding (spec/greedy_speculative.h) is lossless and rolls back by
// construction (issue 15 acceptance, model level): on a V4 model (CSA overlap compressor,
// HCA, hash MoE), a V4.1 model (ratio-2/1 sources, candidates, reindex, Engram) and the V4.1
// golden checkpoint with its DSpark drafter, in batch-invariant mode:
//  * the speculative continuation equals token-by-token greedy decoding, and the logits every
//    committed token was chosen from are bitwise equal;
//  * afterwards every state byte a later step can read (window slots of the last W positions,
//    compressed entries, index keys, the compressor rows of the open and previous windows,
//    Engram's token history, the DSpark context of the last W positions) equals the plain run's;
//  * the same with V4's MTP-1 drafter (random MTP module; 1 draft and 4 chained drafts per
//    step), whose window keys of the last W positions before the last one and the saved final
//    streams of the last position are live state too;
//  * drafts come from the model's drafter (DSpark, MTP), or from an oracle that proposes the true
//    continuation with every third token wrong, so acceptance lengths 0..k all occur.
#include <gtest/gtest.h>

#include <cstdio>

#include "io/config_parser.h"
#include "model/model.h"
#include "model/weight_source.h"
#include "spec/greedy_speculative.h"
#include "../model/model_test_util.h"

namespace deepinfer {
namespace {

constexpr int64_t kDrafts = 4;

// Compares what a later step can read of two states with the same committed length.
void expect_same_live_state(const ModelConfig& cfg, const SequenceState& a, const SequenceState& b) {
  ASSERT_EQ(a.n_tokens, b.n_tokens);
  const int64_t n = a.n_tokens, d = cfg.head_dim, W = cfg.sliding_window;
  ASSERT_EQ(a.n_ring_slots, b.n_ring_slots);
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const SequenceLayerState& x = a.layers[l];
    const SequenceLayerState& y = b.layers[l];
    for (int64_t p = std::max<int64_t>(0, n - W); p < n; ++p) {
      const int64_t s = (p % a.n_ring_slots) * d;
      ASSERT_TRUE(std::equal(&x.ring[s], &x.ring[s] + d, &y.ring[s])) << "window position " << p;
    }
    EXPECT_EQ(x.compressor.entries, y.compressor.entries);
    EXPECT_EQ(x.index_keys, y.index_keys);
    for (const auto* pair : {&x.compressor, &x.index_compressor}) {
      const CompressorState& cx = *pair;
      const CompressorState& cy = pair == &x.compressor ? y.compressor : y.index_compressor;
      if (cx.ratio == 0) continue;
      const int64_t cw = (cx.overlap ? 2 : 1) * cx.width;
      const int64_t live = (n % cx.ratio) + (cx.overlap ? cx.ratio : 0);
      for (int64_t p = std::max<int64_t>(0, n - live); p < n; ++p) {
        const int64_t s = (p % cx.n_slots) * cw;
        ASSERT_TRUE(std::equal(&cx.rows_a[s], &cx.rows_a[s] + cw, &cy.rows_a[s])) << "rows_a " << p;
        ASSERT_TRUE(std::equal(&cx.rows_z[s], &cx.rows_z[s] + cw, &cy.rows_z[s])) << "rows_z " << p;
      }
    }
  }
  const size_t keep = cfg.engram.enabled() ? static_cast<size_t>(cfg.engram.max_ngram_size - 1) : 0;
  ASSERT_GE(a.recent_tokens.size(), std::min<size_t>(keep, n));
  EXPECT_TRUE(std::equal(a.recent_tokens.end() - std::min<size_t>(keep, n), a.recent_tokens.end(),
                         b.recent_tokens.end() - std::min<size_t>(keep, n)));
  for (size_t k = 0; k < a.draft_rings.size(); ++k) {
    for (int64_t p = std::max<int64_t>(0, n - W); p < n; ++p) {
      const int64_t s = (p % a.n_draft_slots) * d;
      ASSERT_TRUE(std::equal(&a.draft_rings[k][s], &a.draft_rings[k][s] + d, &b.draft_rings[k][s]))
          << "draft ring " << k << " position " << p;
    }
  }
  // MTP: keys of positions < n-1 (n-1's needs the next token), the streams of n-1.
  ASSERT_EQ(a.n_mtp_slots, b.n_mtp_slots);
  if (a.n_mtp_slots > 0 && n > 0) {
    for (int64_t p = std::max<int64_t>(0, n - W); p < n - 1; ++p) {
      const int64_t s = (p % a.n_mtp_slots) * d;
      ASSERT_TRUE(std::equal(&a.mtp_ring[s], &a.mtp_ring[s] + d, &b.mtp_ring[s])) << "MTP key " << p;
    }
    const int64_t w = cfg.hc_mult * cfg.hidden_size, s = ((n - 1) % a.n_mtp_stream_slots) * w;
    ASSERT_TRUE(std::equal(&a.mtp_streams[s], &a.mtp_streams[s] + w, &b.mtp_streams[s])) << "MTP streams";
  }
}

// Drafts the true continuation `truth` (tokens after the prompt), every third one wrong.
Drafter oracle(const std::vector<int32_t>& truth, int64_t prompt_len, int64_t vocab) {
  return [&truth, prompt_len, vocab](const SequenceState& state, int32_t, int64_t k) {
    std::vector<int32_t> drafts;
    // The state holds the prompt and the continuation up to the token before `next`.
    const int64_t first = state.n_tokens - prompt_len + 1;  // index in truth of the first draft
    for (int64_t i = 0; i < k && first + i < static_cast<int64_t>(truth.size()); ++i) {
      const int64_t at = first + i;
      drafts.push_back(at % 3 == 2 ? static_cast<int32_t>((truth[at] + 1) % vocab) : truth[at]);
    }
    return drafts;
  };
}

void check(const Model& model, const std::vector<int32_t>& prompt, int64_t n_new, bool use_drafter,
           const char* what, int64_t k = kDrafts) {
  SCOPED_TRACE(what);
  const ModelConfig& cfg = model.config();
  auto plain_state = model.new_state();
  const GreedyOutput plain = greedy_plain(model, *plain_state, prompt, n_new);
  auto spec_state = model.new_state();
  const Drafter drafter = use_drafter ? model_drafter(model)
                                      : oracle(plain.tokens, static_cast<int64_t>(prompt.size()), cfg.vocab_size);
  const GreedyOutput spec = greedy_speculative(model, *spec_state, prompt, n_new, k, drafter);
  ASSERT_EQ(spec.tokens, plain.tokens);
  ASSERT_EQ(spec.logits.size(), plain.logits.size());
  for (size_t i = 0; i < plain.logits.size(); ++i) {
    ASSERT_EQ(spec.logits[i], plain.logits[i]) << "logit " << i << " (token " << i / cfg.vocab_size << ")";
  }
  if (spec_state->n_tokens > plain_state->n_tokens) model.truncate(*spec_state, plain_state->n_tokens);
  expect_same_live_state(cfg, *spec_state, *plain_state);
  std::printf("%s: %lld steps, %lld of %lld drafts accepted, mean acceptance length %.2f\n", what,
              static_cast<long long>(spec.stats.steps), static_cast<long long>(spec.stats.accepted),
              static_cast<long long>(spec.stats.drafted), spec.stats.mean_acceptance_length());
  EXPECT_GT(spec.stats.steps, 0);
  if (!use_drafter) {
    EXPECT_GT(spec.stats.accepted, 0);
    EXPECT_LT(spec.stats.accepted, spec.stats.drafted);
  }
}

std::unique_ptr<Model> random_model(const ModelConfig& cfg, Numerics numerics, bool with_mtp = false) {
  auto src = random_weights(cfg, 11, with_mtp);
  ModelOptions o{numerics, /*batch_invariant=*/true, /*max_rollback=*/kDrafts};
  return Model::from_source(cfg, *src, o);
}

TEST(GreedySpeculative, V4IsLosslessAndRollsBackExactly) {
  for (Numerics numerics : {Numerics::kReference, Numerics::kOfficial}) {
    auto model = random_model(testing::small_config(), numerics);
    check(*model, testing::random_tokens(21, 300, 3), 60, false, numerics_name(numerics));
  }
}

TEST(GreedySpeculative, V41WithEngramIsLosslessAndRollsBackExactly) {
  for (Numerics numerics : {Numerics::kReference, Numerics::kOfficial}) {
    auto model = random_model(testing::small_v41_config(), numerics);
    check(*model, testing::random_tokens(21, 300, 4), 60, false, numerics_name(numerics));
  }
}

TEST(GreedySpeculative, DsparkDrafterOnTheGoldenCheckpoint) {
  const std::string dir = "tests/data/golden_v41/dspark_quant/bf16";
  for (Numerics numerics : {Numerics::kReference, Numerics::kOfficial}) {
    auto model = Model::load(dir, {numerics, /*batch_invariant=*/true});
    ASSERT_TRUE(model->has_drafter());
    const std::vector<int32_t> prompt = testing::random_tokens(30, model->config().vocab_size, 5);
    check(*model, prompt, 40, true, numerics_name(numerics));
    check(*model, prompt, 40, false, numerics_name(numerics));
  }
}

TEST(GreedySpeculative, MtpDrafterIsLosslessAndRollsBackExactly) {
  ModelConfig cfg = testing::small_config();
  cfg.num_nextn_predict_layers = 1;
  cfg.mtp_compress_ratios = {0};
  for (Numerics numerics : {Numerics::kReference, Numerics::kOfficial}) {
    auto model = random_model(cfg, numerics, /*with_mtp=*/true);
    ASSERT_EQ(model->drafter_kind(), DrafterKind::kMtp);
    const std::vector<int32_t> prompt = testing::random_tokens(21, cfg.vocab_size, 3);
    const std::string name = std::string("MTP ") + numerics_name(numerics);
    check(*model, prompt, 60, true, (name + ", 1 draft").c_str(), 1);
    check(*model, prompt, 60, true, (name + ", 4 chained drafts").c_str(), kDrafts);
    check(*model, prompt, 60, false, (name + ", oracle").c_str());
  }
}

TEST(GreedySpeculative, TooManyDraftsAreRefused) {
  auto model = random_model(testing::small_v41_config(), Numerics::kReference);
  auto state = model->new_state();
  const std::vector<int32_t> prompt = {3, 4, 5};
  EXPECT_THROW(greedy_speculative(*model, *state, prompt, 8, kDrafts + 1,
                                  oracle(prompt, 3, model->config().vocab_size)),
               Error);
  auto s2 = model->new_state();
  const std::vector<int32_t> ten(10, 7);
  SequenceChunk c{s2.get(), ten, false};
  model->forward(std::span<const SequenceChunk>(&c, 1));
  EXPECT_THROW(model->truncate(*s2, 10 - kDrafts - 1), Error);
  EXPECT_THROW(model->truncate(*s2, 11), Error);
}

// truncate goes back at most the rollback depth behind the longest forward, not only behind
// the current length: after 40 tokens, a truncation by the depth and one more token, a second
// truncation by the depth would need ring slots the 40-token forward has overwritten.
TEST(GreedySpeculative, TruncationBelowTheRollbackFloorIsRefused) {
  auto model = random_model(testing::small_v41_config(), Numerics::kReference);
  const int64_t R = model->rollback_depth();
  ASSERT_GE(R, 2);
  auto s = model->new_state();
  const std::vector<int32_t> forty = testing::random_tokens(40, model->config().vocab_size, 5);
  SequenceChunk c{s.get(), forty, false};
  model->forward(std::span<const SequenceChunk>(&c, 1));
  model->truncate(*s, 40 - R);
  const std::vector<int32_t> one = {7};
  SequenceChunk c1{s.get(), one, false};
  model->forward(std::span<const SequenceChunk>(&c1, 1));
  EXPECT_THROW(model->truncate(*s, 41 - 2 * R), Error);  // R back from 41 - R, below 40 - R
  EXPECT_EQ(s->n_tokens, 41 - R);
  model->truncate(*s, 40 - R);
  EXPECT_EQ(s->n_tokens, 40 - R);
}

}  // namespace
}  // namespace deepinfer
