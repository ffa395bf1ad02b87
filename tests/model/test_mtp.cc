// V4's MTP-1 drafter (model/mtp.cc) on a random-weight V4 model (CSA overlap compressor, HCA,
// hash MoE; the MTP block from random_weights(..., with_mtp)):
//  * it loads only when asked for (config num_nextn_predict_layers and mtp.0 tensors), with
//    errors naming the tensor or key otherwise;
//  * rollback: after a verification chunk and Model::truncate, the draft (1 and 3 chained
//    steps) is bitwise that of a fresh run of the committed tokens (batch-invariant mode);
//  * MODEL_SPEC §E.17: the MTP context never changes backbone logits (bitwise: with and
//    without drafts interleaved, and against the same backbone without the MTP module);
//  * bad draft requests fail cleanly.
// The match against the float64 reference (tools/mtp_reference.py) is in the Reference* tests.
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

// A source without one tensor.
class Without : public WeightSource {
 public:
  Without(std::unique_ptr<WeightSource> inner, std::string hidden)
      : inner_(std::move(inner)), hidden_(std::move(hidden)) {}
  Tensor take(const std::string& name, const Shape& shape) override {
    if (name == hidden_) THROW(kNotFound) << "missing tensor '" << name << "'";
    return inner_->take(name, shape);
  }
  bool has(const std::string& name) const override { return name != hidden_ && inner_->has(name); }
  std::vector<std::string> untaken() const override { return {}; }

 private:
  std::unique_ptr<WeightSource> inner_;
  std::string hidden_;
};

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
