#include "io/weight_names.h"

#include <cstdlib>
#include <utility>

namespace deepinfer {
namespace {

constexpr const char* kHfPrefix = "model.";

// Linear / norm modules: the leaf `weight` keeps its name, `weight_scale_inv` becomes
// `scale`. Pairs are (HF module path, native module path) below `layers.N.`.
const std::pair<const char*, const char*> kLayerModules[] = {
    {"input_layernorm", "attn_norm"},
    {"post_attention_layernorm", "ffn_norm"},
    {"self_attn.q_a_proj", "attn.wq_a"},
    {"self_attn.q_a_norm", "attn.q_norm"},
    {"self_attn.q_b_proj", "attn.wq_b"},
    {"self_attn.kv_proj", "attn.wkv"},
    {"self_attn.kv_norm", "attn.kv_norm"},
    {"self_attn.o_a_proj", "attn.wo_a"},
    {"self_attn.o_b_proj", "attn.wo_b"},
    {"self_attn.compressor.kv_proj", "attn.compressor.wkv"},
    {"self_attn.compressor.gate_proj", "attn.compressor.wgate"},
    {"self_attn.compressor.kv_norm", "attn.compressor.norm"},
    {"self_attn.compressor.indexer.kv_proj", "attn.indexer.compressor.wkv"},
    {"self_attn.compressor.indexer.gate_proj", "attn.indexer.compressor.wgate"},
    {"self_attn.compressor.indexer.kv_norm", "attn.indexer.compressor.norm"},
    {"self_attn.compressor.indexer.q_b_proj", "attn.indexer.wq_b"},
    {"self_attn.compressor.indexer.scorer.weights_proj", "attn.indexer.weights_proj"},
    {"mlp.gate", "ffn.gate"},
    {"mlp.shared_experts.gate_proj", "ffn.shared_experts.w1"},
    {"mlp.shared_experts.up_proj", "ffn.shared_experts.w3"},
    {"mlp.shared_experts.down_proj", "ffn.shared_experts.w2"},
};

// Bare parameters (full names below `layers.N.`).
const std::pair<const char*, const char*> kLayerParams[] = {
    {"self_attn.sinks", "attn.attn_sink"},
    {"self_attn.compressor.position_bias", "attn.compressor.ape"},
    {"self_attn.compressor.indexer.position_bias", "attn.indexer.compressor.ape"},
    {"mlp.gate.e_score_correction_bias", "ffn.gate.bias"},
    {"mlp.gate.tid2eid", "ffn.gate.tid2eid"},
    {"attn_hc.fn", "hc_attn_fn"},
    {"attn_hc.base", "hc_attn_base"},
    {"attn_hc.scale", "hc_attn_scale"},
    {"ffn_hc.fn", "hc_ffn_fn"},
    {"ffn_hc.base", "hc_ffn_base"},
    {"ffn_hc.scale", "hc_ffn_scale"},
};

// Top-level names (HF name without the `model.` prefix except lm_head).
const std::pair<const char*, const char*> kGlobalParams[] = {
    {"model.embed_tokens.weight", "embed.weight"},
    {"model.norm.weight", "norm.weight"},
    {"lm_head.weight", "head.weight"},
    {"lm_head.weight_scale_inv", "head.scale"},
    {"model.hc_head.hc_fn", "hc_head_fn"},
    {"model.hc_head.hc_base", "hc_head_base"},
    {"model.hc_head.hc_scale", "hc_head_scale"},
};

// transformers 5.17's save_pretrained writes V4 checkpoints under native names with the
// `model.` prefix, except that it reverses its load-time rename `.norm.` -> `.kv_norm.` on
// the attention's kv_norm too (`attn.norm.weight`). One-way: native names never use it.
const std::pair<const char*, const char*> kSavedLayerNames[] = {
    {"attn.norm.weight", "attn.kv_norm.weight"},
};

struct Tables {
  std::map<std::string, std::string> layer_hf_to_native, layer_native_to_hf;
  std::map<std::string, std::string> global_hf_to_native, global_native_to_hf;
};

const Tables& tables() {
  static const Tables t = [] {
    Tables t;
    auto add_layer = [&t](const std::string& hf, const std::string& native) {
      t.layer_hf_to_native[hf] = native;
      t.layer_native_to_hf[native] = hf;
    };
    for (const auto& [hf, native] : kLayerModules) {
      add_layer(std::string(hf) + ".weight", std::string(native) + ".weight");
      add_layer(std::string(hf) + ".weight_scale_inv", std::string(native) + ".scale");
    }
    for (const auto& [hf, native] : kLayerParams) add_layer(hf, native);
    for (const auto& [saved, native] : kSavedLayerNames) t.layer_hf_to_native[saved] = native;
    for (const auto& [hf, native] : kGlobalParams) {
      t.global_hf_to_native[hf] = native;
      t.global_native_to_hf[native] = hf;
    }
    return t;
  }();
  return t;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Splits "layers.N.rest" into N and rest.
bool split_layer(const std::string& name, std::string* index, std::string* rest) {
  if (!starts_with(name, "layers.")) return false;
  const size_t dot = name.find('.', 7);
  if (dot == std::string::npos || dot == 7) return false;
  for (size_t i = 7; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  *index = name.substr(7, dot - 7);
  *rest = name.substr(dot + 1);
  return true;
}

}  // namespace

bool uses_hf_names(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    if (starts_with(name, kHfPrefix) || starts_with(name, "lm_head.")) return true;
  }
  return false;
}

std::string hf_to_native(const std::string& hf_name) {
  const Tables& t = tables();
  if (auto it = t.global_hf_to_native.find(hf_name); it != t.global_hf_to_native.end()) {
    return it->second;
  }
  const std::string name =
      starts_with(hf_name, kHfPrefix) ? hf_name.substr(std::string(kHfPrefix).size()) : hf_name;
  std::string index, rest;
  if (split_layer(name, &index, &rest)) {
    if (auto it = t.layer_hf_to_native.find(rest); it != t.layer_hf_to_native.end()) {
      return "layers." + index + "." + it->second;
    }
  }
  return name;
}

std::string native_to_hf(const std::string& native_name) {
  const Tables& t = tables();
  if (auto it = t.global_native_to_hf.find(native_name); it != t.global_native_to_hf.end()) {
    return it->second;
  }
  std::string index, rest;
  if (split_layer(native_name, &index, &rest)) {
    if (auto it = t.layer_native_to_hf.find(rest); it != t.layer_native_to_hf.end()) {
      return std::string(kHfPrefix) + "layers." + index + "." + it->second;
    }
  }
  return native_name;
}

bool is_hf_fused_experts(const std::string& hf_name, int64_t* layer, bool* gate_up) {
  const std::string name =
      starts_with(hf_name, kHfPrefix) ? hf_name.substr(std::string(kHfPrefix).size()) : hf_name;
  std::string index, rest;
  if (!starts_with(hf_name, kHfPrefix) || !split_layer(name, &index, &rest)) return false;
  if (rest != "mlp.experts.gate_up_proj" && rest != "mlp.experts.down_proj") return false;
  *layer = std::strtoll(index.c_str(), nullptr, 10);
  *gate_up = rest == "mlp.experts.gate_up_proj";
  return true;
}

std::string native_expert_name(int64_t layer, int64_t expert, const std::string& w) {
  return "layers." + std::to_string(layer) + ".ffn.experts." + std::to_string(expert) + "." + w +
         ".weight";
}

std::map<std::string, Tensor> split_hf_experts(const std::string& hf_name, const Tensor& fused) {
  int64_t layer = 0;
  bool gate_up = false;
  CHECK(is_hf_fused_experts(hf_name, &layer, &gate_up))
      << "tensor '" << hf_name << "' is not a fused expert tensor";
  CHECK(fused.dim() == 3) << "tensor '" << hf_name << "' has shape " << shape_str(fused.shape())
                          << ", expected 3 dimensions [experts, out, in]";
  const int64_t n_experts = fused.size(0), rows = fused.size(1), cols = fused.size(2);
  CHECK(!gate_up || rows % 2 == 0) << "tensor '" << hf_name << "' has shape "
                                   << shape_str(fused.shape())
                                   << ": the gate_up rows must be even ([w1; w3])";
  const Tensor flat = fused.reshape({n_experts * rows, cols});
  std::map<std::string, Tensor> out;
  for (int64_t e = 0; e < n_experts; ++e) {
    const int64_t base = e * rows;
    if (gate_up) {
      out[native_expert_name(layer, e, "w1")] = flat.slice_rows(base, base + rows / 2);
      out[native_expert_name(layer, e, "w3")] = flat.slice_rows(base + rows / 2, base + rows);
    } else {
      out[native_expert_name(layer, e, "w2")] = flat.slice_rows(base, base + rows);
    }
  }
  return out;
}

}  // namespace deepinfer
