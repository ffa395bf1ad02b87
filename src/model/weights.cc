#include "model/weights.h"

#include <string>

namespace deepinfer {
namespace {

CompressorWeights take_compressor(WeightSource& src, const std::string& prefix, int64_t ratio,
                                  int64_t width, int64_t dim) {
  const int64_t c = ratio == 4 ? 2 : 1;  // the ratio-4 compressor pools two overlapping series
  CompressorWeights w;
  w.wkv = src.take(prefix + "wkv.weight", {c * width, dim});
  w.wgate = src.take(prefix + "wgate.weight", {c * width, dim});
  w.ape = src.take(prefix + "ape", {ratio, c * width});
  w.norm = src.take(prefix + "norm.weight", {width});
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

}  // namespace

ModelWeights load_model_weights(const ModelConfig& cfg, WeightSource& src) {
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size, hc = cfg.hc_mult;
  const int64_t n_mix = (2 + hc) * hc, H = cfg.num_heads, d = cfg.head_dim;
  ModelWeights w;
  w.embed = src.take("embed.weight", {V, D});
  w.head = src.take("head.weight", {V, D});
  w.norm = src.take("norm.weight", {D});
  w.hc_head = take_hc(src, "hc_head_", hc, hc * D, 1);
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
    a.wq_a = src.take(ap + "wq_a.weight", {cfg.q_lora_rank, D});
    a.q_norm = src.take(ap + "q_norm.weight", {cfg.q_lora_rank});
    a.wq_b = src.take(ap + "wq_b.weight", {H * d, cfg.q_lora_rank});
    a.wkv = src.take(ap + "wkv.weight", {d, D});
    a.kv_norm = src.take(ap + "kv_norm.weight", {d});
    a.wo_a = src.take(ap + "wo_a.weight", {cfg.o_groups * cfg.o_lora_rank, H * d / cfg.o_groups});
    a.wo_b = src.take(ap + "wo_b.weight", {D, cfg.o_groups * cfg.o_lora_rank});
    a.sink = src.take(ap + "attn_sink", {H});
    const int64_t ratio = cfg.compress_ratio(l);
    if (ratio > 0) {
      a.has_compressor = true;
      a.compressor = take_compressor(src, ap + "compressor.", ratio, d, D);
    }
    if (ratio == 4) {
      a.has_indexer = true;
      const int64_t hi = cfg.index_n_heads, di = cfg.index_head_dim;
      a.indexer.wq_b = src.take(ap + "indexer.wq_b.weight", {hi * di, cfg.q_lora_rank});
      a.indexer.weights_proj = src.take(ap + "indexer.weights_proj.weight", {hi, D});
      a.indexer.compressor = take_compressor(src, ap + "indexer.compressor.", ratio, di, D);
    }

    MoeWeights& m = lw.moe;
    const std::string fp = p + "ffn.";
    m.gate = src.take(fp + "gate.weight", {cfg.n_routed_experts, D});
    if (cfg.is_hash_layer(l)) {
      m.tid2eid = src.take(fp + "gate.tid2eid", {V, cfg.n_experts_per_tok});
    } else {
      m.bias = src.take(fp + "gate.bias", {cfg.n_routed_experts});
    }
    m.experts.reserve(cfg.n_routed_experts);
    for (int64_t e = 0; e < cfg.n_routed_experts; ++e) {
      m.experts.push_back(take_expert(src, fp + "experts." + std::to_string(e) + ".",
                                      cfg.moe_intermediate_size, D));
    }
    m.shared = take_expert(src, fp + "shared_experts.", cfg.moe_intermediate_size * cfg.n_shared_experts, D);
  }
  const std::vector<std::string> extra = src.untaken();
  CHECK(extra.empty()) << "unexpected tensor '" << extra.front() << "' in checkpoint ("
                       << extra.size() << " unexpected in total)";
  return w;
}

}  // namespace deepinfer
