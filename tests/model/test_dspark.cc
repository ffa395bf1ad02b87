// The V4.1 DSpark drafter (model/dspark.cc) against the float64 NumPy reference
// (tools/dspark_reference.py: mlx-lm backbone taps, MODEL_SPEC §D for the drafter;
// tests/data/golden_v41/dspark_quant/dspark_reference.safetensors), reference numerics:
//  * the context K=V each forward writes for every position equals the reference's;
//  * at three decode positions (p < W, the first p that drops position 0, p >> W) the
//    Markov-corrected draft logits are within 1e-4 * max|ref| per row, the drafts and the
//    hidden states match, the confidences within 1e-4 relative;
//  * the same in official numerics;
//  * MODEL_SPEC §E.16: the block is bidirectional (another noise token changes slot 0's
//    logits), temperature-0 drafting is deterministic; §E.17: drafting changes no state and
//    the backbone logits equal mlx's with the drafter present, and are bitwise those of the same
//    checkpoint without the drafter, with or without drafts interleaved; §E.16's tap: with the
//    taps moved by one layer the context keys and the drafts change (that acceptance drops needs
//    a trained drafter: tests/spec/test_tap_moved.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "golden_data.h"
#include "io/config_parser.h"
#include "model/model.h"
#include "model/weight_source.h"
#include "model_test_util.h"

namespace deepinfer {
namespace {

using testing::expect_rows_match;
using testing::read_f32;
using testing::read_ids;

constexpr const char* kModel = "tests/data/golden_v41/dspark_quant";

float max_abs_of(const float* a, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(a[i]));
  return m;
}

class Dspark : public ::testing::Test {
 protected:
  void SetUp() override {
    ref_ = SafetensorsFile::open(std::string(kModel) + "/dspark_reference.safetensors");
    model_ = Model::load(std::string(kModel) + "/bf16", {Numerics::kReference, false});
    tokens_ = read_ids(*ref_, "input_ids");
  }
  // A state with positions 0..p committed.
  std::unique_ptr<SequenceState> prefix(int64_t p) const {
    auto state = model_->new_state();
    SequenceChunk c{state.get(), std::span<const int32_t>(tokens_.data(), p + 1), false};
    model_->forward(std::span<const SequenceChunk>(&c, 1));
    return state;
  }
  std::shared_ptr<SafetensorsFile> ref_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> tokens_;
};

TEST_F(Dspark, ContextKeysMatchTheReference) {
  ASSERT_TRUE(model_->has_drafter());
  const ModelConfig& cfg = model_->config();
  const auto ctx = read_f32(*ref_, "context_kv");  // [stages, T, d]
  const int64_t T = static_cast<int64_t>(tokens_.size()), d = cfg.head_dim;
  auto state = prefix(T - 1);
  const int64_t slots = state->n_draft_slots;
  for (size_t k = 0; k < state->draft_rings.size(); ++k) {
    for (int64_t pos = T - slots; pos < T; ++pos) {
      const float* want = &ctx[(k * T + pos) * d];
      const float* got = &state->draft_rings[k][(pos % slots) * d];
      const float bound = 1e-4f * max_abs_of(want, d);
      for (int64_t i = 0; i < d; ++i) {
        ASSERT_NEAR(got[i], want[i], bound) << "stage " << k << " position " << pos << " dim " << i;
      }
    }
  }
}

TEST_F(Dspark, DraftsMatchTheReference) {
  const ModelConfig& cfg = model_->config();
  const int64_t V = cfg.vocab_size, D = cfg.hidden_size, B = cfg.dspark.block_size;
  const auto positions = read_ids(*ref_, "decode_positions");
  const auto anchors = read_ids(*ref_, "anchor_ids");
  const auto logits = read_f32(*ref_, "logits");
  const auto drafts = read_ids(*ref_, "draft_ids");
  const auto confidence = read_f32(*ref_, "confidence");
  const auto hidden = read_f32(*ref_, "hidden");
  for (size_t i = 0; i < positions.size(); ++i) {
    SCOPED_TRACE("p = " + std::to_string(positions[i]));
    auto state = prefix(positions[i]);
    const DraftBlock got = model_->draft(*state, anchors[i]);
    ASSERT_EQ(static_cast<int64_t>(got.tokens.size()), B);
    expect_rows_match(got.logits, std::vector<float>(&logits[i * B * V], &logits[(i + 1) * B * V]), V,
                      "draft logits");
    expect_rows_match(got.hidden, std::vector<float>(&hidden[i * B * D], &hidden[(i + 1) * B * D]), D,
                      "hidden");
    for (int64_t j = 0; j < B; ++j) {
      EXPECT_EQ(got.tokens[j], drafts[i * B + j]) << "draft " << j;
      const float want = confidence[i * B + j];
      EXPECT_NEAR(got.confidence[j], want, 1e-4f * std::max(1.0f, std::abs(want))) << "confidence " << j;
    }
  }
}

// Official numerics (QAT roundings in the backbone and FP8 context / block keys on both
// sides): the same bound per row (measured 7.9e-7 of max|ref|) and the same drafts.
TEST_F(Dspark, OfficialDraftsMatchTheReference) {
  auto model = Model::load(std::string(kModel) + "/bf16", {Numerics::kOfficial, false});
  const ModelConfig& cfg = model->config();
  const int64_t V = cfg.vocab_size, B = cfg.dspark.block_size;
  const auto positions = read_ids(*ref_, "decode_positions");
  const auto anchors = read_ids(*ref_, "anchor_ids_official");
  const auto logits = read_f32(*ref_, "logits_official");
  const auto drafts = read_ids(*ref_, "draft_ids_official");
  float worst = 0;
  for (size_t i = 0; i < positions.size(); ++i) {
    auto state = model->new_state();
    SequenceChunk c{state.get(), std::span<const int32_t>(tokens_.data(), positions[i] + 1), false};
    model->forward(std::span<const SequenceChunk>(&c, 1));
    const DraftBlock got = model->draft(*state, anchors[i]);
    for (int64_t j = 0; j < B; ++j) {
      const float* want = &logits[(i * B + j) * V];
      float diff = 0;
      for (int64_t v = 0; v < V; ++v) diff = std::max(diff, std::abs(got.logits[j * V + v] - want[v]));
      worst = std::max(worst, diff / max_abs_of(want, V));
      EXPECT_EQ(got.tokens[j], drafts[i * B + j]) << "p " << positions[i] << " draft " << j;
    }
  }
  std::printf("official drafts: worst row max|diff| / max|ref| = %.3g\n", worst);
  EXPECT_LT(worst, 1e-4f);
}

TEST_F(Dspark, BlockIsBidirectionalAndDraftingIsPure) {
  auto state = prefix(20);
  const std::vector<std::vector<float>> rings = state->draft_rings;
  const int64_t n_tokens = state->n_tokens;
  const DraftBlock a = model_->draft(*state, 5);
  const DraftBlock b = model_->draft(*state, 5);
  EXPECT_EQ(a.logits, b.logits);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(state->draft_rings, rings);
  EXPECT_EQ(state->n_tokens, n_tokens);
  // Another noise token changes the later block slots' embeddings only; slot 0 sees them
  // through the block's bidirectional attention.
  ModelConfig cfg = load_model_config(std::string(kModel) + "/bf16");
  cfg.dspark.noise_token_id = (cfg.dspark.noise_token_id + 1) % cfg.vocab_size;
  auto source = open_checkpoint_weights(std::string(kModel) + "/bf16", cfg);
  auto other = Model::from_source(cfg, *source, {Numerics::kReference, false});
  auto state2 = other->new_state();
  SequenceChunk c{state2.get(), std::span<const int32_t>(tokens_.data(), 21), false};
  other->forward(std::span<const SequenceChunk>(&c, 1));
  const DraftBlock n = other->draft(*state2, 5);
  const int64_t V = cfg.vocab_size;
  float diff = 0;
  for (int64_t v = 0; v < V; ++v) diff = std::max(diff, std::abs(n.logits[v] - a.logits[v]));
  EXPECT_GT(diff, 1e-3f * max_abs_of(a.logits.data(), V));
}

TEST_F(Dspark, BackboneLogitsUnchangedByTheDrafter) {
  auto r = SafetensorsFile::open(std::string(kModel) + "/reference.safetensors");
  expect_rows_match(testing::run_chunked(*model_, tokens_, tokens_.size()), read_f32(*r, "logits_reference"),
                    model_->config().vocab_size, "backbone with drafter");
}

TEST_F(Dspark, TapMovedByOneLayerChangesTheDrafts) {
  ModelConfig cfg = load_model_config(std::string(kModel) + "/bf16");
  for (int64_t& l : cfg.dspark.target_layer_ids) l -= 1;  // streams entering the layer before
  ASSERT_GE(*std::min_element(cfg.dspark.target_layer_ids.begin(), cfg.dspark.target_layer_ids.end()), 0);
  auto source = open_checkpoint_weights(std::string(kModel) + "/bf16", cfg);
  auto moved = Model::from_source(cfg, *source, {Numerics::kReference, false});
  auto a = prefix(20);
  auto b = moved->new_state();
  SequenceChunk c{b.get(), std::span<const int32_t>(tokens_.data(), 21), false};
  moved->forward(std::span<const SequenceChunk>(&c, 1));
  const int64_t d = cfg.head_dim, slot = (20 % a->n_draft_slots) * d;
  float key_diff = 0;
  for (int64_t i = 0; i < d; ++i) {
    key_diff = std::max(key_diff, std::abs(a->draft_rings[0][slot + i] - b->draft_rings[0][slot + i]));
  }
  EXPECT_GT(key_diff, 1e-3f * max_abs_of(&a->draft_rings[0][slot], d));
  const DraftBlock x = model_->draft(*a, 5), y = moved->draft(*b, 5);
  const int64_t V = cfg.vocab_size;
  float diff = 0;
  for (size_t i = 0; i < x.logits.size(); ++i) diff = std::max(diff, std::abs(x.logits[i] - y.logits[i]));
  EXPECT_GT(diff, 1e-2f * max_abs_of(x.logits.data(), V));
}

// MODEL_SPEC §E.17, bitwise: the drafter's rings never reach the backbone.
TEST_F(Dspark, BackboneLogitsBitwiseIndependentOfTheDrafter) {
  for (Numerics numerics : {Numerics::kReference, Numerics::kOfficial}) {
    SCOPED_TRACE(numerics_name(numerics));
    const ModelOptions o{numerics, /*batch_invariant=*/true};
    auto with = Model::load(std::string(kModel) + "/bf16", o);
    ModelConfig cfg = load_model_config(std::string(kModel) + "/bf16");
    cfg.dspark = DsparkConfig{};  // the same checkpoint read without its drafter
    auto source = open_checkpoint_weights(std::string(kModel) + "/bf16", cfg);
    auto without = Model::from_source(cfg, *source, o);
    ASSERT_TRUE(with->has_drafter());
    ASSERT_FALSE(without->has_drafter());
    const int64_t V = cfg.vocab_size;
    auto a = with->new_state(), b = with->new_state(), c = without->new_state();
    const std::vector<int32_t> prompt(tokens_.begin(), tokens_.begin() + 12);
    auto run = [](const Model& m, SequenceState& st, std::span<const int32_t> t) {
      SequenceChunk ch{&st, t, true};
      return m.forward(std::span<const SequenceChunk>(&ch, 1));
    };
    Tensor la = run(*with, *a, prompt), lb = run(*with, *b, prompt), lc = run(*without, *c, prompt);
    for (int step = 0; step < 20; ++step) {
      ASSERT_EQ(0, std::memcmp(la.f32(), lb.f32(), la.numel() * sizeof(float))) << "step " << step;
      ASSERT_EQ(0, std::memcmp(la.f32(), lc.f32(), la.numel() * sizeof(float))) << "step " << step;
      const float* last = la.f32() + (la.numel() / V - 1) * V;
      const int32_t next = static_cast<int32_t>(std::max_element(last, last + V) - last);
      with->draft(*b, next);  // drafting in between, on one state only
      la = run(*with, *a, std::span<const int32_t>(&next, 1));
      lb = run(*with, *b, std::span<const int32_t>(&next, 1));
      lc = run(*without, *c, std::span<const int32_t>(&next, 1));
    }
  }
}

TEST_F(Dspark, BadDraftRequestsFailCleanly) {
  auto fresh = model_->new_state();
  EXPECT_THROW(model_->draft(*fresh, 5), Error);  // nothing committed yet
  auto state = prefix(3);
  EXPECT_THROW(model_->draft(*state, static_cast<int32_t>(model_->config().vocab_size)), Error);
}

}  // namespace
}  // namespace deepinfer
