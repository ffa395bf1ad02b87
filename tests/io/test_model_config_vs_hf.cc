// parse_model_config against transformers' DeepseekV4Config on recorded cases
// (tests/io/data/hf_config_cases.json, written by interop/make_hf_config_cases.py with
// transformers 5.17): each config as written and as transformers saves it.
#include <gtest/gtest.h>

#include <fstream>

#include "io/config_parser.h"

namespace deepinfer {
namespace {

nlohmann::json load_cases() {
  std::ifstream in("tests/io/data/hf_config_cases.json");
  EXPECT_TRUE(in.good()) << "run from the repository root (ctest does)";
  return nlohmann::json::parse(in);
}

TEST(ModelConfigVsHf, AgreesWithTransformersOnEveryRecordedCase) {
  const nlohmann::json cases = load_cases()["cases"];
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const nlohmann::json& e = c["expected"];
    ModelConfig m;
    ASSERT_NO_THROW(m = parse_model_config(c["config"]));
    EXPECT_EQ(m.vocab_size, e["vocab_size"].get<int64_t>());
    EXPECT_EQ(m.hidden_size, e["hidden_size"].get<int64_t>());
    EXPECT_EQ(m.num_layers, e["num_layers"].get<int64_t>());
    EXPECT_EQ(m.num_heads, e["num_heads"].get<int64_t>());
    EXPECT_EQ(m.head_dim, e["head_dim"].get<int64_t>());
    EXPECT_EQ(m.rope_dim, e["rope_dim"].get<int64_t>());
    EXPECT_EQ(m.q_lora_rank, e["q_lora_rank"].get<int64_t>());
    EXPECT_EQ(m.o_groups, e["o_groups"].get<int64_t>());
    EXPECT_EQ(m.o_lora_rank, e["o_lora_rank"].get<int64_t>());
    EXPECT_EQ(m.sliding_window, e["sliding_window"].get<int64_t>());
    EXPECT_EQ(m.hc_mult, e["hc_mult"].get<int64_t>());
    EXPECT_EQ(m.hc_sinkhorn_iters, e["hc_sinkhorn_iters"].get<int64_t>());
    EXPECT_EQ(m.hc_eps, e["hc_eps"].get<double>());
    EXPECT_EQ(m.rms_norm_eps, e["rms_norm_eps"].get<double>());
    EXPECT_EQ(m.index_n_heads, e["index_n_heads"].get<int64_t>());
    EXPECT_EQ(m.index_head_dim, e["index_head_dim"].get<int64_t>());
    EXPECT_EQ(m.index_topk, e["index_topk"].get<int64_t>());
    EXPECT_EQ(m.n_routed_experts, e["n_routed_experts"].get<int64_t>());
    EXPECT_EQ(m.n_experts_per_tok, e["n_experts_per_tok"].get<int64_t>());
    EXPECT_EQ(m.moe_intermediate_size, e["moe_intermediate_size"].get<int64_t>());
    EXPECT_EQ(m.routed_scaling_factor, e["routed_scaling_factor"].get<double>());
    EXPECT_EQ(m.swiglu_limit, e["swiglu_limit"].get<double>());
    EXPECT_EQ(m.max_position_embeddings, e["max_position_embeddings"].get<int64_t>());
    EXPECT_EQ(m.num_nextn_predict_layers, e["num_nextn_predict_layers"].get<int64_t>());
    EXPECT_EQ(m.compress_ratios, e["compress_ratios"].get<std::vector<int64_t>>());
    EXPECT_EQ(m.hash_layers, e["hash_layers"].get<std::vector<bool>>());
    EXPECT_EQ(m.rope_theta, e["rope_theta"].get<double>());
    EXPECT_EQ(m.compress_rope_theta, e["compress_rope_theta"].get<double>());
    EXPECT_EQ(m.eos_token_ids, e["eos_token_ids"].get<std::vector<int64_t>>());
    EXPECT_EQ(m.yarn.enabled, e["yarn"].get<bool>());
    if (m.yarn.enabled) {
      EXPECT_EQ(m.yarn.factor, e["yarn_factor"].get<double>());
      EXPECT_EQ(m.yarn.original_max_position, e["yarn_original_max_position"].get<int64_t>());
      EXPECT_EQ(m.yarn.beta_fast, e["yarn_beta_fast"].get<double>());
      EXPECT_EQ(m.yarn.beta_slow, e["yarn_beta_slow"].get<double>());
      EXPECT_EQ(e["yarn_attention_factor"].get<double>(), 1.0);  // V4 never scales (mscale 1)
    }
  }
}

}  // namespace
}  // namespace deepinfer
