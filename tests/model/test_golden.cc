// Golden tests: our CPU forward against HF transformers 5.17 DeepseekV4ForCausalLM run
// in float64 (tools/make_goldens.py; tests/data/golden/README.md). Reference numerics.
//  * full prefill: at every position max|ours - ref| <= 1e-4 * max|ref|;
//  * chunked prefill (chunk sizes 1, 7, 64) followed by decode: same bound;
//  * greedy continuation (teacher-forced on the reference's tokens): our argmax equals the
//    reference's at every step whose reference top-1 margin exceeds 1e-4;
//  * the native FP8/FP4 checkpoint and the HF BF16 checkpoint give the same logits;
//  * the discrete choices our reference forward records (model/decision_trace.h), which the
//    GPU golden test replays, are HF's: the indexer picks equal HF's recorded top-k at every
//    position of every CSA layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "io/safetensors.h"
#include "model/model.h"
#include "model_test_util.h"
#include "golden_data.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using testing::golden_models;
using testing::kGoldenDir;
using testing::read_f32;
using testing::read_ids;
using testing::expect_rows_match;

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path dir() const { return fs::path(kGoldenDir) / GetParam(); }
};

TEST_P(GoldenTest, PrefillChunkedAndGreedyMatchHF) {
  auto ref = SafetensorsFile::open((dir() / "reference.safetensors").string());
  const auto tokens = read_ids(*ref, "input_ids");
  const auto logits = read_f32(*ref, "logits");
  std::vector<std::string> variants = {"hf"};
  if (fs::exists(dir() / "native")) variants.push_back("native");
  for (const std::string& variant : variants) {
    SCOPED_TRACE(GetParam() + "/" + variant);
    auto model = Model::load((dir() / variant).string(), {Numerics::kReference, false});
    const int64_t V = model->config().vocab_size;
    expect_rows_match(testing::run_chunked(*model, tokens, tokens.size()), logits, V, "full prefill");
    for (int64_t chunk : {1, 7, 64}) {
      expect_rows_match(testing::run_chunked(*model, tokens, chunk), logits, V,
                        "chunks of " + std::to_string(chunk));
    }
    testing::expect_greedy_matches(*model, read_ids(*ref, "greedy_prompt_ids"),
                                   read_ids(*ref, "greedy_ids"), read_f32(*ref, "greedy_margins"));
  }
}

TEST_P(GoldenTest, NativeQuantizedAndHfCheckpointsAgree) {
  if (!fs::exists(dir() / "native")) GTEST_SKIP() << "no native checkpoint for " << GetParam();
  auto ref = SafetensorsFile::open((dir() / "reference.safetensors").string());
  const auto tokens = read_ids(*ref, "input_ids");
  for (Numerics numerics : {Numerics::kReference, Numerics::kOfficial}) {
    auto hf = Model::load((dir() / "hf").string(), {numerics, true});
    auto native = Model::load((dir() / "native").string(), {numerics, true});
    const auto a = testing::run_chunked(*hf, tokens, tokens.size());
    const auto b = testing::run_chunked(*native, tokens, tokens.size());
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i], b[i]) << numerics_name(numerics) << " element " << i;
    }
  }
}

// HF's indexer picks (reference.safetensors `indexer_topk.layers.N` [S, topk], sorted
// ascending, -1 = no pick) against the picks our reference forward records; the recorded
// experts are complete (every position of every score-routed layer, distinct ascending ids).
TEST_P(GoldenTest, RecordedIndexerPicksAreHFs) {
  auto ref = SafetensorsFile::open((dir() / "reference.safetensors").string());
  const auto tokens = read_ids(*ref, "input_ids");
  auto model = Model::load((dir() / "hf").string(), {Numerics::kReference, false});
  const ModelConfig& cfg = model->config();
  const auto rec = testing::record_forward(*model, tokens);
  const int64_t S = static_cast<int64_t>(tokens.size()), k = cfg.index_topk;
  int n_layers = 0;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const std::string name = "indexer_topk.layers." + std::to_string(l);
    ASSERT_EQ(ref->has(name), cfg.compress_ratio(l) == 4) << name;
    if (!ref->has(name)) continue;
    ++n_layers;
    const auto hf = read_ids(*ref, name);
    ASSERT_EQ(static_cast<int64_t>(hf.size()), S * k) << name;
    ASSERT_EQ(static_cast<int64_t>(rec.trace.picks[l].size()), S * k) << name;
    int n_bad = 0;
    for (int64_t p = 0; p < S; ++p) {
      std::vector<int32_t> want, got;
      for (int64_t j = 0; j < k; ++j) {
        if (hf[p * k + j] >= 0) want.push_back(hf[p * k + j]);
        if (rec.trace.picks[l][p * k + j] >= 0) got.push_back(rec.trace.picks[l][p * k + j]);
      }
      std::sort(want.begin(), want.end());
      EXPECT_EQ(static_cast<int64_t>(want.size()), std::min<int64_t>(k, (p + 1) / 4)) << name << " " << p;
      if (got != want && ++n_bad <= 3) ADD_FAILURE() << name << ": position " << p << " picks differ";
    }
    EXPECT_EQ(n_bad, 0) << name;
  }
  // Experts: every position of every score-routed layer holds top_k distinct ascending ids.
  int n_routed = 0;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    ASSERT_EQ(rec.trace.experts[l].empty(), cfg.is_hash_layer(l)) << "layer " << l;
    if (rec.trace.experts[l].empty()) continue;
    ++n_routed;
    for (int64_t p = 0; p < S; ++p) {
      const int32_t* e = &rec.trace.experts[l][p * cfg.n_experts_per_tok];
      for (int64_t j = 0; j < cfg.n_experts_per_tok; ++j) {
        ASSERT_TRUE(e[j] >= 0 && e[j] < cfg.n_routed_experts && (j == 0 || e[j] > e[j - 1]))
            << "layer " << l << " position " << p << " slot " << j << ": " << e[j];
      }
    }
  }
  EXPECT_GT(n_routed, 0);
  std::printf("%s: indexer picks of %d CSA layers x %lld positions equal HF's; experts of %d "
              "score-routed layers recorded\n", GetParam().c_str(), n_layers,
              static_cast<long long>(S), n_routed);
}

INSTANTIATE_TEST_SUITE_P(HF, GoldenTest, ::testing::ValuesIn(golden_models()));
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenTest);

TEST(Golden, DataIsPresent) { EXPECT_GE(golden_models().size(), 4u) << "tests/data/golden is incomplete"; }

}  // namespace
}  // namespace deepinfer
