#include "model/tiny_model.h"

#include <cstdlib>
#include <filesystem>

#include "base/error.h"
#include "io/config_parser.h"

namespace deepinfer {

ModelConfig tiny_model_config() {
  ModelConfig c;
  c.model_type = "deepseek_v4";
  c.vocab_size = 129280;
  c.hidden_size = 256;
  c.num_layers = 4;
  c.num_heads = 4;
  c.head_dim = 128;
  c.rope_dim = 64;
  c.q_lora_rank = 128;
  c.o_groups = 2;
  c.o_lora_rank = 64;
  c.sliding_window = 128;
  c.index_n_heads = 4;
  c.index_head_dim = 128;
  c.index_topk = 16;
  c.n_routed_experts = 16;
  c.n_experts_per_tok = 2;
  c.moe_intermediate_size = 128;
  c.routed_scaling_factor = 1.5;
  c.swiglu_limit = 10.0;
  c.compress_ratios = {0, 4, 128, 4};
  c.hash_layers = {true, false, false, false};
  c.yarn = {true, 16.0, 65536, 32.0, 1.0};
  c.max_position_embeddings = 65536;
  c.bos_token_id = 0;
  c.eos_token_ids = {1};
  complete_model_config(&c);
  return c;
}

ModelConfig tiny_v41_model_config() {
  ModelConfig c = tiny_model_config();
  c.model_type = "deepseek_v41";
  c.num_layers = 8;
  c.rms_norm_eps = 1e-20;
  c.index_topk = 16;
  c.compress_ratios = {0, 0, 2, 2, 1, 1, 1, 1};
  c.hash_layers.assign(8, false);
  c.kv_source_layer_ids = {2, 4};
  c.index_source_layer_ids = {2, 4, 6};
  c.candidate_source_layer_id = 4;
  c.candidate_topk_blocks = 8;
  c.candidate_block_size = 8;
  c.num_nextn_predict_layers = 0;
  c.mtp_compress_ratios.clear();
  // Engram before layers 1 and 4 with small tables (the prime walk from 4095 gives 16466 and
  // 16582 rows) and the shipped vocabulary's compressed token map.
  c.engram.layer_ids = {1, 4};
  c.engram.num_embeddings = {16466, 16582};
  c.engram.max_ngram_size = 3;
  c.engram.vocab_size = 4096;
  c.engram.n_heads = 2;
  c.engram.head_dim = 64;
  c.engram.pad_token_id = 2;
  c.engram.compressed_vocab_size = 99092;
  complete_model_config(&c);
  return c;
}

bool is_builtin_model(const std::string& name) {
  return name.empty() || name == "tiny" || name == "tiny-v4" || name == "tiny-v4.1";
}

bool selects_builtin_model(const std::string& model) {
  return is_builtin_model(model) && (model.empty() || !std::filesystem::exists(model));
}

bool builtin_model_uses_v41_tokenizer(const std::string& model) {
  return model == "tiny-v4.1" && selects_builtin_model(model);
}

ModelConfig builtin_model_config(const std::string& name) {
  CHECK(is_builtin_model(name)) << "'" << name
                                << "' is not a built-in model (tiny, tiny-v4 or tiny-v4.1)";
  return name == "tiny-v4.1" ? tiny_v41_model_config() : tiny_model_config();
}

std::string builtin_model_label(const std::string& name) {
  return name == "tiny-v4.1" ? "deepinfer-tiny-v4.1" : "deepinfer-tiny";
}

std::string default_model() {
  if (const char* env = std::getenv("DEEPINFER_DEFAULT_MODEL"); env != nullptr && *env != '\0') return env;
  const std::string trained = std::string(DEEPINFER_SOURCE_DIR) + "/models/trained-v41";
  return std::filesystem::exists(trained + "/config.json") ? trained : std::string();
}

std::string model_or_default(const std::string& requested) {
  return requested.empty() ? default_model() : requested;
}

}  // namespace deepinfer
