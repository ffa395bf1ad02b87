// Typed, fp32 host weights of one DeepSeek-V4 backbone (MODEL_SPEC §A, §B.5).
#pragma once

#include <vector>

#include "io/model_config.h"
#include "model/weight_source.h"
#include "tensor/tensor.h"

namespace deepinfer {

struct HcWeightsT {
  Tensor fn;     // [(2+n_hc)*n_hc, n_hc*D]   (head: [n_hc, n_hc*D])
  Tensor base;   // [(2+n_hc)*n_hc]           (head: [n_hc])
  Tensor scale;  // [3]                       (head: [1])
};

struct CompressorWeights {
  Tensor wkv;    // [c*d_c, D]
  Tensor wgate;  // [c*d_c, D]
  Tensor ape;    // [m, c*d_c]
  Tensor norm;   // [d_c]
};

struct IndexerWeights {
  Tensor wq_b;          // [H_I*d_I, R_q]
  Tensor weights_proj;  // [H_I, D]
  CompressorWeights compressor;
};

struct AttentionWeights {
  Tensor wq_a, q_norm, wq_b;  // [R_q, D], [R_q], [H*d, R_q]
  Tensor wkv, kv_norm;        // [d, D], [d]
  Tensor wo_a, wo_b;          // [G*R_o, H*d/G], [D, G*R_o]
  Tensor sink;                // [H]
  bool has_compressor = false;
  CompressorWeights compressor;
  bool has_indexer = false;
  IndexerWeights indexer;
};

struct ExpertWeightsT {
  Tensor w1, w3, w2;  // [I, D], [I, D], [D, I]
};

struct MoeWeights {
  Tensor gate;     // [E, D]
  Tensor bias;     // [E] (score layers) or undefined
  Tensor tid2eid;  // [V, k] I32 (hash layers) or undefined
  std::vector<ExpertWeightsT> experts;
  ExpertWeightsT shared;
};

struct LayerWeights {
  Tensor attn_norm, ffn_norm;  // [D]
  HcWeightsT hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights moe;
};

struct ModelWeights {
  Tensor embed;  // [V, D]
  Tensor head;   // [V, D]
  Tensor norm;   // [D]
  HcWeightsT hc_head;
  std::vector<LayerWeights> layers;
};

// Takes every backbone tensor from `source` (checking names and shapes) and rejects
// tensors nobody took.
ModelWeights load_model_weights(const ModelConfig& config, WeightSource& source);

}  // namespace deepinfer
