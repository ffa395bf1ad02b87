// config.json -> ModelConfig for model_type "deepseek_v4" (both spellings; see
// model_config.h and MODEL_SPEC.md §0, §B), "deepseek_v41" (the published form: the text
// model under `text_config`, quantization_config and image_token_id at the top) and the
// bare "deepseek_v41_text" (MODEL_SPEC §C.1; V4.1 keys in model_config_v41.cc). The layer
// plan (layer_plan.h) is derived and checked here, so a config whose sharing structure is
// inconsistent fails at parse time naming the key.
//
// Precedence and defaults follow transformers 5.17's DeepseekV4Config:
//  * attention schedule: `layer_types` > `compress_ratios` > HF's default
//    (layers 0-1 HCA, then layer l is CSA if l - 2 is odd else HCA; MODEL_SPEC §A.11
//    D12: inverted relative to the official Pro schedule, but only used when a config
//    has neither key). Rates come
//    from `compress_rates` (legacy `compress_rate_csa` / `compress_rate_hca` override),
//    default CSA 4, HCA 128. Entries of `compress_ratios` beyond num_hidden_layers are
//    the drafter stages (mtp_compress_ratios); without them every one of the
//    num_nextn_predict_layers stages gets ratio 0.
//  * MoE schedule: `mlp_layer_types` > `num_hash_layers` > 3 hash layers.
//  * RoPE: nested `rope_parameters` {main, compress} if present, else the flat
//    `rope_scaling` / `rope_parameters` dict applied to compressed layers only, with
//    `rope_theta` for sliding layers and `compress_rope_theta` for compressed ones.
//    rope_dim = head_dim * partial_rotary_factor (`qk_rope_head_dim / head_dim`,
//    default 64/512).
// Deliberate differences from HF: the structural sizes (vocab_size, hidden_size,
// num_hidden_layers, num_attention_heads, head_dim, q_lora_rank, o_groups, o_lora_rank,
// n_routed_experts, num_experts_per_tok, moe_intermediate_size) are required instead of
// defaulting to V4-Flash's; both `layer_types` and `compress_ratios` (or
// `mlp_layer_types` and `num_hash_layers`) may be given only if they agree; YaRN with an
// attention factor other than 1 is rejected as unsupported (V4 never uses one).
//
// Every error is a deepinfer::Error naming the offending key: kInvalidInput for a
// malformed or inconsistent config, kUnsupported for a valid config we do not run
// (other model types, rope or quantisation types, ...). Keys that do not
// affect the math are ignored.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/model_config.h"

namespace deepinfer {

ModelConfig parse_model_config(const nlohmann::json& config);

// Sets the derived parts of a config (traits from model_type, the layer plan) from its
// other fields; the parser calls it, and so must code that builds or edits a ModelConfig
// (Model's and GpuModel's constructors do). Throws like the parser on an inconsistent
// sharing structure.
void complete_model_config(ModelConfig* config);

// Reads `path` (a config.json file, or a directory containing one) and parses it;
// errors are prefixed with the file name.
ModelConfig load_model_config(const std::string& path);

}  // namespace deepinfer
