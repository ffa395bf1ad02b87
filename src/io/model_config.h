// ModelConfig: the DeepSeek-V4 hyper-parameters the engine needs, parsed from a
// checkpoint's config.json in either of its two spellings (MODEL_SPEC.md §0, §B):
//  * HF transformers form: `layer_types`, `compress_rates`, `mlp_layer_types`,
//    nested `rope_parameters` {main, compress};
//  * legacy / official form: `compress_ratios` (one per layer, then one per MTP stage),
//    `num_hash_layers`, `qk_rope_head_dim`, `rope_scaling`, `quantization_config`.
// The struct lives in `io` (not `model`) because the parser produces it and the loader
// needs it to know tensor shapes; `model` only reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer {

struct YarnConfig {
  bool enabled = false;
  double factor = 1.0;
  int64_t original_max_position = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool operator==(const YarnConfig&) const = default;
};

struct QuantConfig {
  std::string method;             // "" (unquantised) or "fp8"
  int64_t weight_block_n = 128;   // weight_block_size[0]
  int64_t weight_block_k = 128;   // weight_block_size[1]
  std::string expert_dtype;       // "" / "fp8" / "fp4"
  bool operator==(const QuantConfig&) const = default;
};

struct ModelConfig {
  std::string model_type = "deepseek_v4";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;         // D
  int64_t num_layers = 0;          // L (backbone only)
  int64_t num_heads = 0;           // H
  int64_t head_dim = 0;            // d (K = V width, one KV head)
  int64_t rope_dim = 0;            // r, trailing dims of each head
  int64_t q_lora_rank = 0;         // R_q
  int64_t o_groups = 0;            // G
  int64_t o_lora_rank = 0;         // R_o
  int64_t sliding_window = 0;      // W

  int64_t hc_mult = 4;             // n_hc
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double rms_norm_eps = 1e-6;

  int64_t index_n_heads = 0;       // H_I
  int64_t index_head_dim = 0;      // d_I
  int64_t index_topk = 0;          // k_I

  int64_t n_routed_experts = 0;    // E
  int64_t n_shared_experts = 1;
  int64_t n_experts_per_tok = 0;   // k_E
  int64_t moe_intermediate_size = 0;
  double routed_scaling_factor = 1.0;
  double swiglu_limit = 0.0;       // 0 = no clamp
  bool norm_topk_prob = true;
  std::string scoring_func = "sqrtsoftplus";

  // Per backbone layer: 0 (sliding only), 4 (CSA: overlapping compressor + indexer),
  // 128 (HCA: all compressed entries). Exactly num_layers entries.
  std::vector<int64_t> compress_ratios;
  // Per backbone layer: true when the MoE routes by tid2eid[token] (hash layer).
  std::vector<bool> hash_layers;
  // Compress ratios of the drafter stages (MTP / DSpark), possibly empty.
  std::vector<int64_t> mtp_compress_ratios;
  int64_t num_nextn_predict_layers = 0;

  double rope_theta = 10000.0;           // ratio-0 layers, no YaRN
  double compress_rope_theta = 160000.0; // ratio>0 layers, with `yarn`
  YarnConfig yarn;

  int64_t max_position_embeddings = 0;
  int64_t bos_token_id = 0;
  std::vector<int64_t> eos_token_ids;

  QuantConfig quant;

  int64_t d_nope() const { return head_dim - rope_dim; }
  bool is_hash_layer(int64_t layer) const { return hash_layers[layer]; }
  int64_t compress_ratio(int64_t layer) const { return compress_ratios[layer]; }
  bool operator==(const ModelConfig&) const = default;
};

}  // namespace deepinfer
