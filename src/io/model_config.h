// ModelConfig: the DeepSeek-V4 hyper-parameters the engine needs, parsed from a
// checkpoint's config.json in either of its two spellings (MODEL_SPEC.md §0, §B):
//  * HF transformers form: `layer_types`, `compress_rates`, `mlp_layer_types`,
//    nested `rope_parameters` {main, compress};
//  * legacy / official form: `compress_ratios` (one per layer, then one per MTP stage),
//    `num_hash_layers`, `qk_rope_head_dim`, `rope_scaling`, `quantization_config`.
// DeepSeek-V4.1 (`model_type: deepseek_v41` with `text_config`, or the bare
// `deepseek_v41_text`) adds cross-layer KV / index sharing, candidate blocks, Engram and
// DSpark keys (MODEL_SPEC §C.1). What differs per family is recorded once, at parse time:
// `traits` (numerics that differ for the whole model) and `plan` (what each layer owns and
// reads, io/layer_plan.h); the forward, the loader and the planners read those, never the
// model_type.
// The struct lives in `io` (not `model`) because the parser produces it and the loader
// needs it to know tensor shapes; `model` only reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/layer_plan.h"

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

// Family-wide numerics (MODEL_SPEC §C.2), set by the parser from model_type.
struct ModelTraits {
  // V4.1: each mHC site collapses with the previous site's `pre` (pre_mix threading, no
  // hc_head); V4: each site uses its own `pre`, then hc_head.
  bool single_pass_mhc = false;
  // V4: unweighted per-head RMS norm of q after wq_b; V4.1 removed it.
  bool per_head_q_norm = true;
  // Official numerics, window K=V: V4 rounds the first d_nope dims to FP8 in 64-blocks and
  // the rope dims to bf16; V4.1 rounds all head_dim dims to FP8 in 32-blocks.
  int64_t window_fp8_block = 64;
  bool window_fp8_all_dims = false;
  // Official numerics, compressed entries: V4 as the window; V4.1 FP4 with e4m3 scales per
  // 16 over all dims.
  bool compressed_fp4 = false;
  // Official numerics, indexer q/k: V4 applies a Hadamard rotation before the FP4
  // round trip; V4.1 does not.
  bool indexer_hadamard = true;
  // V4 compressors add a learned position bias `ape`; V4.1's have none (and ratio 1 has
  // no gate either).
  bool compressor_ape = true;
  // V4.1 routers carry `gate.bias_vl`, the selection bias of image tokens.
  bool router_bias_vl = false;
  // V4 normalises the chosen routing scores always (MODEL_SPEC §A.8, as the GPU router does);
  // V4.1 (and mlx-lm) only when norm_topk_prob and top_k > 1 (§C.9; the DSpark stages of
  // small configs route top-1).
  bool route_normalize_always = true;
  // Added to the sum of the chosen routing scores before normalising (V4.1: 1e-20).
  double route_norm_eps = 0.0;
  // DSpark drafter (MODEL_SPEC §D.1, §D.4, §D.5). V4-DSpark / 0731: the taps are the streams
  // after each target block (its output), the last stage collapses with its own hc_head
  // (`mtp.<last>.hc_head_*`, as V4's final head), the Markov tensors are
  // `markov_head.markov_w1 / markov_w2`. V4.1: the streams entering each target layer, the last
  // stage's FFN-site pre (single-pass mHC), `markov_head.embed / head`. The stages themselves are
  // the family's blocks (single_pass_mhc, per_head_q_norm, window rounding, routing above).
  bool dspark_taps_block_output = true;
  bool dspark_hc_head = true;
  bool dspark_markov_w12_names = true;
  bool operator==(const ModelTraits&) const = default;
};

// Engram n-gram memory (V4.1, MODEL_SPEC §C.8). Disabled when layer_ids is empty.
struct EngramConfig {
  std::vector<int64_t> layer_ids;
  std::vector<int64_t> num_embeddings;  // table rows per engram layer
  int64_t max_ngram_size = 0;           // n-grams of 2..max_ngram_size tokens
  int64_t vocab_size = 0;               // prime search starts at vocab_size - 1
  int64_t n_heads = 0;                  // hash heads per n-gram size
  int64_t head_dim = 0;                 // columns of one table row
  int64_t pad_token_id = 2;
  int64_t compressed_vocab_size = 0;
  bool enabled() const { return !layer_ids.empty(); }
  bool operator==(const EngramConfig&) const = default;
};

// DSpark drafter keys (MODEL_SPEC §D); the stages' tensors are loaded and kept.
struct DsparkConfig {
  int64_t block_size = 0;         // 0: no DSpark keys in the config
  int64_t noise_token_id = -1;
  std::vector<int64_t> target_layer_ids;
  int64_t markov_rank = 0;
  int64_t n_routed_experts = 0;   // 0: the backbone's
  int64_t n_experts_per_tok = 0;  // 0: the backbone's
  // Stages mtp.0 .. mtp.<n_stages-1>. V4.1: num_nextn_predict_layers; V4-DSpark / 0731: 3 (its
  // config keeps num_nextn_predict_layers = 1 although the checkpoint has three stages, §D).
  int64_t n_stages = 0;
  bool operator==(const DsparkConfig&) const = default;
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

  // V4.1 structure (empty / -1 for V4; MODEL_SPEC §C.6-C.7).
  std::vector<int64_t> kv_source_layer_ids;
  std::vector<int64_t> index_source_layer_ids;
  int64_t candidate_source_layer_id = -1;
  int64_t candidate_topk_blocks = 0;
  int64_t candidate_block_size = 0;
  double gate_temp = 1.0;
  int64_t image_token_id = -1;
  EngramConfig engram;
  DsparkConfig dspark;

  ModelTraits traits;
  // One entry per backbone layer, derived from the above by derive_layer_plan().
  std::vector<LayerPlan> plan;

  int64_t d_nope() const { return head_dim - rope_dim; }
  bool is_v41() const { return model_type.rfind("deepseek_v41", 0) == 0; }
  bool is_hash_layer(int64_t layer) const { return hash_layers[layer]; }
  int64_t compress_ratio(int64_t layer) const { return compress_ratios[layer]; }
  bool operator==(const ModelConfig&) const = default;
};

}  // namespace deepinfer
