// The golden checkpoints (tests/data/golden, written by tools/make_goldens.py; their HF
// files were loaded strictly — no missing or unexpected keys — by transformers 5.17) load
// through io: every HF name becomes a native name of MODEL_SPEC §B.5, and the quantised
// model's native FP8/FP4 checkpoint and HF BF16 checkpoint give identical weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "io/config_parser.h"
#include "io/weight_loader.h"
#include "io_test_util.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
const fs::path kGolden = "tests/data/golden";

LoadOptions quiet() {
  LoadOptions o;
  o.progress = LoadOptions::Progress::kOff;
  return o;
}

bool is_native_name(const std::string& name) {
  static const std::regex kNative(
      R"(^((embed|head|norm)\.weight|hc_head_(fn|base|scale))$)"
      R"(|^layers\.\d+\.((attn_norm|ffn_norm)\.weight|hc_(attn|ffn)_(fn|base|scale))$)"
      R"(|^layers\.\d+\.attn\.((wq_a|q_norm|wq_b|wkv|kv_norm|wo_a|wo_b)\.weight|attn_sink)$)"
      R"(|^layers\.\d+\.attn\.(indexer\.)?compressor\.((wkv|wgate|norm)\.weight|ape)$)"
      R"(|^layers\.\d+\.attn\.indexer\.(wq_b|weights_proj)\.weight$)"
      R"(|^layers\.\d+\.ffn\.(gate\.(weight|bias|tid2eid)|shared_experts\.w[123]\.weight)$)"
      R"(|^layers\.\d+\.ffn\.experts\.\d+\.w[123]\.weight$)"
      R"(|^mtp\..+$)");
  return std::regex_match(name, kNative);
}

std::vector<fs::path> golden_models() {
  std::vector<fs::path> out;
  if (!fs::is_directory(kGolden)) return out;
  for (const auto& entry : fs::directory_iterator(kGolden)) {
    if (fs::is_directory(entry.path() / "hf")) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(GoldenCheckpoints, HfNamesAllMapToNativeNames) {
  const auto models = golden_models();
  if (models.empty()) GTEST_SKIP() << "no golden checkpoints under " << kGolden;
  for (const fs::path& model : models) {
    SCOPED_TRACE(model.string());
    const std::string dir = (model / "hf").string();
    const ModelConfig cfg = load_model_config(dir);
    WeightStore store = WeightStore::load(dir, cfg, quiet());
    EXPECT_TRUE(store.loaded_hf_names());
    int64_t experts = 0;
    for (const std::string& name : store.names()) {
      EXPECT_TRUE(is_native_name(name)) << "'" << name << "' is not a native name";
      experts += name.find(".ffn.experts.") != std::string::npos;
    }
    EXPECT_EQ(experts, cfg.num_layers * cfg.n_routed_experts * 3);
    EXPECT_TRUE(store.untaken("mtp.").empty());
  }
}

TEST(GoldenCheckpoints, QuantisedNativeAndHfCheckpointsHoldTheSameWeights) {
  int compared = 0;
  for (const fs::path& model : golden_models()) {
    if (!fs::is_directory(model / "native")) continue;
    SCOPED_TRACE(model.string());
    const ModelConfig hf_cfg = load_model_config((model / "hf").string());
    const ModelConfig native_cfg = load_model_config((model / "native").string());
    EXPECT_EQ(native_cfg.quant.method, "fp8");
    ModelConfig same = native_cfg;
    same.quant = hf_cfg.quant;
    EXPECT_TRUE(same == hf_cfg) << "the two config.json spellings describe different models";

    WeightStore hf = WeightStore::load((model / "hf").string(), hf_cfg, quiet());
    WeightStore native = WeightStore::load((model / "native").string(), native_cfg, quiet());
    EXPECT_FALSE(native.loaded_hf_names());
    for (const std::string& name : hf.names()) {
      ASSERT_TRUE(native.has(name)) << name;
      EXPECT_TRUE(test::same_bytes(hf.peek(name), native.peek(name))) << name;
    }
    for (const std::string& name : native.names()) {
      EXPECT_TRUE(hf.has(name) || name.rfind("mtp.", 0) == 0) << name;
      EXPECT_TRUE(is_native_name(name)) << name;
    }
    ++compared;
  }
  if (compared == 0) GTEST_SKIP() << "no quantised golden checkpoint under " << kGolden;
}

}  // namespace
}  // namespace deepinfer
