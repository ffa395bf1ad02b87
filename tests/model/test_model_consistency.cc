// Self-consistency of the CPU forward (MODEL_SPEC §E): chunked prefill and token-by-token
// decode equal one-shot prefill; batching equals solo runs; causality; batch-invariant
// mode is bitwise batch independent. The HF golden tests (test_golden_*) check the math
// itself against transformers.
#include <gtest/gtest.h>

#include "model/model.h"
#include "model_test_util.h"

namespace deepinfer {
namespace {

using testing::max_abs;
using testing::random_tokens;
using testing::run_chunked;

// Every check runs on a V4 config (sliding, CSA, HCA, hash MoE) and a V4.1 one (ratio-2
// and ratio-1 sources, reuse, reindex, candidates, Engram, single-pass mHC).
class ModelFamily : public ::testing::TestWithParam<std::string> {
 protected:
  ModelConfig config() const {
    return GetParam() == "v41" ? testing::small_v41_config() : testing::small_config();
  }
  std::unique_ptr<Model> make_model(Numerics numerics, bool batch_invariant = false) const {
    auto source = random_weights(config(), 7);
    return Model::from_source(config(), *source, {numerics, batch_invariant});
  }
};

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float rel) {
  ASSERT_EQ(a.size(), b.size());
  const float bound = rel * max_abs(b);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], bound) << "at element " << i;
}

TEST_P(ModelFamily, ChunkedPrefillAndDecodeMatchOneShot) {
  // Default (BLAS) GEMMs: fp32 rounding differs with the chunk shape, so compare within
  // tolerance in reference numerics (official numerics round to FP4/FP8, where a last-bit
  // difference can flip a rounding; the batch-invariant test below covers it exactly).
  auto model = make_model(Numerics::kReference);
  // 300 tokens: window 8 slides, ratio-4 entries exceed topk 4, two ratio-128 entries.
  const auto tokens = random_tokens(300, 300, 1);
  const auto full = run_chunked(*model, tokens, tokens.size());
  for (int64_t chunk : {1, 3, 8, 64, 127}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    expect_close(run_chunked(*model, tokens, chunk), full, 1e-4f);
  }
}

TEST_P(ModelFamily, ChunkingIsBitwiseExactInBatchInvariantMode) {
  for (Numerics numerics : {Numerics::kOfficial, Numerics::kReference}) {
    auto model = make_model(numerics, /*batch_invariant=*/true);
    const auto tokens = random_tokens(300, 300, 1);
    const auto full = run_chunked(*model, tokens, tokens.size());
    for (int64_t chunk : {1, 5, 128}) {
      const auto chunked = run_chunked(*model, tokens, chunk);
      for (size_t i = 0; i < full.size(); ++i) {
        ASSERT_EQ(chunked[i], full[i]) << numerics_name(numerics) << " chunk " << chunk << " element " << i;
      }
    }
  }
}

TEST_P(ModelFamily, BatchOfSequencesEqualsSoloRuns) {
  // Default (BLAS) GEMMs round differently with the batch shape; reference numerics keep
  // that at fp32 level (official numerics can flip an FP8/FP4 rounding, which is why the
  // exact batch check below runs in batch-invariant mode).
  auto model = make_model(Numerics::kReference);
  const auto a = random_tokens(140, 300, 2), b = random_tokens(60, 300, 3);
  const auto solo_a = run_chunked(*model, a, a.size());
  const auto solo_b = run_chunked(*model, b, b.size());
  auto sa = model->new_state(), sb = model->new_state();
  std::vector<SequenceChunk> chunks = {{sa.get(), a, true}, {sb.get(), b, true}};
  Tensor logits = model->forward(chunks);
  const int64_t V = 300;
  std::vector<float> got_a(logits.f32(), logits.f32() + a.size() * V);
  std::vector<float> got_b(logits.f32() + a.size() * V, logits.f32() + logits.numel());
  expect_close(got_a, solo_a, 1e-5f);
  expect_close(got_b, solo_b, 1e-5f);
}

TEST_P(ModelFamily, BatchInvariantModeIsBitwiseBatchIndependent) {
  auto model = make_model(Numerics::kOfficial, /*batch_invariant=*/true);
  const auto a = random_tokens(40, 300, 4);
  const auto solo = run_chunked(*model, a, a.size());
  std::vector<std::vector<int32_t>> others = {random_tokens(17, 300, 5), random_tokens(33, 300, 6)};
  auto s0 = model->new_state(), s1 = model->new_state(), s2 = model->new_state();
  std::vector<SequenceChunk> chunks = {{s1.get(), others[0], true}, {s0.get(), a, true},
                                       {s2.get(), others[1], true}};
  Tensor logits = model->forward(chunks);
  const int64_t V = 300, off = 17 * V;
  for (size_t i = 0; i < solo.size(); ++i) {
    ASSERT_EQ(logits.f32()[off + i], solo[i]) << "element " << i << " differs inside a batch";
  }
}

TEST_P(ModelFamily, CausalityFutureTokensDoNotChangePastLogits) {
  // Batch-invariant GEMMs, so the comparison can be exact (in the default mode a changed
  // token changes which rows share an expert GEMM, and so the fp32 rounding of others).
  auto model = make_model(Numerics::kOfficial, /*batch_invariant=*/true);
  auto a = random_tokens(200, 300, 8);
  const auto base = run_chunked(*model, a, a.size());
  a[150] = (a[150] + 1) % 300;
  const auto changed = run_chunked(*model, a, a.size());
  const int64_t V = 300;
  for (int64_t i = 0; i < 150 * V; ++i) ASSERT_EQ(changed[i], base[i]) << "element " << i;
  float diff = 0.0f;
  for (int64_t i = 150 * V; i < 151 * V; ++i) diff = std::max(diff, std::abs(changed[i] - base[i]));
  EXPECT_GT(diff, 0.0f);
}

TEST_P(ModelFamily, OfficialAndReferenceNumericsStayClose) {
  // Random weights make every discrete choice fragile, so remove them: index_topk above
  // the entry count (the FP4 indexer rounding cannot change which entries are attended)
  // and every expert selected (no routing flips). What remains is the FP8 KV rounding,
  // which must perturb the logits, but only a little.
  ModelConfig cfg = config();
  cfg.index_topk = 1000;
  if (cfg.candidate_topk_blocks > 0) cfg.candidate_topk_blocks = 1000;
  cfg.n_experts_per_tok = cfg.n_routed_experts;
  auto src = random_weights(cfg, 7);
  auto official = Model::from_source(cfg, *src, {Numerics::kOfficial, false});
  auto reference = Model::from_source(cfg, *src, {Numerics::kReference, false});
  const auto a = random_tokens(200, 300, 9);
  const auto lo = run_chunked(*official, a, a.size()), lr = run_chunked(*reference, a, a.size());
  float diff = 0.0f;
  for (size_t i = 0; i < lo.size(); ++i) diff = std::max(diff, std::abs(lo[i] - lr[i]));
  // The QAT roundings perturb the logits, but only slightly. V4.1 keeps compressed entries
  // in FP4 (e2m1: 3 significant bits, steps up to 1/3 of a block's amax / 6), so it moves
  // more than V4's FP8 (measured on these weights: 6.2% of max|logit| against V4's < 5%).
  EXPECT_GT(diff, 0.0f);
  EXPECT_LT(diff, (GetParam() == "v41" ? 0.1f : 0.05f) * max_abs(lr));
}

TEST_P(ModelFamily, BadInputFailsWithoutChangingState) {
  auto model = make_model(Numerics::kOfficial);
  auto state = model->new_state();
  std::vector<int32_t> bad = {1, 2, 300};
  SequenceChunk c{state.get(), bad, false};
  EXPECT_THROW(model->forward(std::span<const SequenceChunk>(&c, 1)), Error);
  EXPECT_EQ(state->n_tokens, 0);
}

TEST_P(ModelFamily, PromptBeyondTheContextLimitIsRejected) {
  ModelConfig cfg = config();
  cfg.max_position_embeddings = 16;
  auto src = random_weights(cfg, 7);
  auto model = Model::from_source(cfg, *src, {});
  auto state = model->new_state();
  const auto tokens = random_tokens(17, 300, 1);
  SequenceChunk c{state.get(), tokens, false};
  try {
    model->forward(std::span<const SequenceChunk>(&c, 1));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context limit of 16"), std::string::npos) << e.what();
  }
  EXPECT_EQ(state->n_tokens, 0);
}

// A source that holds one tensor the model does not know.
class ExtraTensorSource : public WeightSource {
 public:
  explicit ExtraTensorSource(std::unique_ptr<WeightSource> inner) : inner_(std::move(inner)) {}
  Tensor take(const std::string& name, const Shape& shape) override { return inner_->take(name, shape); }
  Tensor take_raw(const std::string& name, const Shape& shape, DType dtype) override {
    return inner_->take_raw(name, shape, dtype);
  }
  std::vector<std::string> untaken() const override { return {"layers.0.attn.unknown.weight"}; }

 private:
  std::unique_ptr<WeightSource> inner_;
};

TEST_P(ModelFamily, UnexpectedTensorIsNamed) {
  ExtraTensorSource src(random_weights(config(), 7));
  try {
    load_model_weights(config(), src);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected tensor 'layers.0.attn.unknown.weight'"),
              std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ModelFamily, ::testing::Values("v4", "v41"));

}  // namespace
}  // namespace deepinfer
