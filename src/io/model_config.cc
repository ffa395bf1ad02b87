#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/error.h"
#include "io/config_keys.h"
#include "io/config_parser.h"
#include "io/model_config_v41.h"

namespace deepinfer {
namespace {

using nlohmann::json;

constexpr const char* kSliding = "sliding_attention";
constexpr const char* kCsa = "compressed_sparse_attention";
constexpr const char* kHca = "heavily_compressed_attention";

void check_positive(const Keys& keys, const std::string& key, double value) {
  CHECK(value > 0) << "config: '" << keys.name(key) << "' must be positive, got " << value;
}

void parse_sizes(const Keys& k, ModelConfig* c) {
  c->vocab_size = k.integer("vocab_size");
  c->hidden_size = k.integer("hidden_size");
  c->num_layers = k.integer("num_hidden_layers");
  c->num_heads = k.integer("num_attention_heads");
  c->head_dim = k.integer("head_dim");
  c->q_lora_rank = k.integer("q_lora_rank");
  c->o_groups = k.integer("o_groups");
  c->o_lora_rank = k.integer("o_lora_rank");
  c->n_routed_experts = k.integer("n_routed_experts");
  c->n_experts_per_tok = k.integer("num_experts_per_tok");
  c->moe_intermediate_size = k.integer("moe_intermediate_size");
  c->sliding_window = k.integer("sliding_window", 128);
  c->hc_mult = k.integer("hc_mult", 4);
  c->hc_sinkhorn_iters = k.integer("hc_sinkhorn_iters", 20);
  c->hc_eps = k.number("hc_eps", 1e-6);
  c->rms_norm_eps = k.number("rms_norm_eps", 1e-6);
  c->index_n_heads = k.integer("index_n_heads", 64);
  c->index_head_dim = k.integer("index_head_dim", 128);
  c->index_topk = k.integer("index_topk", 512);
  c->n_shared_experts = k.integer("n_shared_experts", 1);
  c->routed_scaling_factor = k.number("routed_scaling_factor", 1.5);
  c->swiglu_limit = k.number("swiglu_limit", 10.0);
  c->norm_topk_prob = k.boolean("norm_topk_prob", true);
  c->scoring_func = k.string("scoring_func", "sqrtsoftplus");
  c->max_position_embeddings = k.integer("max_position_embeddings", 1048576);
  c->num_nextn_predict_layers = k.integer("num_nextn_predict_layers", 1);
  c->bos_token_id = k.is_null("bos_token_id") ? -1 : k.integer("bos_token_id", 0);
}


void parse_tokens_and_features(const Keys& k, ModelConfig* c) {
  if (k.has("eos_token_id")) {
    const json& eos = k.at("eos_token_id");
    if (eos.is_array()) {
      for (const json& id : eos) c->eos_token_ids.push_back(k.to_int("eos_token_id", id));
    } else {
      c->eos_token_ids.push_back(k.integer("eos_token_id"));
    }
  } else if (!k.is_null("eos_token_id")) {
    c->eos_token_ids = {1};
  }
  // Features the V4 math does not have: reject instead of silently ignoring.
  const std::string act = k.string("hidden_act", "silu");
  CHECK_KIND(kUnsupported, act == "silu")
      << "config: 'hidden_act' " << act << " is not supported (DeepSeek-V4 uses silu)";
  CHECK_KIND(kUnsupported, k.integer("num_key_value_heads", 1) == 1)
      << "config: 'num_key_value_heads' must be 1 (DeepSeek-V4 has one shared K=V head)";
  CHECK_KIND(kUnsupported, !k.boolean("attention_bias", false))
      << "config: 'attention_bias' = true is not supported";
  CHECK_KIND(kUnsupported, !k.boolean("mlp_bias", false))
      << "config: 'mlp_bias' = true is not supported";
  CHECK_KIND(kUnsupported, !k.boolean("tie_word_embeddings", false))
      << "config: 'tie_word_embeddings' = true is not supported";
}

int64_t layer_type_rate(const Keys& k, const std::string& type,
                        const std::map<std::string, int64_t>& rates, const std::string& key) {
  if (type == kSliding) return 0;
  auto it = rates.find(type);
  CHECK(it != rates.end()) << "config: '" << key << "' has unknown layer type '" << type
                           << "' (expected " << kSliding << ", " << kCsa << " or " << kHca
                           << ")";
  return it->second;
}

void parse_attention_schedule(const Keys& k, ModelConfig* c) {
  const int64_t n = c->num_layers;
  std::map<std::string, int64_t> rates = {{kCsa, 4}, {kHca, 128}};
  if (k.has("compress_rates")) {
    const Keys r(k.object("compress_rates"), "compress_rates.");
    for (const auto& [type, value] : k.at("compress_rates").items()) {
      CHECK(type == kCsa || type == kHca) << "config: 'compress_rates' has unknown layer type '"
                                          << type << "'";
      rates[type] = r.integer(type);
    }
  }
  if (k.has("compress_rate_csa")) rates[kCsa] = k.integer("compress_rate_csa");
  if (k.has("compress_rate_hca")) rates[kHca] = k.integer("compress_rate_hca");

  std::vector<int64_t> from_types, from_ratios, extra_ratios;
  if (k.has("layer_types")) {
    const json& types = k.array("layer_types");
    CHECK(static_cast<int64_t>(types.size()) == n)
        << "config: 'layer_types' has " << types.size() << " entries but num_hidden_layers is "
        << n;
    for (const json& t : types) {
      CHECK(t.is_string()) << "config: 'layer_types' entries must be strings, got " << t.dump();
      from_types.push_back(layer_type_rate(k, t.get<std::string>(), rates, "layer_types"));
    }
  }
  if (k.has("compress_ratios")) {
    const json& ratios = k.array("compress_ratios");
    CHECK(static_cast<int64_t>(ratios.size()) >= n)
        << "config: 'compress_ratios' has " << ratios.size()
        << " entries, fewer than num_hidden_layers (" << n << ")";
    for (size_t i = 0; i < ratios.size(); ++i) {
      const int64_t r = k.to_int("compress_ratios", ratios[i]);
      (static_cast<int64_t>(i) < n ? from_ratios : extra_ratios).push_back(r);
    }
  }
  if (!from_types.empty() && !from_ratios.empty()) {
    CHECK(from_types == from_ratios)
        << "config: 'layer_types' and 'compress_ratios' disagree about the attention schedule";
  }
  if (!from_types.empty()) {
    c->compress_ratios = from_types;
  } else if (!from_ratios.empty() || n == 0) {
    c->compress_ratios = from_ratios;
  } else {
    for (int64_t l = 0; l < n; ++l) {
      c->compress_ratios.push_back(l < 2 || (l - 2) % 2 == 0 ? rates[kHca] : rates[kCsa]);
    }
  }
  c->mtp_compress_ratios = extra_ratios;
  if (c->mtp_compress_ratios.empty()) {
    c->mtp_compress_ratios.assign(static_cast<size_t>(std::max<int64_t>(0, c->num_nextn_predict_layers)), 0);
  }
  const bool v41 = c->is_v41();
  auto check_ratio = [v41](int64_t r, const std::string& what) {
    if (v41) {
      CHECK(r == 0 || r == 1 || r == 2)
          << "config: " << what << " has compress ratio " << r
          << "; DeepSeek-V4.1 supports 0 (sliding), 2 and 1";
      return;
    }
    CHECK(r == 0 || r == 4 || r == 128)
        << "config: " << what << " has compress ratio " << r
        << "; DeepSeek-V4 supports 0 (sliding), 4 (CSA) and 128 (HCA)";
  };
  const std::string source = !from_types.empty()    ? "'layer_types' / 'compress_rates'"
                             : !from_ratios.empty() ? "'compress_ratios'"
                                                    : "default layer_types / 'compress_rates'";
  for (int64_t l = 0; l < n; ++l) {
    check_ratio(c->compress_ratios[l], "layer " + std::to_string(l) + " (" + source + ")");
  }
  for (size_t s = 0; s < c->mtp_compress_ratios.size(); ++s) {
    check_ratio(c->mtp_compress_ratios[s],
                "drafter stage " + std::to_string(s) + " ('compress_ratios')");
  }
}

void parse_moe_schedule(const Keys& k, ModelConfig* c) {
  const int64_t n = c->num_layers;
  std::vector<bool> from_types;
  if (k.has("mlp_layer_types")) {
    const json& types = k.array("mlp_layer_types");
    CHECK(static_cast<int64_t>(types.size()) == n)
        << "config: 'mlp_layer_types' has " << types.size()
        << " entries but num_hidden_layers is " << n;
    for (const json& t : types) {
      CHECK(t.is_string() && (t == "hash_moe" || t == "moe"))
          << "config: 'mlp_layer_types' has unknown type " << t.dump()
          << " (expected hash_moe or moe)";
      from_types.push_back(t == "hash_moe");
    }
  }
  std::vector<bool> from_count;
  if (k.has("num_hash_layers") || from_types.empty()) {
    // V4.1 has no hash layers (MODEL_SPEC §C.9).
    const int64_t n_hash = k.integer("num_hash_layers", c->is_v41() ? 0 : 3);
    CHECK_KIND(kUnsupported, !c->is_v41() || n_hash == 0)
        << "config: 'num_hash_layers' " << n_hash << ": DeepSeek-V4.1 has no hash-routed layers";
    CHECK(n_hash >= 0) << "config: 'num_hash_layers' must be >= 0, got " << n_hash;
    for (int64_t l = 0; l < n; ++l) from_count.push_back(l < n_hash);
  }
  if (!from_types.empty() && k.has("num_hash_layers")) {
    CHECK(from_types == from_count)
        << "config: 'mlp_layer_types' and 'num_hash_layers' disagree about the hash layers";
  }
  c->hash_layers = from_types.empty() ? from_count : from_types;
}

// rope_dim from a partial rotary factor.
int64_t rope_dim_of(const ModelConfig& c, double factor, const std::string& key) {
  CHECK(factor > 0 && factor <= 1) << "config: '" << key << "' must be in (0, 1], got " << factor;
  return static_cast<int64_t>(static_cast<double>(c.head_dim) * factor);
}

// YaRN parameters from one rope dict (`k` names its keys) whose rope type is "yarn".
YarnConfig parse_yarn(const Keys& k, const ModelConfig& c) {
  YarnConfig y;
  y.enabled = true;
  y.original_max_position = k.integer("original_max_position_embeddings", c.max_position_embeddings);
  CHECK(y.original_max_position > 0) << "config: '" << k.name("original_max_position_embeddings")
                                      << "' must be positive";
  if (k.is_null("factor")) {
    y.factor = static_cast<double>(c.max_position_embeddings) /
               static_cast<double>(y.original_max_position);
  } else {
    CHECK(k.has("factor")) << "config: yarn rope scaling needs '" << k.name("factor") << "'";
    y.factor = k.number("factor", 1.0);
  }
  check_positive(k, "factor", y.factor);
  // transformers uses `value or default`, so 0 means the default too.
  y.beta_fast = k.number("beta_fast", 0.0);
  if (y.beta_fast == 0) y.beta_fast = 32.0;
  y.beta_slow = k.number("beta_slow", 0.0);
  if (y.beta_slow == 0) y.beta_slow = 1.0;
  return y;
}

std::string rope_type_of(const Keys& k) {
  return k.string("rope_type", k.string("type", "default"));
}

void parse_rope(const Keys& k, ModelConfig* c) {
  double prf = 64.0 / 512.0;
  std::string prf_key = "partial_rotary_factor";
  if (k.has("partial_rotary_factor")) {
    prf = k.number("partial_rotary_factor", prf);
  } else if (k.has("qk_rope_head_dim")) {
    prf = static_cast<double>(k.integer("qk_rope_head_dim")) / static_cast<double>(c->head_dim);
    prf_key = "qk_rope_head_dim";
  }
  c->rope_dim = rope_dim_of(*c, prf, prf_key);
  c->rope_theta = k.number("rope_theta", 10000.0);
  c->compress_rope_theta = k.number("compress_rope_theta", 160000.0);

  const json* nested_main = nullptr;
  const json* nested_compress = nullptr;
  if (k.has("rope_parameters") && k.at("rope_parameters").is_object()) {
    const json& rp = k.at("rope_parameters");
    if (rp.contains("main") && rp["main"].is_object() && rp.contains("compress") &&
        rp["compress"].is_object()) {
      nested_main = &rp["main"];
      nested_compress = &rp["compress"];
    }
  }
  if (nested_main != nullptr) {
    // HF form: each sub-dict carries its own theta and rotary fraction (HF fills missing
    // ones from the top-level rope_theta / partial_rotary_factor).
    const Keys main(*nested_main, "rope_parameters.main.");
    const Keys comp(*nested_compress, "rope_parameters.compress.");
    CHECK_KIND(kUnsupported, rope_type_of(main) == "default")
        << "config: 'rope_parameters.main.rope_type' " << rope_type_of(main)
        << " is not supported (sliding layers use plain RoPE)";
    const std::string comp_type = rope_type_of(comp);
    CHECK_KIND(kUnsupported, comp_type == "default" || comp_type == "yarn")
        << "config: 'rope_parameters.compress.rope_type' " << comp_type
        << " is not supported (expected default or yarn)";
    const double top_theta = c->rope_theta;
    c->rope_theta = main.number("rope_theta", top_theta);
    c->compress_rope_theta = comp.number("rope_theta", top_theta);
    if (main.has("partial_rotary_factor")) {
      c->rope_dim = rope_dim_of(*c, main.number("partial_rotary_factor", prf),
                                main.name("partial_rotary_factor"));
    }
    if (comp.has("partial_rotary_factor")) {
      const int64_t comp_dim = rope_dim_of(*c, comp.number("partial_rotary_factor", prf),
                                           comp.name("partial_rotary_factor"));
      CHECK_KIND(kUnsupported, comp_dim == c->rope_dim)
          << "config: 'rope_parameters.compress.partial_rotary_factor' gives " << comp_dim
          << " rope dims but 'rope_parameters.main' gives " << c->rope_dim;
    }
    if (comp_type == "yarn") {
      c->yarn = parse_yarn(comp, *c);
      // HF derives an attention factor (mscale) when none is given; V4 never uses one.
      CHECK_KIND(kUnsupported, comp.has("attention_factor") &&
                                   comp.number("attention_factor", 1.0) == 1.0)
          << "config: 'rope_parameters.compress.attention_factor' must be 1.0 (DeepSeek-V4 "
             "applies no YaRN magnitude scaling)";
    }
  } else {
    // Legacy / flat form: `rope_scaling` (or a flat `rope_parameters`) for compressed
    // layers only; HF forces attention_factor 1.
    std::string key;
    if (k.has("rope_scaling")) {
      key = "rope_scaling";
    } else if (k.has("rope_parameters")) {
      key = "rope_parameters";
    }
    if (!key.empty()) {
      const Keys rs(k.object(key), key + ".");
      const std::string type = rope_type_of(rs);
      CHECK_KIND(kUnsupported, type == "default" || type == "yarn")
          << "config: '" << key << "' type " << type << " is not supported (expected yarn)";
      if (type == "yarn") {
        c->yarn = parse_yarn(rs, *c);
        CHECK_KIND(kUnsupported, rs.number("attention_factor", 1.0) == 1.0)
            << "config: '" << key << ".attention_factor' must be 1.0";
      }
    }
  }
}

void parse_quantization(const Keys& k, ModelConfig* c) {
  std::string expert_dtype = k.string("expert_dtype", "");
  if (k.has("quantization_config")) {
    const Keys q(k.object("quantization_config"), "quantization_config.");
    CHECK(q.has("quant_method")) << "config: 'quantization_config.quant_method' is missing";
    const std::string method = q.string("quant_method", "");
    CHECK_KIND(kUnsupported, method == "fp8")
        << "config: 'quantization_config.quant_method' " << method
        << " is not supported (expected fp8)";
    c->quant.method = method;
    const std::string fmt = q.string("fmt", "e4m3");
    CHECK_KIND(kUnsupported, fmt == "e4m3")
        << "config: 'quantization_config.fmt' " << fmt << " is not supported (expected e4m3)";
    const std::string scale_fmt = q.string("scale_fmt", "ue8m0");
    CHECK_KIND(kUnsupported, scale_fmt == "ue8m0")
        << "config: 'quantization_config.scale_fmt' " << scale_fmt
        << " is not supported (expected ue8m0)";
    if (q.has("weight_block_size")) {
      const json& b = q.array("weight_block_size");
      CHECK(b.size() == 2) << "config: 'quantization_config.weight_block_size' must be [n, k]";
      c->quant.weight_block_n = q.to_int("weight_block_size", b[0]);
      c->quant.weight_block_k = q.to_int("weight_block_size", b[1]);
      CHECK(c->quant.weight_block_n > 0 && c->quant.weight_block_k > 0)
          << "config: 'quantization_config.weight_block_size' must be positive";
    }
    const std::string inner = q.string("expert_dtype", "");
    CHECK(inner.empty() || expert_dtype.empty() || inner == expert_dtype)
        << "config: 'expert_dtype' (" << expert_dtype
        << ") and 'quantization_config.expert_dtype' (" << inner << ") disagree";
    if (!inner.empty()) expert_dtype = inner;
  }
  CHECK_KIND(kUnsupported, expert_dtype.empty() || expert_dtype == "fp4" || expert_dtype == "fp8")
      << "config: 'expert_dtype' " << expert_dtype << " is not supported (expected fp4 or fp8)";
  c->quant.expert_dtype = expert_dtype;
}

void check_sizes(const Keys& k, const ModelConfig& c) {
  const std::pair<const char*, int64_t> positive[] = {
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"num_hidden_layers", c.num_layers},
      {"num_attention_heads", c.num_heads},
      {"head_dim", c.head_dim},
      {"q_lora_rank", c.q_lora_rank},
      {"o_groups", c.o_groups},
      {"o_lora_rank", c.o_lora_rank},
      {"n_routed_experts", c.n_routed_experts},
      {"num_experts_per_tok", c.n_experts_per_tok},
      {"moe_intermediate_size", c.moe_intermediate_size},
      {"sliding_window", c.sliding_window},
      {"hc_mult", c.hc_mult},
      {"hc_sinkhorn_iters", c.hc_sinkhorn_iters},
      {"index_n_heads", c.index_n_heads},
      {"index_head_dim", c.index_head_dim},
      {"index_topk", c.index_topk},
      {"max_position_embeddings", c.max_position_embeddings},
  };
  for (const auto& [key, value] : positive) check_positive(k, key, static_cast<double>(value));
  check_positive(k, "hc_eps", c.hc_eps);
  check_positive(k, "rms_norm_eps", c.rms_norm_eps);
  check_positive(k, "routed_scaling_factor", c.routed_scaling_factor);
  CHECK(c.swiglu_limit >= 0) << "config: 'swiglu_limit' must be >= 0, got " << c.swiglu_limit;
  CHECK(c.num_nextn_predict_layers >= 0) << "config: 'num_nextn_predict_layers' must be >= 0";
  // The parser builds per-layer lists: an absurd count must not cost memory or minutes here.
  // Far above any DeepSeek model (V4-Pro has 61 layers, 1 drafter stage).
  constexpr int64_t kMaxLayers = 4096;
  CHECK(c.num_layers <= kMaxLayers) << "config: 'num_hidden_layers' " << c.num_layers
                                    << " is larger than the supported " << kMaxLayers;
  CHECK(c.num_nextn_predict_layers <= kMaxLayers)
      << "config: 'num_nextn_predict_layers' " << c.num_nextn_predict_layers << " is larger than the supported "
      << kMaxLayers;
}

void check_consistency(const ModelConfig& c) {
  CHECK(c.rope_dim > 0 && c.rope_dim % 2 == 0)
      << "config: rope dims (head_dim * partial_rotary_factor / qk_rope_head_dim) = " << c.rope_dim
      << " must be a positive even number";
  CHECK(c.head_dim > c.rope_dim) << "config: 'head_dim' (" << c.head_dim
                                 << ") must be larger than the rope dims (" << c.rope_dim << ")";
  CHECK(c.index_head_dim >= c.rope_dim)
      << "config: 'index_head_dim' (" << c.index_head_dim << ") must be at least the rope dims ("
      << c.rope_dim << ")";
  CHECK(c.num_heads % c.o_groups == 0)
      << "config: 'num_attention_heads' (" << c.num_heads << ") must be divisible by 'o_groups' ("
      << c.o_groups << ")";
  CHECK(c.n_experts_per_tok <= c.n_routed_experts)
      << "config: 'num_experts_per_tok' (" << c.n_experts_per_tok
      << ") must not exceed 'n_routed_experts' (" << c.n_routed_experts << ")";
  CHECK_KIND(kUnsupported, c.n_shared_experts == 1)
      << "config: 'n_shared_experts' " << c.n_shared_experts
      << " is not supported (DeepSeek-V4 has one shared expert)";
  CHECK_KIND(kUnsupported, c.scoring_func == "sqrtsoftplus")
      << "config: 'scoring_func' " << c.scoring_func
      << " is not supported (DeepSeek-V4 uses sqrtsoftplus)";
  for (int64_t id : c.eos_token_ids) {
    CHECK(id >= 0 && id < c.vocab_size)
        << "config: 'eos_token_id' " << id << " is outside the vocabulary (" << c.vocab_size << ")";
  }
  CHECK(c.bos_token_id < c.vocab_size)
      << "config: 'bos_token_id' " << c.bos_token_id << " is outside the vocabulary";
  ICHECK(static_cast<int64_t>(c.compress_ratios.size()) == c.num_layers &&
         static_cast<int64_t>(c.hash_layers.size()) == c.num_layers);
}

void set_traits_of(ModelConfig* c) {
  ModelTraits& t = c->traits;
  const bool v41 = c->is_v41();
  t.single_pass_mhc = v41;
  t.per_head_q_norm = !v41;
  t.window_fp8_block = v41 ? 32 : 64;
  t.window_fp8_all_dims = v41;
  t.compressed_fp4 = v41;
  t.compressor_ape = !v41;
  t.indexer_hadamard = !v41;
  t.router_bias_vl = v41;
  t.route_norm_eps = v41 ? 1e-20 : 0.0;
  t.route_normalize_always = !v41;
  t.dspark_taps_block_output = !v41;
  t.dspark_hc_head = !v41;
  t.dspark_markov_w12_names = !v41;
}

}  // namespace

void complete_model_config(ModelConfig* c) {
  set_traits_of(c);
  derive_layer_plan(c);
}

ModelConfig parse_model_config(const nlohmann::json& config) {
  CHECK(config.is_object()) << "config: not a JSON object";
  const Keys top(config, "");
  CHECK(top.has("model_type")) << "config: required key 'model_type' is missing";
  const std::string model_type = top.string("model_type", "");
  const bool v41 = model_type == "deepseek_v41" || model_type == "deepseek_v41_text";
  CHECK_KIND(kUnsupported, v41 || model_type == "deepseek_v4")
      << "config: 'model_type' " << model_type
      << " is not supported; expected deepseek_v4, deepseek_v41 or deepseek_v41_text";
  // The published V4.1 config nests the text model under text_config (vision beside it);
  // quantization_config and image_token_id stay at the top.
  const bool nested = model_type == "deepseek_v41";
  if (nested) {
    CHECK(top.has("text_config")) << "config: model_type deepseek_v41 needs 'text_config'";
    top.object("text_config");
  }
  const Keys k = nested ? Keys(config["text_config"], "text_config.") : top;

  ModelConfig c;
  c.model_type = model_type;
  parse_sizes(k, &c);
  if (!k.has("num_nextn_predict_layers")) c.num_nextn_predict_layers = v41 ? 0 : 1;
  check_sizes(k, c);
  parse_tokens_and_features(k.has("eos_token_id") || !top.has("eos_token_id") ? k : top, &c);
  if (nested && !k.has("bos_token_id") && top.has("bos_token_id")) {
    c.bos_token_id = top.integer("bos_token_id");
  }
  parse_attention_schedule(k, &c);
  parse_moe_schedule(k, &c);
  parse_rope(k, &c);
  parse_quantization(nested && !k.has("quantization_config") ? top : k, &c);
  if (v41) {
    parse_v41_keys(k, top, &c);
  } else {
    parse_dspark_keys(k, &c);  // V4-Flash-DSpark / 0731 (MODEL_SPEC §D)
  }
  check_consistency(c);
  complete_model_config(&c);
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path file = path;
  if (fs::is_directory(file)) file /= "config.json";
  std::ifstream in(file);
  CHECK_KIND(kNotFound, in.good()) << "cannot open model config '" << file.string() << "'";
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    THROW(kInvalidInput) << "model config '" << file.string() << "' is not valid JSON ("
                         << e.what() << ")";
  }
  try {
    return parse_model_config(config);
  } catch (const Error& e) {
    throw Error(e.kind(), "'" + file.string() + "': " + e.what());
  }
}

}  // namespace deepinfer
