// The DSpark drafter of V4-Flash-DSpark / V4-Flash-0731 (model/dspark.cc with the V4 traits:
// taps after the last three blocks, V4 stages, the last stage's hc_head, markov_w1 / markov_w2)
// against the float64 NumPy reference (tools/dspark_v4_reference.py; tests/data/golden_v4_dspark:
// a tiny random V4 + DSpark checkpoint, window-only, and the reference's outputs):
//  * the config's dspark keys make a V4 checkpoint a DSpark one (num_nextn_predict_layers stays
//    1, three stages); a missing drafter tensor fails naming it;
//  * reference numerics: the backbone logits, the context K=V every forward writes for every
//    position, and at three decode positions (p < W, p = W, p >> W) the Markov-corrected draft
//    logits and the hidden states within 1e-4 * max|ref| per row, the drafts equal, the
//    confidences within 1e-4 relative. Official numerics (the V4 window rounding of the backbone,
//    the context and the block keys: FP8 NoPE dims in 64-blocks, bf16 rope dims): a fp32 value
//    next to a rounding boundary lands on the other side of it in a few elements, and over 4
//    layers and 3 stages such flips add up: in the float64 reference itself, a relative noise of
//    3e-6 on the window keys before rounding moves the backbone logits by 5.9e-3 of max|row|
//    (1e-6: 6e-4). So there the bound is 1e-2 per row (measured worst: backbone 3.2e-3, drafts
//    7.0e-3; the wrong readings of the sensitivity table move the drafts by 2e-2 .. 0.56, and the
//    reference-numerics check above is the formula check), confidences within 2e-2, the context
//    keys within the same row bound except NoPE elements one FP8 step off (at most 2% of them),
//    and the drafts equal;
//  * MODEL_SPEC §E.16: the block is bidirectional (another noise token changes slot 0's logits),
//    temperature-0 drafting is deterministic; §E.17: drafting changes no state, the backbone
//    logits are bitwise those of the same checkpoint without the drafter, with or without drafts
//    interleaved; §E.16's tap: with the taps moved by one layer the context keys and the drafts
//    change;
//  * rollback: after a verification chunk and Model::truncate the draft is bitwise that of a
//    fresh run of the committed tokens, and prefill in one chunk or token by token gives the same
//    draft (the context keys of every committed position are written inside the forward).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "golden_data.h"
#include "io/config_parser.h"
#include "model/model.h"
#include "model/weight_source.h"
#include "model_test_util.h"

namespace deepinfer {
namespace {

using testing::Without;

using testing::read_f32;
using testing::read_ids;

constexpr const char* kDir = "tests/data/golden_v4_dspark";
const std::string kModel = std::string(kDir) + "/model";

float max_abs_of(const float* a, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(a[i]));
  return m;
}

Tensor run(const Model& model, SequenceState& state, std::span<const int32_t> tokens, bool all = false) {
  SequenceChunk c{&state, tokens, all};
  return model.forward(std::span<const SequenceChunk>(&c, 1));
}

void expect_same_draft(const DraftBlock& a, const DraftBlock& b) {
  ASSERT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t i = 0; i < a.logits.size(); ++i) ASSERT_EQ(a.logits[i], b.logits[i]) << "logit " << i;
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.confidence, b.confidence);
}

std::unique_ptr<Model> load_with(const ModelConfig& cfg, const ModelOptions& o) {
  auto source = open_checkpoint_weights(kModel, cfg);
  return Model::from_source(cfg, *source, o);
}

TEST(DsparkV4, TheConfigKeysMakeItADsparkCheckpoint) {
  const ModelConfig cfg = load_model_config(kModel);
  EXPECT_EQ(cfg.model_type, "deepseek_v4");
  EXPECT_EQ(cfg.num_nextn_predict_layers, 1);
  EXPECT_EQ(cfg.dspark.n_stages, 3);
  EXPECT_EQ(cfg.dspark.block_size, 5);
  EXPECT_EQ(cfg.dspark.target_layer_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(cfg.traits.dspark_taps_block_output);
  EXPECT_TRUE(cfg.traits.dspark_hc_head);
  EXPECT_FALSE(cfg.traits.single_pass_mhc);
  auto model = Model::load(kModel, {Numerics::kReference, false});
  EXPECT_EQ(model->drafter_kind(), DrafterKind::kDspark);
  EXPECT_EQ(model->draft_length(), 5);
  auto state = model->new_state();
  EXPECT_EQ(state->draft_rings.size(), 3u);
  EXPECT_EQ(state->n_mtp_slots, 0);  // not an MTP-1 checkpoint
}

TEST(DsparkV4, BadDsparkKeysFailNamingTheKey) {
  std::ifstream in(kModel + "/config.json");
  const nlohmann::json good = nlohmann::json::parse(in);
  const std::pair<const char*, nlohmann::json> bad[] = {
      {"dspark_noise_token_id", 64}, {"dspark_target_layer_ids", {1, 2, 4}}, {"dspark_block_size", 0}};
  for (const auto& [key, value] : bad) {
    SCOPED_TRACE(key);
    nlohmann::json j = good;
    j[key] = value;
    try {
      parse_model_config(j);
      FAIL() << key << " = " << value << " parsed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  nlohmann::json none = good;  // without the dspark keys: a plain V4 checkpoint, no drafter
  for (const char* key : {"dspark_block_size", "dspark_noise_token_id", "dspark_target_layer_ids", "dspark_markov_rank"}) {
    none.erase(key);
  }
  EXPECT_EQ(parse_model_config(none).dspark, DsparkConfig{});
}

TEST(DsparkV4, AMissingDrafterTensorFailsNamingIt) {
  const ModelConfig cfg = load_model_config(kModel);
  for (const char* name : {"mtp.2.hc_head_fn", "mtp.2.markov_head.markov_w1.weight",
                           "mtp.2.markov_head.markov_w2.weight", "mtp.1.attn.wkv.weight",
                           "mtp.0.main_proj.weight", "mtp.2.ffn.experts.3.w2.weight",
                           "mtp.2.confidence_head.proj.weight"}) {
    SCOPED_TRACE(name);
    Without src(open_checkpoint_weights(kModel, cfg), name);
    try {
      Model::from_source(cfg, src, {});
      FAIL() << "a checkpoint without " << name << " loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

class DsparkV4Reference : public ::testing::TestWithParam<Numerics> {
 protected:
  void SetUp() override {
    ref_ = SafetensorsFile::open(std::string(kDir) + "/dspark_v4_reference.safetensors");
    model_ = Model::load(kModel, {GetParam(), false});
    ids_ = read_ids(*ref_, "input_ids");
  }
  bool official() const { return GetParam() == Numerics::kOfficial; }
  std::vector<float> golden(const std::string& name) const {
    return read_f32(*ref_, name + (official() ? "_official" : ""));
  }
  std::vector<int32_t> golden_ids(const std::string& name) const {
    return read_ids(*ref_, name + (official() ? "_official" : ""));
  }
  // Per row max|diff| <= bound * max|ref|; prints the worst.
  void expect_rows(const std::vector<float>& got, const std::vector<float>& want, int64_t width,
                   const std::string& what) const {
    ASSERT_EQ(got.size(), want.size()) << what;
    const float bound = official() ? 1e-2f : 1e-4f;
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
  std::unique_ptr<SequenceState> prefix(int64_t p) const {
    auto state = model_->new_state();
    run(*model_, *state, std::span<const int32_t>(ids_.data(), p + 1));
    return state;
  }
  std::shared_ptr<SafetensorsFile> ref_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> ids_;
};

TEST_P(DsparkV4Reference, BackboneLogits) {
  expect_rows(testing::run_chunked(*model_, ids_, ids_.size()), golden("backbone_logits"),
              model_->config().vocab_size, "backbone logits");
}

// The context K=V of every position still in the rings, after a prefill in one chunk and after
// token-by-token decoding (each forward writes every row's keys).
TEST_P(DsparkV4Reference, ContextKeysOfEveryPosition) {
  const ModelConfig& cfg = model_->config();
  const auto ctx = golden("context_kv");  // [stages, T, d]
  const int64_t T = static_cast<int64_t>(ids_.size()), d = cfg.head_dim;
  auto whole = prefix(T - 1);
  auto steps = model_->new_state();
  for (int64_t t = 0; t < T; ++t) run(*model_, *steps, std::span<const int32_t>(&ids_[t], 1));
  int64_t n_flipped = 0, n_elements = 0;
  for (const SequenceState* state : {whole.get(), steps.get()}) {
    const int64_t slots = state->n_draft_slots;
    ASSERT_EQ(state->draft_rings.size(), 3u);
    for (size_t k = 0; k < state->draft_rings.size(); ++k) {
      for (int64_t pos = T - slots; pos < T; ++pos) {
        const float* want = &ctx[(k * T + pos) * d];
        const float* got = &state->draft_rings[k][(pos % slots) * d];
        const float scale = max_abs_of(want, d);
        int64_t flipped = 0;
        for (int64_t i = 0; i < d; ++i) {
          // Official: the row bound of the logits, and one bf16 step.
          const float tol = official() ? 1e-2f * scale + std::abs(want[i]) * 0x1p-7f : 1e-4f * scale;
          const float diff = std::abs(got[i] - want[i]);
          if (diff <= tol) continue;
          // Official: an FP8 code on the other side of a rounding boundary (e4m3 has 3 mantissa
          // bits: a step is at most 1/8 of the value).
          ASSERT_TRUE(official() && i < cfg.d_nope() &&
                      diff <= std::max(std::abs(got[i]), std::abs(want[i])) * 0.125f * 1.001f)
              << "stage " << k << " position " << pos << " dim " << i << ": " << got[i] << " vs " << want[i];
          ++flipped;
        }
        n_flipped += flipped;
        n_elements += d;
      }
    }
  }
  std::printf("context keys (%s): %lld of %lld elements one FP8 step off\n", numerics_name(GetParam()),
              static_cast<long long>(n_flipped), static_cast<long long>(n_elements));
  EXPECT_LE(n_flipped * 50, n_elements);
}

TEST_P(DsparkV4Reference, Drafts) {
  const ModelConfig& cfg = model_->config();
  const int64_t V = cfg.vocab_size, D = cfg.hidden_size, B = cfg.dspark.block_size;
  const auto positions = read_ids(*ref_, "decode_positions");
  const auto anchors = golden_ids("anchor_ids");
  const auto drafts = golden_ids("draft_ids");
  const auto logits = golden("logits"), hidden = golden("hidden"), confidence = golden("confidence");
  std::vector<float> got_logits, got_hidden;
  for (size_t i = 0; i < positions.size(); ++i) {
    SCOPED_TRACE("p = " + std::to_string(positions[i]));
    auto state = prefix(positions[i]);
    const DraftBlock got = model_->draft(*state, anchors[i]);
    ASSERT_EQ(static_cast<int64_t>(got.tokens.size()), B);
    got_logits.insert(got_logits.end(), got.logits.begin(), got.logits.end());
    got_hidden.insert(got_hidden.end(), got.hidden.begin(), got.hidden.end());
    for (int64_t j = 0; j < B; ++j) {
      EXPECT_EQ(got.tokens[j], drafts[i * B + j]) << "draft " << j;
      const float want = confidence[i * B + j];
      EXPECT_NEAR(got.confidence[j], want, (official() ? 2e-2f : 1e-4f) * std::max(1.0f, std::abs(want)))
          << "confidence " << j;
    }
  }
  expect_rows(got_logits, logits, V, "draft logits");
  expect_rows(got_hidden, hidden, D, "draft hidden");
  (void)D;
}

INSTANTIATE_TEST_SUITE_P(Numerics, DsparkV4Reference, ::testing::Values(Numerics::kReference, Numerics::kOfficial),
                         [](const ::testing::TestParamInfo<Numerics>& info) {
                           return std::string(numerics_name(info.param));
                         });

class DsparkV4Model : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ref = SafetensorsFile::open(std::string(kDir) + "/dspark_v4_reference.safetensors");
    tokens_ = read_ids(*ref, "input_ids");
    model_ = Model::load(kModel, {Numerics::kOfficial, /*batch_invariant=*/true});
  }
  std::unique_ptr<SequenceState> prefix(const Model& m, int64_t n) const {
    auto state = m.new_state();
    run(m, *state, std::span<const int32_t>(tokens_.data(), n));
    return state;
  }
  std::vector<int32_t> tokens_;
  std::unique_ptr<Model> model_;
};

TEST_F(DsparkV4Model, BlockIsBidirectionalAndDraftingIsPure) {
  auto state = prefix(*model_, 21);
  const std::vector<std::vector<float>> rings = state->draft_rings;
  const int64_t n_tokens = state->n_tokens;
  const DraftBlock a = model_->draft(*state, 5);
  const DraftBlock b = model_->draft(*state, 5);
  expect_same_draft(a, b);
  EXPECT_EQ(state->draft_rings, rings);
  EXPECT_EQ(state->n_tokens, n_tokens);
  // Another noise token changes the later block slots' embeddings only; slot 0 sees them through
  // the block's bidirectional attention.
  ModelConfig cfg = load_model_config(kModel);
  cfg.dspark.noise_token_id = (cfg.dspark.noise_token_id + 1) % cfg.vocab_size;
  auto other = load_with(cfg, {Numerics::kOfficial, true});
  auto state2 = prefix(*other, 21);
  const DraftBlock n = other->draft(*state2, 5);
  const int64_t V = cfg.vocab_size;
  float diff = 0;
  for (int64_t v = 0; v < V; ++v) diff = std::max(diff, std::abs(n.logits[v] - a.logits[v]));
  EXPECT_GT(diff, 1e-3f * max_abs_of(a.logits.data(), V));
}

TEST_F(DsparkV4Model, TapMovedByOneLayerChangesKeysAndDrafts) {
  ModelConfig cfg = load_model_config(kModel);
  for (int64_t& l : cfg.dspark.target_layer_ids) l -= 1;  // the outputs of the blocks before
  auto moved = load_with(cfg, {Numerics::kOfficial, true});
  auto a = prefix(*model_, 31), b = prefix(*moved, 31);
  const int64_t d = cfg.head_dim, slot = (30 % a->n_draft_slots) * d;
  for (size_t k = 0; k < a->draft_rings.size(); ++k) {
    float key_diff = 0;
    for (int64_t i = 0; i < d; ++i) {
      key_diff = std::max(key_diff, std::abs(a->draft_rings[k][slot + i] - b->draft_rings[k][slot + i]));
    }
    EXPECT_GT(key_diff, 1e-3f * max_abs_of(&a->draft_rings[k][slot], d)) << "stage " << k;
  }
  const DraftBlock x = model_->draft(*a, 5), y = moved->draft(*b, 5);
  float diff = 0;
  for (size_t i = 0; i < x.logits.size(); ++i) diff = std::max(diff, std::abs(x.logits[i] - y.logits[i]));
  EXPECT_GT(diff, 1e-2f * max_abs_of(x.logits.data(), static_cast<int64_t>(x.logits.size())));
  // Over a few positions the tokens differ somewhere.
  int differ = 0;
  for (int64_t n : {4, 9, 20, 31, 40}) {
    auto s1 = prefix(*model_, n), s2 = prefix(*moved, n);
    differ += model_->draft(*s1, tokens_[n % tokens_.size()]).tokens != moved->draft(*s2, tokens_[n % tokens_.size()]).tokens;
  }
  EXPECT_GT(differ, 0);
}

// MODEL_SPEC §E.17, bitwise: the drafter's rings never reach the backbone.
TEST_F(DsparkV4Model, BackboneLogitsBitwiseIndependentOfTheDrafter) {
  for (Numerics numerics : {Numerics::kReference, Numerics::kOfficial}) {
    SCOPED_TRACE(numerics_name(numerics));
    ModelOptions o;
    o.numerics = numerics;
    o.batch_invariant = true;
    auto with = Model::load(kModel, o);
    ModelConfig cfg = load_model_config(kModel);
    cfg.dspark = DsparkConfig{};  // the same checkpoint read without its drafter
    auto without = load_with(cfg, o);
    ASSERT_EQ(with->drafter_kind(), DrafterKind::kDspark);
    ASSERT_EQ(without->drafter_kind(), DrafterKind::kNone);
    const int64_t V = cfg.vocab_size;
    auto a = with->new_state(), b = with->new_state(), c = without->new_state();
    const std::vector<int32_t> prompt(tokens_.begin(), tokens_.begin() + 12);
    Tensor la = run(*with, *a, prompt, true), lb = run(*with, *b, prompt, true), lc = run(*without, *c, prompt, true);
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

// Rollback by construction: a verification chunk of 6 tokens, then truncate to the committed
// length, then draft == the draft of a fresh run of exactly the committed tokens; and a prefill in
// chunks of 7 drafts as one in one chunk.
TEST_F(DsparkV4Model, DraftAfterTruncateAndChunkingEqualAFreshRun) {
  const std::vector<int32_t> prompt(tokens_.begin(), tokens_.begin() + 20);
  const std::vector<int32_t> chunk(tokens_.begin() + 20, tokens_.begin() + 26);
  for (int64_t keep : {1, 3, 5}) {
    SCOPED_TRACE("kept " + std::to_string(keep) + " of the chunk");
    auto spec = model_->new_state();
    run(*model_, *spec, prompt);
    run(*model_, *spec, chunk, true);
    model_->truncate(*spec, 20 + keep);
    auto fresh = prefix(*model_, 20 + keep);
    expect_same_draft(model_->draft(*spec, 7), model_->draft(*fresh, 7));
    const std::vector<int32_t> next = {7};
    run(*model_, *spec, next);
    run(*model_, *fresh, next);
    expect_same_draft(model_->draft(*spec, 9, 3), model_->draft(*fresh, 9, 3));
  }
  auto whole = prefix(*model_, 30);
  auto steps = model_->new_state();
  for (size_t i = 0; i < 30; i += 7) {
    run(*model_, *steps, std::span<const int32_t>(tokens_.data() + i, std::min<size_t>(7, 30 - i)));
  }
  expect_same_draft(model_->draft(*whole, 11), model_->draft(*steps, 11));
}

TEST_F(DsparkV4Model, BadDraftRequestsFailCleanly) {
  auto fresh = model_->new_state();
  EXPECT_THROW(model_->draft(*fresh, 5), Error);  // nothing committed yet
  auto state = prefix(*model_, 4);
  EXPECT_THROW(model_->draft(*state, static_cast<int32_t>(model_->config().vocab_size)), Error);
  EXPECT_THROW(model_->draft(*state, 5, 6), Error);  // more than the block
}

}  // namespace
}  // namespace deepinfer
