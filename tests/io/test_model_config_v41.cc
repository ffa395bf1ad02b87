// V4.1 config parsing and the layer plan (MODEL_SPEC §C.1, §C.6): the published
// DeepSeek-V4.1-Flash config.json (text model under text_config) gives the roles of the
// table in §C.6, and inconsistent sharing structures fail naming the key.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/config_parser.h"
#include "io/layer_plan.h"
#include "io_test_util.h"

namespace deepinfer {
namespace {

using nlohmann::json;
using test::expect_error;

// The released config.json of DeepSeek-V4.1-Flash (its text part; the vision tower is
// parsed by nobody and ignored).
json published_v41() {
  json text = {
      {"model_type", "deepseek_v41_text"}, {"vocab_size", 129280}, {"hidden_size", 5120},
      {"moe_intermediate_size", 2304}, {"num_hidden_layers", 40}, {"num_attention_heads", 64},
      {"num_key_value_heads", 1}, {"head_dim", 512}, {"qk_rope_head_dim", 64},
      {"q_lora_rank", 1280}, {"o_lora_rank", 1024}, {"o_groups", 8}, {"hidden_act", "silu"},
      {"swiglu_limit", 10.0}, {"rms_norm_eps", 1e-20}, {"tie_word_embeddings", false},
      {"max_position_embeddings", 1048576}, {"rope_theta", 10000},
      {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 16}, {"beta_fast", 32}, {"beta_slow", 1},
                        {"original_max_position_embeddings", 65536}}},
      {"n_routed_experts", 384}, {"n_shared_experts", 1}, {"num_experts_per_tok", 6},
      {"scoring_func", "sqrtsoftplus"}, {"topk_method", "noaux_tc"}, {"norm_topk_prob", true},
      {"routed_scaling_factor", 1.5}, {"sliding_window", 128}, {"compress_rope_theta", 160000},
      {"kv_source_layer_ids", {2, 8, 14, 20}},
      {"index_source_layer_ids", {2, 8, 14, 20, 24, 28, 32, 36}},
      {"index_n_heads", 32}, {"index_head_dim", 128}, {"index_topk", 512},
      {"candidate_source_layer_id", 20}, {"candidate_topk_blocks", 2048},
      {"candidate_block_size", 8}, {"hc_mult", 4}, {"hc_sinkhorn_iters", 20}, {"hc_eps", 1e-6},
      {"engram_layer_ids", {1, 14}}, {"engram_num_embeddings", {384006168, 384016682}},
      {"engram_max_ngram_size", 4}, {"engram_vocab_size", 16000000}, {"engram_n_heads", 8},
      {"engram_head_dim", 256}, {"engram_pad_token_id", 2}, {"engram_compressed_vocab_size", 99092},
      {"num_nextn_predict_layers", 3}, {"dspark_block_size", 5}, {"dspark_noise_token_id", 128799},
      {"dspark_target_layer_ids", {37, 38, 39}}, {"dspark_markov_rank", 256},
      {"dspark_n_routed_experts", 128}, {"dspark_num_experts_per_tok", 3}};
  json ratios = {0, 0};
  for (int i = 0; i < 18; ++i) ratios.push_back(2);
  for (int i = 0; i < 20; ++i) ratios.push_back(1);
  for (int i = 0; i < 3; ++i) ratios.push_back(0);
  text["compress_ratios"] = ratios;
  return {{"architectures", {"DeepseekV41ForCausalLM"}},
          {"model_type", "deepseek_v41"},
          {"image_token_id", 129264},
          {"quantization_config", {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"},
                                   {"weight_block_size", {32, 32}}, {"scale_fmt", "ue8m0"},
                                   {"expert_dtype", "fp4"}}},
          {"text_config", text},
          {"vision_config", {{"model_type", "deepseek_v41_vision"}, {"num_hidden_layers", 32}}}};
}

TEST(ModelConfigV41, PublishedConfigParses) {
  const ModelConfig c = parse_model_config(published_v41());
  EXPECT_TRUE(c.is_v41());
  EXPECT_EQ(c.num_layers, 40);
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.rms_norm_eps, 1e-20);
  EXPECT_EQ(c.quant.weight_block_n, 32);
  EXPECT_EQ(c.quant.expert_dtype, "fp4");
  EXPECT_EQ(c.mtp_compress_ratios, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(c.image_token_id, 129264);
  EXPECT_EQ(c.engram.num_embeddings, (std::vector<int64_t>{384006168, 384016682}));
  EXPECT_EQ(c.dspark.block_size, 5);
  EXPECT_EQ(c.dspark.n_experts_per_tok, 3);
  EXPECT_EQ(c.dspark.target_layer_ids, (std::vector<int64_t>{37, 38, 39}));
  for (bool hash : c.hash_layers) EXPECT_FALSE(hash);
  EXPECT_TRUE(c.traits.single_pass_mhc);
  EXPECT_FALSE(c.traits.per_head_q_norm);
  EXPECT_TRUE(c.traits.compressed_fp4);
  // The bare text config gives the same model.
  json bare = published_v41()["text_config"];
  bare["quantization_config"] = published_v41()["quantization_config"];
  bare["image_token_id"] = 129264;
  ModelConfig from_bare = parse_model_config(bare);
  EXPECT_EQ(from_bare.model_type, "deepseek_v41_text");
  from_bare.model_type = c.model_type;
  EXPECT_EQ(from_bare, c);
}

// MODEL_SPEC §C.6's table, layer by layer.
TEST(ModelConfigV41, LayerRolesFollowTheSharingTable) {
  const ModelConfig c = parse_model_config(published_v41());
  ASSERT_EQ(c.plan.size(), 40u);
  for (int64_t l = 0; l < 40; ++l) {
    const LayerPlan& p = c.plan[l];
    SCOPED_TRACE("layer " + std::to_string(l));
    const bool kv = l == 2 || l == 8 || l == 14 || l == 20;
    const bool reindex = l == 24 || l == 28 || l == 32 || l == 36;
    std::string role = l < 2 ? "window" : kv ? (l == 20 ? "source+candidates" : "source")
                                             : reindex ? "reindex" : "reuse";
    EXPECT_EQ(layer_role_name(p, l), role);
    EXPECT_EQ(p.engram, l == 1 || l == 14);
    if (l < 2) continue;
    EXPECT_EQ(p.ratio, l < 20 ? 2 : 1);
    const int64_t kv_source = l < 8 ? 2 : l < 14 ? 8 : l < 20 ? 14 : 20;
    EXPECT_EQ(p.kv_from, kv_source);
    EXPECT_EQ(p.owns_compressor, kv);
    EXPECT_EQ(p.owns_index_keys, kv);
    EXPECT_EQ(p.index_keys_from, kv || reindex ? kv_source : -1);
    const int64_t topk = l < 20 ? kv_source : l < 24 ? 20 : 4 * (l / 4);
    EXPECT_EQ(p.topk_from, topk);
    EXPECT_EQ(p.candidate_source, l == 20);
    EXPECT_EQ(p.candidates_from, reindex ? 20 : -1);
  }
}

TEST(ModelConfigV41, InconsistentSharingIsRejectedNamingTheKey) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"reuse layer before any source", [](json& t) { t["kv_source_layer_ids"] = {8, 14, 20}; },
       {"layer 2", "kv_source_layer_ids"}},
      {"source with ratio 0", [](json& t) { t["kv_source_layer_ids"] = {1, 2, 8, 14, 20}; },
       {"kv_source_layer_ids", "layer 1", "ratio is 0"}},
      {"index source with ratio 0", [](json& t) { t["index_source_layer_ids"] = {0, 2, 8}; },
       {"index_source_layer_ids", "layer 0"}},
      {"ratio mismatch with the source", [](json& t) { t["compress_ratios"][5] = 1; },
       {"layer 5", "reads kv source layer 2"}},
      {"id out of range", [](json& t) { t["kv_source_layer_ids"] = {2, 8, 14, 20, 40}; },
       {"kv_source_layer_ids", "40"}},
      {"id listed twice", [](json& t) { t["index_source_layer_ids"] = {2, 2, 8, 14, 20}; },
       {"index_source_layer_ids", "twice"}},
      {"candidate source not an index source", [](json& t) { t["candidate_source_layer_id"] = 21; },
       {"candidate_source_layer_id", "index_source_layer_ids"}},
      {"candidate blocks of size 0", [](json& t) { t["candidate_block_size"] = 0; },
       {"candidate_block_size"}},
      {"first compressed layer not an index source",
       [](json& t) { t["index_source_layer_ids"] = {8, 14, 20, 24, 28, 32, 36}; },
       {"layer 2", "index_source_layer_ids"}},
      {"reindex layer scoring another ratio's keys",
       [](json& t) {
         t["index_source_layer_ids"] = {2, 8, 14, 24, 28, 32, 36};
         t["candidate_source_layer_id"] = -1;
       },
       {"layer 20", "compress ratio"}},
      {"ratio outside 0/1/2", [](json& t) { t["compress_ratios"][3] = 4; }, {"compress ratio 4"}},
      {"engram rows list too short", [](json& t) { t["engram_num_embeddings"] = {384006168}; },
       {"engram_num_embeddings"}},
      {"engram layer out of range", [](json& t) {
         t["engram_layer_ids"] = {1, 40};
       }, {"engram_layer_ids", "40"}},
      {"engram head_dim not a multiple of 32", [](json& t) { t["engram_head_dim"] = 100; },
       {"engram_head_dim"}},
      {"dspark tap out of range", [](json& t) { t["dspark_target_layer_ids"] = {37, 38, 40}; },
       {"dspark_target_layer_ids"}},
      {"hash layers", [](json& t) { t["num_hash_layers"] = 3; }, {"num_hash_layers"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    json config = published_v41();
    c.edit(config["text_config"]);
    const ErrorKind kind = std::string(c.what) == "hash layers" ? ErrorKind::kUnsupported
                                                                : ErrorKind::kInvalidInput;
    expect_error([&] { parse_model_config(config); }, kind, c.needles);
  }
}

}  // namespace
}  // namespace deepinfer
