#include "model/tiny_model.h"

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
  return c;
}

}  // namespace deepinfer
