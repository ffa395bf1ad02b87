// The CLI's device and tokenizer choices (cli/engine_setup.h) on every branch, with the GPU
// count given (so the CUDA defaults are checked on a machine without one).
#include "cli/engine_setup.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/model_loading.h"
#include "recipe/tokenizer.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

const std::string kRoot = DEEPINFER_SOURCE_DIR;

EngineArgs args_for(const std::string& model_dir, bool dummy = false) {
  EngineArgs a;
  a.model_dir = model_dir;
  a.dummy_weights = dummy;
  return a;
}

// A directory holding only `config` (copied), like bench/configs/v4-flash-4l.
std::string config_only_dir(const std::string& name, const std::string& config) {
  const fs::path dir = fs::temp_directory_path() / ("deepinfer-test-engine-setup-" + name);
  fs::create_directories(dir);
  fs::copy_file(config, dir / "config.json", fs::copy_options::overwrite_existing);
  return dir.string();
}

TEST(ResolveDevice, NoGpuKeepsTheCpuAndItsFormats) {
  EngineArgs a = args_for("");
  const std::string why = resolve_device({}, 0, a);
  EXPECT_EQ(a.device, "cpu");
  EXPECT_EQ(a.weight_format, "fp32");
  EXPECT_FALSE(a.cuda_graphs);
  EXPECT_EQ(a.kv_cache_dtype, "auto");
  EXPECT_NE(why.find("auto: "), std::string::npos) << why;
}

TEST(ResolveDevice, AGpuGetsTheFastFormats) {
  EngineArgs a = args_for("");  // the built-in tiny V4 model
  const std::string why = resolve_device({}, 2, a);
  EXPECT_EQ(a.device, "cuda");
  EXPECT_EQ(a.weight_format, "fp8");
  EXPECT_TRUE(a.cuda_graphs);
  EXPECT_EQ(a.kv_cache_dtype, "auto");  // the runner: fp8 with official numerics
  EXPECT_NE(why.find("2 CUDA devices found"), std::string::npos) << why;
}

TEST(ResolveDevice, Fp32AndEagerOnlyOnRequest) {
  DeviceRequest r;
  r.weight_format = "fp32";
  r.cuda_graphs = 0;
  r.kv_cache_dtype = "bf16";
  EngineArgs a = args_for("");
  resolve_device(r, 1, a);
  EXPECT_EQ(a.device, "cuda");
  EXPECT_EQ(a.weight_format, "fp32");
  EXPECT_FALSE(a.cuda_graphs);
  EXPECT_EQ(a.kv_cache_dtype, "bf16");
}

TEST(ResolveDevice, V41UsesCudaWithFp32Weights) {
  // V4.1 runs on the CUDA backend with fp32 weights only so far (issue 14 phase 1): auto
  // picks cuda when a GPU is there, but never FP8 weights.
  EngineArgs a = args_for("tiny-v4.1");
  const std::string why = resolve_device({}, 1, a);
  EXPECT_EQ(a.device, "cuda") << why;
  EXPECT_EQ(a.weight_format, "fp32");
  EXPECT_TRUE(a.cuda_graphs);
  // A config-only V4.1 directory is recognised from its config.json.
  EngineArgs dir = args_for(config_only_dir("v41", kRoot + "/models/trained-v41/config.json"), true);
  resolve_device({}, 1, dir);
  EXPECT_EQ(dir.device, "cuda");
  EXPECT_EQ(dir.weight_format, "fp32");
  // No GPU: cpu, as for V4.
  EngineArgs none = args_for("tiny-v4.1");
  resolve_device({}, 0, none);
  EXPECT_EQ(none.device, "cpu");
  // An explicit --weight-format fp8 is passed on (the runner refuses it for V4.1 by name).
  DeviceRequest fp8;
  fp8.device = "cuda";
  fp8.weight_format = "fp8";
  EngineArgs b = args_for("tiny-v4.1");
  resolve_device(fp8, 1, b);
  EXPECT_EQ(b.device, "cuda");
  EXPECT_EQ(b.weight_format, "fp8");
  // V4 on the same request gets FP8 weights by default.
  EngineArgs v4 = args_for("tiny");
  resolve_device({}, 1, v4);
  EXPECT_EQ(v4.weight_format, "fp8");
}

TEST(ResolveDevice, ExplicitCpuWins) {
  DeviceRequest r;
  r.device = "cpu";
  EngineArgs a = args_for("");
  EXPECT_EQ(resolve_device(r, 1, a), "--device cpu");
  EXPECT_EQ(a.device, "cpu");
  EXPECT_EQ(a.weight_format, "fp32");
  EXPECT_FALSE(a.cuda_graphs);
}

TEST(ResolveDevice, SaysWhetherTheCheckpointStoresFp8) {
  EngineArgs quantised = args_for(kRoot + "/tests/data/golden/mixed_quant/native");
  EXPECT_NE(resolve_device({}, 1, quantised).find("fp8 as the checkpoint stores them"), std::string::npos);
  EngineArgs plain = args_for(kRoot + "/tests/data/golden/swa/hf");
  EXPECT_NE(resolve_device({}, 1, plain).find("quantised to block FP8 at load"), std::string::npos);
  EngineArgs dummy = args_for(kRoot + "/bench/configs/v4-flash-4l", true);
  EXPECT_NE(resolve_device({}, 1, dummy).find("quantised to block FP8 at load"), std::string::npos);
}

TEST(ResolveDevice, RefusesUnknownValues) {
  DeviceRequest r;
  r.device = "tpu";
  EngineArgs a;
  EXPECT_THROW(resolve_device(r, 1, a), Error);
  r = {};
  r.weight_format = "int4";
  EXPECT_THROW(resolve_device(r, 1, a), Error);
}

TEST(ResolveTokenizer, ConfigOnlyV4DirectoryGetsTheBuiltInTokenizer) {
  EngineArgs a = args_for(kRoot + "/bench/configs/v4-flash-4l", true);
  const TokenizerChoice c = resolve_tokenizer("", a);
  EXPECT_TRUE(c.found);
  EXPECT_EQ(a.tokenizer_path, tiny_tokenizer_path());
  EXPECT_NE(c.note.find("built-in V4 tokenizer"), std::string::npos) << c.note;
}

TEST(ResolveTokenizer, ConfigOnlyV41DirectoryGetsTheV41Spellings) {
  EngineArgs a = args_for(config_only_dir("v41-tok", kRoot + "/models/trained-v41/config.json"), true);
  const TokenizerChoice c = resolve_tokenizer("", a);
  ASSERT_TRUE(c.found);
  ASSERT_NE(a.tokenizer_path, tiny_tokenizer_path());
  // The file given to the engine is the V4 tokenizer with V4.1's two renamed added tokens
  // (recipe/v41_tokenizer.h), read here as plain JSON.
  std::ifstream in(a.tokenizer_path);
  const nlohmann::json v41 = nlohmann::json::parse(in);
  std::ifstream in4(tiny_tokenizer_path());
  const nlohmann::json v4 = nlohmann::json::parse(in4);
  std::map<int64_t, std::string> renamed;
  ASSERT_EQ(v41["added_tokens"].size(), v4["added_tokens"].size());
  for (size_t i = 0; i < v41["added_tokens"].size(); ++i) {
    if (v41["added_tokens"][i]["content"] != v4["added_tokens"][i]["content"]) {
      renamed[v41["added_tokens"][i]["id"].get<int64_t>()] = v41["added_tokens"][i]["content"];
    }
  }
  const std::map<int64_t, std::string> expected = {{128799, "<｜System｜>"}, {129264, "<｜deepseek_image｜>"}};
  EXPECT_EQ(renamed, expected);
  const recipe::Tokenizer t = recipe::Tokenizer::from_file(a.tokenizer_path);
  EXPECT_EQ(t.token_to_id("<｜System｜>"), 128799);
}

TEST(ResolveTokenizer, OwnGivenOrNone) {
  EngineArgs own = args_for(kRoot + "/models/trained-v41");
  EXPECT_EQ(resolve_tokenizer("", own).note, kRoot + "/models/trained-v41/tokenizer.json");
  EXPECT_TRUE(own.tokenizer_path.empty());  // the engine's own default finds it
  EngineArgs none = args_for(kRoot + "/tests/data/golden/swa/hf");
  EXPECT_FALSE(resolve_tokenizer("", none).found);
  EXPECT_TRUE(none.tokenizer_path.empty());
  EngineArgs given = args_for(kRoot + "/tests/data/golden/swa/hf");
  EXPECT_TRUE(resolve_tokenizer(tiny_tokenizer_path(), given).found);
  EXPECT_EQ(given.tokenizer_path, tiny_tokenizer_path());
  EngineArgs missing;
  EXPECT_THROW(resolve_tokenizer("/nonexistent/tokenizer.json", missing), Error);
}

}  // namespace
}  // namespace deepinfer
