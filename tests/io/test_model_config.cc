#include <gtest/gtest.h>

#include "io/config_parser.h"
#include "io_test_util.h"

namespace deepinfer {
namespace {

using nlohmann::json;
using test::expect_error;

// V4-Flash config.json as released (legacy form; MODEL_SPEC §0, research/deepinfer.md §4.1).
json v4_flash_legacy() {
  json ratios = {0, 0};
  for (int i = 0; i < 20; ++i) {
    ratios.push_back(4);
    ratios.push_back(128);
  }
  ratios.push_back(4);
  ratios.push_back(0);
  return {
      {"architectures", {"DeepseekV4ForCausalLM"}},
      {"model_type", "deepseek_v4"},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"head_dim", 512},
      {"qk_rope_head_dim", 64},
      {"num_attention_heads", 64},
      {"num_key_value_heads", 1},
      {"q_lora_rank", 1024},
      {"o_lora_rank", 1024},
      {"o_groups", 8},
      {"sliding_window", 128},
      {"index_n_heads", 64},
      {"index_head_dim", 128},
      {"index_topk", 512},
      {"compress_rope_theta", 160000},
      {"compress_ratios", ratios},
      {"hc_mult", 4},
      {"hc_sinkhorn_iters", 20},
      {"hc_eps", 1e-6},
      {"hidden_size", 4096},
      {"num_hidden_layers", 43},
      {"vocab_size", 129280},
      {"max_position_embeddings", 1048576},
      {"hidden_act", "silu"},
      {"swiglu_limit", 10.0},
      {"n_routed_experts", 256},
      {"n_shared_experts", 1},
      {"num_experts_per_tok", 6},
      {"moe_intermediate_size", 2048},
      {"num_hash_layers", 3},
      {"scoring_func", "sqrtsoftplus"},
      {"topk_method", "noaux_tc"},
      {"norm_topk_prob", true},
      {"routed_scaling_factor", 1.5},
      {"num_nextn_predict_layers", 1},
      {"quantization_config",
       {{"quant_method", "fp8"},
        {"fmt", "e4m3"},
        {"scale_fmt", "ue8m0"},
        {"activation_scheme", "dynamic"},
        {"weight_block_size", {128, 128}}}},
      {"expert_dtype", "fp4"},
      {"rope_scaling",
       {{"type", "yarn"},
        {"factor", 16},
        {"original_max_position_embeddings", 65536},
        {"beta_fast", 32},
        {"beta_slow", 1}}},
      {"rope_theta", 10000},
      {"rms_norm_eps", 1e-6},
      {"initializer_range", 0.02},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.57.1"},
      {"use_cache", true},
      {"bos_token_id", 0},
      {"eos_token_id", 1},
  };
}

TEST(ModelConfig, ParsesTheV4FlashLegacyConfig) {
  const ModelConfig c = parse_model_config(v4_flash_legacy());
  EXPECT_EQ(c.num_layers, 43);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.d_nope(), 448);
  ASSERT_EQ(c.compress_ratios.size(), 43u);
  EXPECT_EQ(c.compress_ratio(0), 0);
  EXPECT_EQ(c.compress_ratio(1), 0);
  for (int l = 2; l < 42; ++l) EXPECT_EQ(c.compress_ratio(l), l % 2 == 0 ? 4 : 128) << l;
  EXPECT_EQ(c.compress_ratio(42), 4);
  EXPECT_EQ(c.mtp_compress_ratios, std::vector<int64_t>{0});
  ASSERT_EQ(c.hash_layers.size(), 43u);
  for (int l = 0; l < 43; ++l) EXPECT_EQ(c.is_hash_layer(l), l < 3) << l;
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.compress_rope_theta, 160000.0);
  EXPECT_TRUE(c.yarn.enabled);
  EXPECT_EQ(c.yarn.factor, 16.0);
  EXPECT_EQ(c.yarn.original_max_position, 65536);
  EXPECT_EQ(c.yarn.beta_fast, 32.0);
  EXPECT_EQ(c.yarn.beta_slow, 1.0);
  EXPECT_EQ(c.quant.method, "fp8");
  EXPECT_EQ(c.quant.weight_block_n, 128);
  EXPECT_EQ(c.quant.weight_block_k, 128);
  EXPECT_EQ(c.quant.expert_dtype, "fp4");
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.n_experts_per_tok, 6);
  EXPECT_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
}

// A small model in the legacy spelling and the same model as transformers 5.17 writes it.
json tiny_legacy() {
  return {{"model_type", "deepseek_v4"},
          {"vocab_size", 512},
          {"hidden_size", 64},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 4},
          {"head_dim", 32},
          {"qk_rope_head_dim", 8},
          {"q_lora_rank", 48},
          {"o_groups", 2},
          {"o_lora_rank", 16},
          {"sliding_window", 8},
          {"index_n_heads", 2},
          {"index_head_dim", 16},
          {"index_topk", 3},
          {"n_routed_experts", 8},
          {"num_experts_per_tok", 2},
          {"moe_intermediate_size", 24},
          {"num_hash_layers", 1},
          {"compress_ratios", {0, 4, 128, 4, 0}},
          {"num_nextn_predict_layers", 1},
          {"rope_theta", 10000.0},
          {"compress_rope_theta", 160000.0},
          {"rope_scaling",
           {{"rope_type", "yarn"},
            {"factor", 4.0},
            {"original_max_position_embeddings", 64},
            {"beta_fast", 32},
            {"beta_slow", 1}}},
          {"max_position_embeddings", 256},
          {"routed_scaling_factor", 1.5},
          {"swiglu_limit", 10.0},
          {"eos_token_id", {1, 2}}};
}

json tiny_hf() {
  json c = tiny_legacy();
  for (const char* key : {"qk_rope_head_dim", "num_hash_layers", "compress_ratios", "rope_theta",
                          "compress_rope_theta", "rope_scaling"}) {
    c.erase(key);
  }
  c["layer_types"] = {"sliding_attention", "compressed_sparse_attention",
                      "heavily_compressed_attention", "compressed_sparse_attention"};
  c["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}};
  c["mlp_layer_types"] = {"hash_moe", "moe", "moe", "moe"};
  c["partial_rotary_factor"] = 0.25;
  c["rope_theta"] = 10000.0;
  c["compress_rope_theta"] = 160000.0;
  c["rope_parameters"] = {
      {"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.25}}},
      {"compress",
       {{"rope_type", "yarn"},
        {"rope_theta", 160000.0},
        {"partial_rotary_factor", 0.25},
        {"factor", 4.0},
        {"original_max_position_embeddings", 64},
        {"beta_fast", 32},
        {"beta_slow", 1},
        {"attention_factor", 1.0}}}};
  return c;
}

TEST(ModelConfig, HfAndLegacyFormsOfOneModelAgree) {
  const ModelConfig legacy = parse_model_config(tiny_legacy());
  const ModelConfig hf = parse_model_config(tiny_hf());
  EXPECT_TRUE(legacy == hf);
  EXPECT_EQ(hf.compress_ratios, (std::vector<int64_t>{0, 4, 128, 4}));
  EXPECT_EQ(hf.hash_layers, (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(hf.mtp_compress_ratios, std::vector<int64_t>{0});
  EXPECT_EQ(hf.rope_dim, 8);
  EXPECT_TRUE(hf.yarn.enabled);
  EXPECT_EQ(hf.yarn.factor, 4.0);
  EXPECT_EQ(hf.yarn.original_max_position, 64);
  EXPECT_EQ(hf.eos_token_ids, (std::vector<int64_t>{1, 2}));
}

TEST(ModelConfig, HfDefaultsApplyToMissingKeys) {
  json c = tiny_hf();
  for (const char* key : {"layer_types", "mlp_layer_types", "compress_rates", "rope_parameters",
                          "partial_rotary_factor", "rope_theta", "compress_rope_theta",
                          "swiglu_limit", "routed_scaling_factor", "eos_token_id",
                          "num_nextn_predict_layers"}) {
    c.erase(key);
  }
  c["num_hidden_layers"] = 6;
  c["head_dim"] = 128;  // default rotary fraction 64/512 -> 16 rope dims
  c["index_head_dim"] = 32;
  const ModelConfig m = parse_model_config(c);
  // transformers' default schedule (MODEL_SPEC §A.11 D12): HCA, HCA, then HCA/CSA alternating.
  EXPECT_EQ(m.compress_ratios, (std::vector<int64_t>{128, 128, 128, 4, 128, 4}));
  EXPECT_EQ(m.hash_layers, (std::vector<bool>{true, true, true, false, false, false}));
  EXPECT_EQ(m.mtp_compress_ratios, std::vector<int64_t>{0});
  EXPECT_EQ(m.rope_dim, 16);
  EXPECT_EQ(m.rope_theta, 10000.0);
  EXPECT_EQ(m.compress_rope_theta, 160000.0);
  EXPECT_FALSE(m.yarn.enabled);
  EXPECT_EQ(m.swiglu_limit, 10.0);
  EXPECT_EQ(m.routed_scaling_factor, 1.5);
  EXPECT_EQ(m.eos_token_ids, std::vector<int64_t>{1});
  EXPECT_EQ(m.quant.method, "");
}

TEST(ModelConfig, DrafterStagesComeFromExtraCompressRatios) {
  json c = tiny_legacy();
  c["compress_ratios"] = {0, 4, 128, 4, 0, 0, 0};
  c["num_nextn_predict_layers"] = 3;
  EXPECT_EQ(parse_model_config(c).mtp_compress_ratios, (std::vector<int64_t>{0, 0, 0}));
}

TEST(ModelConfig, LoadsFromADirectoryAndNamesTheFileInErrors) {
  test::TempDir dir;
  test::write_bytes(dir.file("config.json"), tiny_legacy().dump(2));
  EXPECT_EQ(load_model_config(dir.str()).hidden_size, 64);
  json bad = tiny_legacy();
  bad.erase("hidden_size");
  test::write_bytes(dir.file("config.json"), bad.dump());
  expect_error([&] { load_model_config(dir.str()); }, ErrorKind::kInvalidInput,
               {"config.json", "'hidden_size'", "missing"});
  test::write_bytes(dir.file("config.json"), "{\"model_type\": ");
  expect_error([&] { load_model_config(dir.file("config.json")); }, ErrorKind::kInvalidInput,
               {"config.json", "not valid JSON"});
  expect_error([&] { load_model_config(dir.file("absent.json")); }, ErrorKind::kNotFound,
               {"absent.json"});
}

struct BadConfig {
  const char* label;
  std::function<void(json&)> edit;
  ErrorKind kind;
  std::vector<std::string> needles;
};

TEST(ModelConfig, BadConfigsGetErrorsNamingTheKey) {
  const std::vector<BadConfig> cases = {
      {"layer_types too short", [](json& c) { c["layer_types"].erase(3); },
       ErrorKind::kInvalidInput, {"'layer_types'", "3 entries", "num_hidden_layers is 4"}},
      {"unknown layer type", [](json& c) { c["layer_types"][1] = "dense_attention"; },
       ErrorKind::kInvalidInput, {"'layer_types'", "dense_attention"}},
      {"mlp_layer_types length", [](json& c) { c["mlp_layer_types"].push_back("moe"); },
       ErrorKind::kInvalidInput, {"'mlp_layer_types'", "5 entries"}},
      {"unknown mlp type", [](json& c) { c["mlp_layer_types"][0] = "dense"; },
       ErrorKind::kInvalidInput, {"'mlp_layer_types'", "dense"}},
      {"missing hidden_size", [](json& c) { c.erase("hidden_size"); }, ErrorKind::kInvalidInput,
       {"'hidden_size'", "missing"}},
      {"hidden_size not a number", [](json& c) { c["hidden_size"] = "big"; },
       ErrorKind::kInvalidInput, {"'hidden_size'", "integer"}},
      {"zero heads", [](json& c) { c["num_attention_heads"] = 0; }, ErrorKind::kInvalidInput,
       {"'num_attention_heads'", "positive"}},
      {"deepseek_v41 without text_config", [](json& c) { c["model_type"] = "deepseek_v41"; },
       ErrorKind::kInvalidInput, {"deepseek_v41", "text_config"}},
      {"unknown model_type", [](json& c) { c["model_type"] = "deepseek_v5"; }, ErrorKind::kUnsupported,
       {"deepseek_v5", "not supported"}},
      {"other model", [](json& c) { c["model_type"] = "llama"; }, ErrorKind::kUnsupported,
       {"'model_type'", "llama"}},
      {"missing model_type", [](json& c) { c.erase("model_type"); }, ErrorKind::kInvalidInput,
       {"'model_type'"}},
      {"compress rate 8", [](json& c) { c["compress_rates"]["heavily_compressed_attention"] = 8; },
       ErrorKind::kInvalidInput, {"compress ratio 8", "layer 2"}},
      {"unknown compress_rates key", [](json& c) { c["compress_rates"]["dense"] = 1; },
       ErrorKind::kInvalidInput, {"'compress_rates'", "dense"}},
      {"schedules disagree", [](json& c) { c["compress_ratios"] = {0, 4, 4, 4}; },
       ErrorKind::kInvalidInput, {"'layer_types'", "'compress_ratios'", "disagree"}},
      {"hash schedules disagree", [](json& c) { c["num_hash_layers"] = 2; },
       ErrorKind::kInvalidInput, {"'mlp_layer_types'", "'num_hash_layers'"}},
      {"top-k above experts", [](json& c) { c["num_experts_per_tok"] = 9; },
       ErrorKind::kInvalidInput, {"'num_experts_per_tok'", "'n_routed_experts'"}},
      {"softmax scoring", [](json& c) { c["scoring_func"] = "softmax"; }, ErrorKind::kUnsupported,
       {"'scoring_func'", "softmax"}},
      {"rope dims fill the head",
       [](json& c) {
         c["rope_parameters"]["main"]["partial_rotary_factor"] = 1.0;
         c["rope_parameters"]["compress"]["partial_rotary_factor"] = 1.0;
       },
       ErrorKind::kInvalidInput, {"'head_dim'", "rope dims"}},
      {"rope dims differ",
       [](json& c) { c["rope_parameters"]["compress"]["partial_rotary_factor"] = 0.5; },
       ErrorKind::kUnsupported, {"rope_parameters.compress.partial_rotary_factor"}},
      {"o_groups do not divide heads", [](json& c) { c["o_groups"] = 3; },
       ErrorKind::kInvalidInput, {"'o_groups'", "'num_attention_heads'"}},
      {"unknown quant method",
       [](json& c) { c["quantization_config"] = {{"quant_method", "gptq"}}; },
       ErrorKind::kUnsupported, {"quantization_config.quant_method", "gptq"}},
      {"bad block size",
       [](json& c) {
         c["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128}}};
       },
       ErrorKind::kInvalidInput, {"quantization_config.weight_block_size"}},
      {"unknown expert dtype", [](json& c) { c["expert_dtype"] = "int4"; },
       ErrorKind::kUnsupported, {"'expert_dtype'", "int4"}},
      {"main rope yarn",
       [](json& c) { c["rope_parameters"]["main"]["rope_type"] = "yarn"; },
       ErrorKind::kUnsupported, {"rope_parameters.main.rope_type"}},
      {"mscale", [](json& c) { c["rope_parameters"]["compress"].erase("attention_factor"); },
       ErrorKind::kUnsupported, {"rope_parameters.compress.attention_factor"}},
      {"yarn without factor", [](json& c) { c["rope_parameters"]["compress"].erase("factor"); },
       ErrorKind::kInvalidInput, {"rope_parameters.compress.factor"}},
      {"eos outside vocab", [](json& c) { c["eos_token_id"] = 600; }, ErrorKind::kInvalidInput,
       {"'eos_token_id'", "600"}},
      {"two KV heads", [](json& c) { c["num_key_value_heads"] = 2; }, ErrorKind::kUnsupported,
       {"'num_key_value_heads'"}},
      // Found with fuzz/fuzz_model_config (hand-made inputs): counts that made the parser
      // allocate per layer until it ran out of memory (or loop for minutes).
      {"absurd layer count",
       [](json& c) {
         c.erase("layer_types");
         c.erase("mlp_layer_types");
         c["num_hidden_layers"] = 4000000000LL;
       },
       ErrorKind::kInvalidInput, {"'num_hidden_layers'", "4000000000", "larger than"}},
      {"absurd drafter count", [](json& c) { c["num_nextn_predict_layers"] = 1000000000000000LL; },
       ErrorKind::kInvalidInput, {"'num_nextn_predict_layers'", "larger than"}},
  };
  for (const BadConfig& bad : cases) {
    SCOPED_TRACE(bad.label);
    json c = tiny_hf();
    bad.edit(c);
    expect_error([&] { parse_model_config(c); }, bad.kind, bad.needles);
  }
}

TEST(ModelConfig, LegacyRatioChecks) {
  json c = tiny_legacy();
  c["compress_ratios"] = {0, 4, 128};
  expect_error([&] { parse_model_config(c); }, ErrorKind::kInvalidInput,
               {"'compress_ratios'", "3 entries"});
  c["compress_ratios"] = {0, 4, 64, 4};
  expect_error([&] { parse_model_config(c); }, ErrorKind::kInvalidInput,
               {"compress ratio 64", "layer 2", "'compress_ratios'"});
  c = tiny_legacy();
  c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  expect_error([&] { parse_model_config(c); }, ErrorKind::kUnsupported,
               {"'rope_scaling'", "linear"});
}

TEST(ModelConfig, UnimportantUnknownKeysAreIgnored) {
  json c = tiny_hf();
  c["some_future_logging_flag"] = true;
  c["initializer_range"] = 0.02;
  c["router_aux_loss_coef"] = 0.001;
  EXPECT_TRUE(parse_model_config(c) == parse_model_config(tiny_hf()));
}

}  // namespace
}  // namespace deepinfer
