// V4's MTP-1 drafter (model/mtp.cc) on a random-weight V4 model (CSA overlap compressor, HCA,
// hash MoE; the MTP block from random_weights(..., with_mtp)):
//  * it loads only when asked for (config num_nextn_predict_layers and mtp.0 tensors), with
//    errors naming the tensor or key otherwise;
//  * rollback: after a verification chunk and Model::truncate, the draft (1 and 3 chained
//    steps) is bitwise that of a fresh run of the committed tokens (batch-invariant mode);
//  * MODEL_SPEC §E.17: the MTP context never changes backbone logits (bitwise: with and
//    without drafts interleaved, and against the same backbone without the MTP module);
//  * bad draft requests fail cleanly.
//  * against the float64 reference (tools/mtp_reference.py; tests/data/golden_mtp: a tiny V4
//    checkpoint with FP8 e_proj / h_proj): the backbone logits, the MTP draft logits and hidden
//    after every position 0..T-2 (decoding token by token, next = the sequence's token), the MTP
//    keys the forwards wrote, and 3 chained drafts at three positions, each row within
//    1e-4 * max|ref| in reference numerics. Official numerics round the window keys (FP8 NoPE
//    dims, bf16 rope dims) of the backbone and the MTP block: a fp32 value next to a rounding
//    boundary lands on the other side of it in a few elements (one bf16 step of a key moves the
//    logits by ~1e-4), so there the bound is 1e-3 per row (measured worst 2.3e-4; a wrong formula
//    moves them by > 0.1) and a key may differ by one bf16 step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "golden_data.h"
#include "model/model.h"
#include "model/weight_source.h"
#include "model_test_util.h"

namespace deepinfer {
namespace {

using testing::Without;

using testing::random_tokens;

ModelConfig mtp_config() {
  ModelConfig c = testing::small_config();
  c.num_nextn_predict_layers = 1;
  c.mtp_compress_ratios = {0};
  return c;
}

std::unique_ptr<Model> mtp_model(Numerics numerics, int64_t max_rollback = 4, bool with_mtp = true,
                                 ModelConfig cfg = mtp_config()) {
  auto src = random_weights(cfg, 11, with_mtp);
  return Model::from_source(cfg, *src, {numerics, /*batch_invariant=*/true, max_rollback});
}

Tensor run(const Model& model, SequenceState& state, const std::vector<int32_t>& tokens, bool all = false) {
  SequenceChunk c{&state, tokens, all};
  return model.forward(std::span<const SequenceChunk>(&c, 1));
}

void expect_same_draft(const DraftBlock& a, const DraftBlock& b) {
  ASSERT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t i = 0; i < a.logits.size(); ++i) ASSERT_EQ(a.logits[i], b.logits[i]) << "logit " << i;
  EXPECT_EQ(a.hidden, b.hidden);
}

TEST(Mtp, LoadsWhenTheCheckpointHasIt) {
  auto with = mtp_model(Numerics::kReference, -1);
  EXPECT_EQ(with->drafter_kind(), DrafterKind::kMtp);
  EXPECT_TRUE(with->has_drafter());
  EXPECT_EQ(with->draft_length(), 1);
  EXPECT_EQ(with->rollback_depth(), 1);
  auto state = with->new_state();
  EXPECT_EQ(state->n_mtp_slots, with->config().sliding_window + 2);
  // No mtp.0 tensors (an HF conversion), or num_nextn_predict_layers 0: no drafter.
  EXPECT_EQ(mtp_model(Numerics::kReference, -1, false)->drafter_kind(), DrafterKind::kNone);
  ModelConfig none = mtp_config();
  none.num_nextn_predict_layers = 0;
  none.mtp_compress_ratios.clear();
  EXPECT_EQ(mtp_model(Numerics::kReference, -1, true, none)->drafter_kind(), DrafterKind::kNone);
}

TEST(Mtp, ConfigAndWeightErrorsNameTheCulprit) {
  const ModelConfig cfg = mtp_config();
  Without src(random_weights(cfg, 11, true), "mtp.0.hnorm.weight");
  try {
    Model::from_source(cfg, src, {});
    FAIL() << "a checkpoint without mtp.0.hnorm.weight loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mtp.0.hnorm.weight"), std::string::npos) << e.what();
  }
  ModelConfig compressed = cfg;
  compressed.mtp_compress_ratios = {4};
  auto src2 = random_weights(compressed, 11, true);
  try {
    Model::from_source(compressed, *src2, {});
    FAIL() << "an MTP block with compress ratio 4 loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("compress ratio 4"), std::string::npos) << e.what();
  }
}

// Rollback by construction: a verification chunk of 4 tokens, then truncate to the committed
// length, then draft == the draft of a fresh run of exactly the committed tokens.
TEST(Mtp, DraftAfterTruncateEqualsAFreshRun) {
  for (Numerics numerics : {Numerics::kReference, Numerics::kOfficial}) {
    SCOPED_TRACE(numerics_name(numerics));
    auto model = mtp_model(numerics);
    const int64_t V = model->config().vocab_size;
    const std::vector<int32_t> prompt = random_tokens(20, V, 3);
    const std::vector<int32_t> chunk = random_tokens(5, V, 4);
    for (int64_t keep : {1, 3, 5}) {
      SCOPED_TRACE("kept " + std::to_string(keep) + " of the chunk");
      auto spec = model->new_state();
      run(*model, *spec, prompt);
      run(*model, *spec, chunk, true);
      model->truncate(*spec, 20 + keep);
      std::vector<int32_t> committed = prompt;
      committed.insert(committed.end(), chunk.begin(), chunk.begin() + keep);
      auto fresh = model->new_state();
      run(*model, *fresh, committed);
      for (int64_t n : {1, 3}) {
        expect_same_draft(model->draft(*spec, 7, n), model->draft(*fresh, 7, n));
      }
      // The next forward after the rollback also continues exactly.
      const std::vector<int32_t> next = {7};
      run(*model, *spec, next);
      run(*model, *fresh, next);
      expect_same_draft(model->draft(*spec, 9, 2), model->draft(*fresh, 9, 2));
    }
  }
}

// Prefill in one chunk vs token by token: the MTP keys each forward writes are the same.
TEST(Mtp, DraftsDoNotDependOnChunking) {
  auto model = mtp_model(Numerics::kOfficial);
  const std::vector<int32_t> prompt = random_tokens(30, model->config().vocab_size, 5);
  auto whole = model->new_state();
  run(*model, *whole, prompt);
  auto steps = model->new_state();
  for (size_t i = 0; i < prompt.size(); i += 7) {
    run(*model, *steps, std::vector<int32_t>(prompt.begin() + i, prompt.begin() + std::min(prompt.size(), i + 7)));
  }
  expect_same_draft(model->draft(*whole, 11, 3), model->draft(*steps, 11, 3));
}

// MODEL_SPEC §E.17: the MTP ring never reaches the backbone.
TEST(Mtp, BackboneLogitsNeverDependOnTheDrafter) {
  auto model = mtp_model(Numerics::kOfficial);
  auto plain = mtp_model(Numerics::kOfficial, 4, /*with_mtp=*/false);
  ASSERT_EQ(plain->drafter_kind(), DrafterKind::kNone);
  const int64_t V = model->config().vocab_size;
  const std::vector<int32_t> prompt = random_tokens(12, V, 6);
  auto a = model->new_state(), b = model->new_state(), c = plain->new_state();
  Tensor la = run(*model, *a, prompt, true), lb = run(*model, *b, prompt, true), lc = run(*plain, *c, prompt, true);
  for (int step = 0; step < 24; ++step) {
    ASSERT_EQ(0, std::memcmp(la.f32(), lb.f32(), la.numel() * sizeof(float))) << "step " << step;
    ASSERT_EQ(0, std::memcmp(la.f32(), lc.f32(), la.numel() * sizeof(float))) << "step " << step;
    const float* last = la.f32() + (la.numel() / V - 1) * V;
    const int32_t next = static_cast<int32_t>(std::max_element(last, last + V) - last);
    model->draft(*b, next, 3);  // drafting in between, on one state only
    const std::vector<int32_t> t = {next};
    la = run(*model, *a, t);
    lb = run(*model, *b, t);
    lc = run(*plain, *c, t);
  }
}

constexpr const char* kGolden = "tests/data/golden_mtp";

float max_abs_of(const float* a, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(a[i]));
  return m;
}

class MtpReference : public ::testing::TestWithParam<Numerics> {
 protected:
  void SetUp() override {
    ref_ = SafetensorsFile::open(std::string(kGolden) + "/mtp_reference.safetensors");
    model_ = Model::load(std::string(kGolden) + "/model", {GetParam(), false});
    ids_ = testing::read_ids(*ref_, "input_ids");
  }
  std::vector<float> golden(const std::string& name) const {
    return testing::read_f32(*ref_, name + (GetParam() == Numerics::kOfficial ? "_official" : ""));
  }
  // Per row max|diff| <= bound * max|ref| (bound by numerics, see the top); prints the worst.
  void expect_rows(const std::vector<float>& got, const std::vector<float>& want, int64_t width,
                   const std::string& what) const {
    ASSERT_EQ(got.size(), want.size()) << what;
    const float bound = GetParam() == Numerics::kOfficial ? 1e-3f : 1e-4f;
    float worst = 0;
    for (size_t r = 0; r < want.size() / width; ++r) {
      const float* w = &want[r * width];
      float diff = 0;
      for (int64_t i = 0; i < width; ++i) diff = std::max(diff, std::abs(got[r * width + i] - w[i]));
      worst = std::max(worst, diff / max_abs_of(w, width));
      EXPECT_LE(diff, bound * max_abs_of(w, width)) << what << " row " << r;
    }
    std::printf("%s (%s): worst row max|diff| / max|ref| = %.3g\n", what.c_str(), numerics_name(GetParam()), worst);
  }
  std::vector<int32_t> golden_ids(const std::string& name) const {
    return testing::read_ids(*ref_, name + (GetParam() == Numerics::kOfficial ? "_official" : ""));
  }
  std::shared_ptr<SafetensorsFile> ref_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> ids_;
};

TEST_P(MtpReference, BackboneLogits) {
  ASSERT_EQ(model_->drafter_kind(), DrafterKind::kMtp);
  expect_rows(testing::run_chunked(*model_, ids_, ids_.size()), golden("backbone_logits"),
              model_->config().vocab_size, "backbone logits");
}

TEST_P(MtpReference, DraftsAtEveryPosition) {
  const ModelConfig& cfg = model_->config();
  const int64_t V = cfg.vocab_size, D = cfg.hidden_size, d = cfg.head_dim;
  const int64_t T = static_cast<int64_t>(ids_.size());
  const auto want = golden("mtp_logits"), hidden = golden("mtp_hidden"), keys = golden("mtp_keys");
  std::vector<float> got, got_hidden;
  auto state = model_->new_state();
  for (int64_t p = 0; p + 1 < T; ++p) {
    run(*model_, *state, {ids_[p]});
    const DraftBlock b = model_->draft(*state, ids_[p + 1]);
    ASSERT_EQ(b.tokens.size(), 1u);
    EXPECT_TRUE(b.confidence.empty());
    got.insert(got.end(), b.logits.begin(), b.logits.end());
    got_hidden.insert(got_hidden.end(), b.hidden.begin(), b.hidden.end());
  }
  expect_rows(got, want, V, "MTP draft logits");
  expect_rows(got_hidden, hidden, D, "MTP hidden");
  // The keys the forwards wrote for the positions still in the ring (all but the last, whose
  // next token no forward has seen).
  for (int64_t t = std::max<int64_t>(0, T - state->n_mtp_slots); t < T - 2; ++t) {
    const float* w = &keys[t * d];
    const float* g = &state->mtp_ring[(t % state->n_mtp_slots) * d];
    const bool official = GetParam() == Numerics::kOfficial;
    for (int64_t i = 0; i < d; ++i) {
      const float step = official ? std::abs(w[i]) * 0x1p-7f : 0.0f;  // one bf16 step
      ASSERT_NEAR(g[i], w[i], 1e-4f * max_abs_of(w, d) + step) << "key " << t << " dim " << i;
    }
  }
}

TEST_P(MtpReference, ChainedDrafts) {
  const int64_t V = model_->config().vocab_size;
  const auto positions = testing::read_ids(*ref_, "chain_positions");
  const auto anchors = golden_ids("chain_anchors");
  const auto tokens = golden_ids("chain_tokens");
  const auto logits = golden("chain_logits");
  const int64_t n = static_cast<int64_t>(tokens.size() / positions.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    SCOPED_TRACE("p = " + std::to_string(positions[i]));
    auto state = model_->new_state();
    run(*model_, *state, std::vector<int32_t>(ids_.begin(), ids_.begin() + positions[i] + 1));
    const DraftBlock b = model_->draft(*state, anchors[i], n);
    expect_rows(b.logits, std::vector<float>(&logits[i * n * V], &logits[(i + 1) * n * V]), V,
                "chained draft logits");
    EXPECT_EQ(b.tokens, std::vector<int32_t>(&tokens[i * n], &tokens[(i + 1) * n]));
  }
}

INSTANTIATE_TEST_SUITE_P(Numerics, MtpReference, ::testing::Values(Numerics::kReference, Numerics::kOfficial),
                         [](const ::testing::TestParamInfo<Numerics>& info) {
                           return std::string(numerics_name(info.param));
                         });

TEST(Mtp, BadDraftRequestsFailCleanly) {
  auto model = mtp_model(Numerics::kReference);
  auto fresh = model->new_state();
  EXPECT_THROW(model->draft(*fresh, 5), Error);  // nothing committed yet
  auto state = model->new_state();
  run(*model, *state, {3, 4, 5});
  EXPECT_THROW(model->draft(*state, static_cast<int32_t>(model->config().vocab_size)), Error);
  EXPECT_THROW(model->draft(*state, 5, 0), Error);
  auto plain = mtp_model(Numerics::kReference, 4, false);
  auto other = plain->new_state();
  run(*plain, *other, {3, 4, 5});
  EXPECT_THROW(plain->draft(*other, 5), Error);  // no drafter
  EXPECT_THROW(model->draft(*other, 5), Error);  // a state of another model
}

}  // namespace
}  // namespace deepinfer
