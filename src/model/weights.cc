#include "model/weights.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "io/config_parser.h"

namespace deepinfer {
namespace {

// Every compressor of ratio > 1 is gated; ratio 1 (V4.1) is not. V4's carry a position
// bias (MODEL_SPEC §A.5, §C.5).
CompressorWeights take_compressor(WeightSource& src, const std::string& prefix, int64_t ratio,
                                  int64_t width, int64_t dim, bool has_ape) {
  const int64_t c = ratio == 4 ? 2 : 1;  // the ratio-4 compressor pools two overlapping series
  CompressorWeights w;
  w.wkv = src.take(prefix + "wkv.weight", {c * width, dim});
  if (ratio > 1) w.wgate = src.take(prefix + "wgate.weight", {c * width, dim});
  if (has_ape) w.ape = src.take(prefix + "ape", {ratio, c * width});
  w.norm = src.take(prefix + "norm.weight", {width});
  return w;
}

EngramWeights take_engram(WeightSource& src, const std::string& prefix, const ModelConfig& cfg,
                          int64_t rows) {
  const EngramConfig& e = cfg.engram;
  const int64_t cols = (e.max_ngram_size - 1) * e.n_heads, D = cfg.hidden_size;
  EngramWeights w;
  w.table = src.take_raw(prefix + "embed.weight", {rows, e.head_dim}, DType::F8_E4M3);
  w.table_scale = src.take_raw(prefix + "embed.scale", {rows, e.head_dim / 32}, DType::F8_E8M0);
  w.wkv = src.take(prefix + "wkv.weight", {(cfg.hc_mult + 1) * D, cols * e.head_dim});
  w.q_weight = src.take(prefix + "q_weight", {cfg.hc_mult, D});
  w.k_weight = src.take(prefix + "k_weight", {cfg.hc_mult, D});
  return w;
}

HcWeightsT take_hc(WeightSource& src, const std::string& prefix, int64_t n_mix, int64_t width,
                   int64_t n_scale) {
  return {src.take(prefix + "fn", {n_mix, width}), src.take(prefix + "base", {n_mix}),
          src.take(prefix + "scale", {n_scale})};
}

ExpertWeightsT take_expert(WeightSource& src, const std::string& prefix, int64_t inter,
                           int64_t dim) {
  return {src.take(prefix + "w1.weight", {inter, dim}), src.take(prefix + "w3.weight", {inter, dim}),
          src.take(prefix + "w2.weight", {dim, inter})};
}

// The routed experts; those `keep` refuses are taken (checked) and dropped, left undefined.
void take_routed_experts(WeightSource& src, const std::string& fp, const ModelConfig& cfg,
                         int64_t n_experts, const std::function<bool(int64_t)>& keep,
                         MoeWeights& m) {
  for (int64_t e = 0; e < n_experts; ++e) {
    ExpertWeightsT w = take_expert(src, fp + "experts." + std::to_string(e) + ".",
                                   cfg.moe_intermediate_size, cfg.hidden_size);
    m.experts.push_back(!keep || keep(e) ? std::move(w) : ExpertWeightsT{});
  }
}

AttentionWeights take_attention_core(WeightSource& src, const std::string& ap, const ModelConfig& cfg) {
  const int64_t D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim;
  AttentionWeights a;
  a.wq_a = src.take(ap + "wq_a.weight", {cfg.q_lora_rank, D});
  a.q_norm = src.take(ap + "q_norm.weight", {cfg.q_lora_rank});
  a.wq_b = src.take(ap + "wq_b.weight", {H * d, cfg.q_lora_rank});
  a.wkv = src.take(ap + "wkv.weight", {d, D});
  a.kv_norm = src.take(ap + "kv_norm.weight", {d});
  a.wo_a = src.take(ap + "wo_a.weight", {cfg.o_groups * cfg.o_lora_rank, H * d / cfg.o_groups});
  a.wo_b = src.take(ap + "wo_b.weight", {D, cfg.o_groups * cfg.o_lora_rank});
  a.sink = src.take(ap + "attn_sink", {H});
  return a;
}

// Router + experts + shared expert of a score-routed MoE with `n_experts` experts.
MoeWeights take_scored_moe(WeightSource& src, const std::string& fp, const ModelConfig& cfg,
                           int64_t n_experts, const std::function<bool(int64_t)>& keep = {}) {
  const int64_t D = cfg.hidden_size;
  MoeWeights m;
  m.gate = src.take(fp + "gate.weight", {n_experts, D});
  m.bias = src.take(fp + "gate.bias", {n_experts});
  if (cfg.traits.router_bias_vl) m.bias_vl = src.take(fp + "gate.bias_vl", {n_experts});
  take_routed_experts(src, fp, cfg, n_experts, keep, m);
  m.shared = take_expert(src, fp + "shared_experts.", cfg.moe_intermediate_size * cfg.n_shared_experts, D);
  return m;
}

DsparkWeights take_dspark(WeightSource& src, const ModelConfig& cfg) {
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult, n_mix = (2 + hc) * hc;
  const int64_t n_taps = static_cast<int64_t>(cfg.dspark.target_layer_ids.size());
  const int64_t n_stages = cfg.dspark.n_stages, R = cfg.dspark.markov_rank;
  const int64_t n_experts = cfg.dspark.n_routed_experts > 0 ? cfg.dspark.n_routed_experts : cfg.n_routed_experts;
  CHECK(n_stages >= 1 && n_taps >= 1 && R > 0)
      << "config: DSpark needs stages (V4.1: num_nextn_predict_layers >= 1), dspark_target_layer_ids and "
         "dspark_markov_rank (got " << n_stages << " stages, " << n_taps << " taps, rank " << R << ")";

  DsparkWeights w;
  w.main_proj = src.take("mtp.0.main_proj.weight", {D, n_taps * D});
  w.main_norm = src.take("mtp.0.main_norm.weight", {D});
  for (int64_t k = 0; k < n_stages; ++k) {
    const std::string p = "mtp." + std::to_string(k) + ".";
    DsparkStageWeights st;
    st.attn_norm = src.take(p + "attn_norm.weight", {D});
    st.ffn_norm = src.take(p + "ffn_norm.weight", {D});
    st.hc_attn = take_hc(src, p + "hc_attn_", n_mix, hc * D, 3);
    st.hc_ffn = take_hc(src, p + "hc_ffn_", n_mix, hc * D, 3);
    st.attn = take_attention_core(src, p + "attn.", cfg);
    st.moe = take_scored_moe(src, p + "ffn.", cfg, n_experts);
    w.stages.push_back(std::move(st));
  }
  const std::string last = "mtp." + std::to_string(n_stages - 1) + ".";
  w.norm = src.take(last + "norm.weight", {D});
  const bool w12 = cfg.traits.dspark_markov_w12_names;
  w.markov_embed = src.take(last + (w12 ? "markov_head.markov_w1.weight" : "markov_head.embed.weight"),
                            {cfg.vocab_size, R});
  w.markov_head = src.take(last + (w12 ? "markov_head.markov_w2.weight" : "markov_head.head.weight"),
                           {cfg.vocab_size, R});
  w.confidence = src.take(last + "confidence_head.proj.weight", {1, D + R});
  if (cfg.traits.dspark_hc_head) w.hc_head = take_hc(src, last + "hc_head_", hc, hc * D, 1);
  return w;
}

// MTP-1 (MODEL_SPEC §A.9): only mtp.0 is used, whatever num_nextn_predict_layers says (V4 has 1).
MtpWeights take_mtp(WeightSource& src, const ModelConfig& cfg) {
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult, n_mix = (2 + hc) * hc;
  const int64_t ratio = cfg.mtp_compress_ratios.empty() ? 0 : cfg.mtp_compress_ratios[0];
  CHECK(ratio == 0) << "config: the MTP block mtp.0 has compress ratio " << ratio
                    << " (compress_ratios[" << cfg.num_layers << "]); only 0 (sliding window) is supported";
  const std::string p = "mtp.0.";
  MtpWeights w;
  w.e_proj = src.take(p + "e_proj.weight", {D, D});
  w.h_proj = src.take(p + "h_proj.weight", {D, D});
  w.enorm = src.take(p + "enorm.weight", {D});
  w.hnorm = src.take(p + "hnorm.weight", {D});
  w.norm = src.take(p + "norm.weight", {D});
  w.hc_head = take_hc(src, p + "hc_head_", hc, hc * D, 1);
  DsparkStageWeights& b = w.block;
  b.attn_norm = src.take(p + "attn_norm.weight", {D});
  b.ffn_norm = src.take(p + "ffn_norm.weight", {D});
  b.hc_attn = take_hc(src, p + "hc_attn_", n_mix, hc * D, 3);
  b.hc_ffn = take_hc(src, p + "hc_ffn_", n_mix, hc * D, 3);
  b.attn = take_attention_core(src, p + "attn.", cfg);
  b.moe = take_scored_moe(src, p + "ffn.", cfg, cfg.n_routed_experts);
  return w;
}

}  // namespace

std::string WeightSource::engram_token_map_path() const {
  if (const char* env = std::getenv("DEEPINFER_ENGRAM_TOKEN_MAP")) return env;
  return std::string(DEEPINFER_SOURCE_DIR) + "/" + kEngramTokenMapPath;
}

ModelWeights load_model_weights(const ModelConfig& config, WeightSource& src,
                                const std::function<bool(int64_t, int64_t)>& keep_expert) {
  ModelConfig cfg = config;
  complete_model_config(&cfg);
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size, hc = cfg.hc_mult;
  const int64_t n_mix = (2 + hc) * hc, d = cfg.head_dim;
  ModelWeights w;
  w.embed = src.take("embed.weight", {V, D});
  w.head = src.take("head.weight", {V, D});
  w.norm = src.take("norm.weight", {D});
  const bool ape = cfg.traits.compressor_ape;
  if (!cfg.traits.single_pass_mhc) w.hc_head = take_hc(src, "hc_head_", hc, hc * D, 1);
  w.layers.resize(cfg.num_layers);
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerWeights& lw = w.layers[l];
    lw.attn_norm = src.take(p + "attn_norm.weight", {D});
    lw.ffn_norm = src.take(p + "ffn_norm.weight", {D});
    lw.hc_attn = take_hc(src, p + "hc_attn_", n_mix, hc * D, 3);
    lw.hc_ffn = take_hc(src, p + "hc_ffn_", n_mix, hc * D, 3);

    AttentionWeights& a = lw.attn;
    const std::string ap = p + "attn.";
    a = take_attention_core(src, ap, cfg);
    const LayerPlan& plan = cfg.plan[l];
    const int64_t hi = cfg.index_n_heads, di = cfg.index_head_dim;
    if (plan.owns_compressor) {
      a.has_compressor = true;
      a.compressor = take_compressor(src, ap + "compressor.", plan.ratio, d, D, ape);
    }
    if (plan.scores()) {
      a.has_indexer = true;
      a.indexer.wq_b = src.take(ap + "indexer.wq_b.weight", {hi * di, cfg.q_lora_rank});
      a.indexer.weights_proj = src.take(ap + "indexer.weights_proj.weight", {hi, D});
    }
    if (plan.own_index_compressor) {
      a.indexer.compressor = take_compressor(src, ap + "indexer.compressor.", plan.ratio, di, D, ape);
    } else if (plan.owns_index_keys) {
      a.indexer.wk = src.take(ap + "indexer.wk.weight", {di, d});
      a.indexer.k_norm = src.take(ap + "indexer.k_norm.weight", {di});
    }
    if (plan.engram) {
      const auto& ids = cfg.engram.layer_ids;
      const size_t slot = std::find(ids.begin(), ids.end(), l) - ids.begin();
      lw.has_engram = true;
      lw.engram = take_engram(src, p + "engram.", cfg, cfg.engram.num_embeddings[slot]);
    }

    const std::string fp = p + "ffn.";
    std::function<bool(int64_t)> keep;
    if (keep_expert) keep = [&keep_expert, l](int64_t e) { return keep_expert(l, e); };
    if (cfg.is_hash_layer(l)) {
      MoeWeights& m = lw.moe;
      m.gate = src.take(fp + "gate.weight", {cfg.n_routed_experts, D});
      m.tid2eid = src.take(fp + "gate.tid2eid", {V, cfg.n_experts_per_tok});
      take_routed_experts(src, fp, cfg, cfg.n_routed_experts, keep, m);
      m.shared = take_expert(src, fp + "shared_experts.",
                             cfg.moe_intermediate_size * cfg.n_shared_experts, D);
    } else {
      lw.moe = take_scored_moe(src, fp, cfg, cfg.n_routed_experts, keep);
    }
  }
  if (cfg.dspark.block_size > 0) {
    w.has_dspark = true;
    w.dspark = take_dspark(src, cfg);
  } else if (!cfg.traits.single_pass_mhc && cfg.num_nextn_predict_layers >= 1 &&
             src.has("mtp.0.e_proj.weight")) {
    w.has_mtp = true;
    w.mtp = take_mtp(src, cfg);
  }
  if (cfg.engram.enabled()) {
    const std::string path = src.engram_token_map_path();
    w.engram_map = load_engram_token_map(path);
    CHECK(static_cast<int64_t>(w.engram_map.ids.size()) >= V)
        << "Engram token map " << path << " covers " << w.engram_map.ids.size()
        << " token ids but the vocabulary has " << V << " (make one for this tokenizer with "
        << "tools/make_engram_tables.py and put it beside the checkpoint as engram_token_map.bin)";
    CHECK(w.engram_map.compressed_vocab_size == cfg.engram.compressed_vocab_size)
        << "config: 'engram_compressed_vocab_size' is " << cfg.engram.compressed_vocab_size
        << " but the Engram token map " << path << " has " << w.engram_map.compressed_vocab_size
        << " compressed ids";
  }
  const std::vector<std::string> extra = src.untaken();
  CHECK(extra.empty()) << "unexpected tensor '" << extra.front() << "' in checkpoint ("
                       << extra.size() << " unexpected in total)";
  return w;
}

}  // namespace deepinfer
