// Helpers for model tests: a small V4 config covering every layer type, and running a
// token sequence through a model in given chunk sizes.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/model.h"
#include "model/weight_source.h"

namespace deepinfer::testing {

inline ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 300;
  c.hidden_size = 64;
  c.num_layers = 4;
  c.num_heads = 2;
  c.head_dim = 96;
  c.rope_dim = 32;
  c.q_lora_rank = 32;
  c.o_groups = 2;
  c.o_lora_rank = 16;
  c.sliding_window = 8;
  c.index_n_heads = 2;
  c.index_head_dim = 64;
  c.index_topk = 4;
  c.n_routed_experts = 6;
  c.n_experts_per_tok = 2;
  c.moe_intermediate_size = 32;
  c.routed_scaling_factor = 1.5;
  c.swiglu_limit = 10.0;
  c.compress_ratios = {0, 4, 128, 4};
  c.hash_layers = {true, false, false, false};
  c.yarn = {true, 16.0, 256, 32.0, 1.0};
  c.max_position_embeddings = 4096;
  c.eos_token_ids = {1};
  return c;
}

// A small V4.1 config with every role: 0-1 window only (Engram before 1), 2 ratio-2 source,
// 3 reuse, 4 ratio-1 source + candidate source (blocks of 4, 2 kept), 5 reuse, 6 reindex
// inside 4's candidates; Engram before 1 and 3 (prime walks from 499: 2056 and 2208 rows).
inline ModelConfig small_v41_config() {
  ModelConfig c = small_config();
  c.model_type = "deepseek_v41";
  c.num_layers = 7;
  c.rms_norm_eps = 1e-20;
  c.compress_ratios = {0, 0, 2, 2, 1, 1, 1};
  c.hash_layers.assign(7, false);
  c.kv_source_layer_ids = {2, 4};
  c.index_source_layer_ids = {2, 4, 6};
  c.candidate_source_layer_id = 4;
  c.candidate_topk_blocks = 2;
  c.candidate_block_size = 4;
  c.engram.layer_ids = {1, 3};
  c.engram.num_embeddings = {2056, 2208};
  c.engram.max_ngram_size = 3;
  c.engram.vocab_size = 500;
  c.engram.n_heads = 2;
  c.engram.head_dim = 32;
  c.engram.pad_token_id = 2;
  c.engram.compressed_vocab_size = 99092;
  return c;
}

inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(n);
  for (auto& v : t) v = dist(gen);
  return t;
}

// Runs `tokens` through a fresh state in chunks of `chunk` (the last one may be shorter)
// and returns the logits of every position, [n, V] row-major.
inline std::vector<float> run_chunked(const Model& model, const std::vector<int32_t>& tokens,
                                      int64_t chunk) {
  auto state = model.new_state();
  const int64_t V = model.config().vocab_size;
  std::vector<float> out;
  for (size_t begin = 0; begin < tokens.size(); begin += chunk) {
    const size_t end = std::min(tokens.size(), begin + chunk);
    SequenceChunk c{state.get(), std::span<const int32_t>(tokens.data() + begin, end - begin), true};
    Tensor logits = model.forward(std::span<const SequenceChunk>(&c, 1));
    out.insert(out.end(), logits.f32(), logits.f32() + logits.numel());
  }
  (void)V;
  return out;
}

inline float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}

// A weight source that hides one tensor (a checkpoint missing it): loaders must fail naming it.
class Without : public WeightSource {
 public:
  Without(std::unique_ptr<WeightSource> inner, std::string hidden)
      : inner_(std::move(inner)), hidden_(std::move(hidden)) {}
  Tensor take(const std::string& name, const Shape& shape) override {
    if (name == hidden_) THROW(kNotFound) << "missing tensor '" << name << "'";
    return inner_->take(name, shape);
  }
  bool has(const std::string& name) const override { return name != hidden_ && inner_->has(name); }
  std::vector<std::string> untaken() const override { return {}; }

 private:
  std::unique_ptr<WeightSource> inner_;
  std::string hidden_;
};

}  // namespace deepinfer::testing
