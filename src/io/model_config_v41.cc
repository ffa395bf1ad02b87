#include "io/model_config_v41.h"

namespace deepinfer {
namespace {

void parse_engram(const Keys& k, ModelConfig* c) {
  EngramConfig& e = c->engram;
  e.layer_ids = int_list(k, "engram_layer_ids");
  if (e.layer_ids.empty()) return;
  e.num_embeddings = int_list(k, "engram_num_embeddings");
  CHECK(e.num_embeddings.size() == e.layer_ids.size())
      << "config: 'engram_num_embeddings' has " << e.num_embeddings.size()
      << " entries but 'engram_layer_ids' has " << e.layer_ids.size();
  e.max_ngram_size = k.integer("engram_max_ngram_size");
  e.vocab_size = k.integer("engram_vocab_size");
  e.n_heads = k.integer("engram_n_heads");
  e.head_dim = k.integer("engram_head_dim");
  e.pad_token_id = k.integer("engram_pad_token_id", 2);
  e.compressed_vocab_size = k.integer("engram_compressed_vocab_size");
  CHECK(e.max_ngram_size >= 2) << "config: 'engram_max_ngram_size' must be at least 2, got "
                               << e.max_ngram_size;
  const std::pair<const char*, int64_t> positive[] = {
      {"engram_vocab_size", e.vocab_size},
      {"engram_n_heads", e.n_heads},
      {"engram_head_dim", e.head_dim},
      {"engram_compressed_vocab_size", e.compressed_vocab_size},
  };
  for (const auto& [key, value] : positive) {
    CHECK(value > 0) << "config: '" << key << "' must be positive, got " << value;
  }
  CHECK(e.head_dim % 32 == 0) << "config: 'engram_head_dim' " << e.head_dim
                              << " must be a multiple of 32 (one e8m0 scale per 32 columns)";
  for (int64_t rows : e.num_embeddings) {
    CHECK(rows > 0) << "config: 'engram_num_embeddings' entries must be positive, got " << rows;
  }
  CHECK(e.pad_token_id >= 0 && e.pad_token_id < c->vocab_size)
      << "config: 'engram_pad_token_id' " << e.pad_token_id << " is outside the vocabulary";
}

}  // namespace

void parse_dspark_keys(const Keys& k, ModelConfig* c) {
  DsparkConfig& d = c->dspark;
  if (!k.has("dspark_block_size")) return;
  d.block_size = k.integer("dspark_block_size");
  CHECK(d.block_size >= 1) << "config: 'dspark_block_size' must be positive, got " << d.block_size;
  d.noise_token_id = k.integer("dspark_noise_token_id");
  CHECK(d.noise_token_id >= 0 && d.noise_token_id < c->vocab_size)
      << "config: 'dspark_noise_token_id' " << d.noise_token_id << " is outside the vocabulary";
  d.target_layer_ids = int_list(k, "dspark_target_layer_ids");
  for (int64_t id : d.target_layer_ids) {
    CHECK(id >= 0 && id < c->num_layers) << "config: 'dspark_target_layer_ids' has layer " << id
                                         << ", outside the " << c->num_layers << " layers";
  }
  d.markov_rank = k.integer("dspark_markov_rank", 0);
  d.n_routed_experts = k.integer("dspark_n_routed_experts", 0);
  d.n_experts_per_tok = k.integer(
      "dspark_num_experts_per_tok", k.integer("dspark_n_activated_experts", 0));
  CHECK(d.markov_rank >= 0 && d.n_routed_experts >= 0 && d.n_experts_per_tok >= 0)
      << "config: dspark sizes must be >= 0";
  CHECK(d.n_experts_per_tok <= (d.n_routed_experts ? d.n_routed_experts : c->n_routed_experts))
      << "config: 'dspark_num_experts_per_tok' " << d.n_experts_per_tok
      << " exceeds the drafter's experts";
  d.n_stages = c->is_v41() ? c->num_nextn_predict_layers : kV4DsparkStages;
  CHECK(d.n_stages >= 1) << "config: DSpark needs num_nextn_predict_layers >= 1 (its stages), got "
                         << c->num_nextn_predict_layers;
}

void parse_v41_keys(const Keys& k, const Keys& top, ModelConfig* c) {
  c->kv_source_layer_ids = int_list(k, "kv_source_layer_ids");
  c->index_source_layer_ids = int_list(k, "index_source_layer_ids");
  c->candidate_source_layer_id = k.integer("candidate_source_layer_id", -1);
  c->candidate_topk_blocks = k.integer("candidate_topk_blocks", 0);
  c->candidate_block_size = k.integer("candidate_block_size", 0);
  CHECK(c->candidate_topk_blocks >= 0 && c->candidate_block_size >= 0)
      << "config: 'candidate_topk_blocks' and 'candidate_block_size' must be >= 0";
  c->gate_temp = k.number("gate_temp", 1.0);
  CHECK(c->gate_temp > 0) << "config: 'gate_temp' must be positive, got " << c->gate_temp;
  c->image_token_id = top.integer("image_token_id", k.integer("image_token_id", -1));
  const std::string topk_method = k.string("topk_method", "noaux_tc");
  CHECK_KIND(kUnsupported, topk_method == "noaux_tc")
      << "config: 'topk_method' " << topk_method << " is not supported (expected noaux_tc)";
  parse_engram(k, c);
  parse_dspark_keys(k, c);
}

}  // namespace deepinfer
