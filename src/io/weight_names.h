// Tensor names: DeepSeek's native checkpoint names and transformers 5.17's names for
// the same DeepSeek-V4 parameters (MODEL_SPEC.md §B.5, checked against
// modeling_deepseek_v4.py). The engine works with native names only; the loader maps
// HF checkpoints on the way in.
//
//   native                                      transformers
//   embed.weight / norm.weight / head.weight    model.embed_tokens.weight / model.norm.weight / lm_head.weight
//   hc_head_{fn,base,scale}                     model.hc_head.hc_{fn,base,scale}
//   layers.N.attn_norm / ffn_norm (.weight)     model.layers.N.input_layernorm / post_attention_layernorm
//   layers.N.hc_{attn,ffn}_{fn,base,scale}      model.layers.N.{attn,ffn}_hc.{fn,base,scale}
//   layers.N.attn.{wq_a,q_norm,wq_b}            ...self_attn.{q_a_proj,q_a_norm,q_b_proj}
//   layers.N.attn.{wkv,kv_norm,wo_a,wo_b}       ...self_attn.{kv_proj,kv_norm,o_a_proj,o_b_proj}
//   layers.N.attn.attn_sink                     ...self_attn.sinks
//   layers.N.attn.compressor.{wkv,wgate,norm}   ...self_attn.compressor.{kv_proj,gate_proj,kv_norm}
//   layers.N.attn.compressor.ape                ...self_attn.compressor.position_bias
//   layers.N.attn.indexer.compressor.X          ...self_attn.compressor.indexer.{same as above}
//   layers.N.attn.indexer.wq_b                  ...self_attn.compressor.indexer.q_b_proj
//   layers.N.attn.indexer.weights_proj          ...self_attn.compressor.indexer.scorer.weights_proj
//   layers.N.ffn.gate.{weight,bias,tid2eid}     ...mlp.gate.{weight,e_score_correction_bias,tid2eid}
//   layers.N.ffn.shared_experts.{w1,w3,w2}      ...mlp.shared_experts.{gate_proj,up_proj,down_proj}
//   layers.N.ffn.experts.E.{w1,w3}.weight       ...mlp.experts.gate_up_proj [E, 2I, D], rows [w1; w3]
//   layers.N.ffn.experts.E.w2.weight            ...mlp.experts.down_proj [E, D, I]
//   X.scale                                     X.weight_scale_inv (block-FP8 scales)
//   mtp.*                                       mtp.* (unchanged; transformers ignores them)
// Names outside the table pass through (with `model.` stripped), so an unknown tensor is
// reported under a recognisable name; so a checkpoint written by transformers'
// save_pretrained (native names with `model.`, and `layers.N.attn.norm.weight` for the
// attention's kv_norm) loads too.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace deepinfer {

// True if any name is an HF name (starts with "model." or "lm_head.").
bool uses_hf_names(const std::vector<std::string>& names);

// Native name of one HF tensor name (not for fused experts: see below).
std::string hf_to_native(const std::string& hf_name);
// HF name of one native name (the inverse of hf_to_native on the table above; per-expert
// names have no HF counterpart and pass through).
std::string native_to_hf(const std::string& native_name);

// "model.layers.N.mlp.experts.gate_up_proj" / ".down_proj": sets *layer and *gate_up.
bool is_hf_fused_experts(const std::string& hf_name, int64_t* layer, bool* gate_up);

// "layers.N.ffn.experts.E.<w>.weight" for w in {w1, w2, w3}.
std::string native_expert_name(int64_t layer, int64_t expert, const std::string& w);

// Splits a fused HF expert tensor (any dtype, 3-D) into native per-expert tensors that
// share its storage: gate_up [E, 2I, D] -> w1 = rows [0, I), w3 = rows [I, 2I) of each
// expert; down [E, D, I] -> w2. Throws naming `hf_name` on a malformed shape.
std::map<std::string, Tensor> split_hf_experts(const std::string& hf_name, const Tensor& fused);

}  // namespace deepinfer
