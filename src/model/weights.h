// Typed, fp32 host weights of one DeepSeek-V4 / V4.1 backbone (MODEL_SPEC §A, §B.5, §C).
// Which tensors a layer has follows its LayerPlan (io/layer_plan.h); absent ones stay
// undefined Tensors.
#pragma once

#include <functional>
#include <vector>

#include "io/engram_token_map.h"
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
  Tensor wgate;  // [c*d_c, D]; undefined for V4.1 ratio 1 (no gate: the entry is wkv x)
  Tensor ape;    // [m, c*d_c]; undefined for V4.1 (no position bias)
  Tensor norm;   // [d_c]
};

struct IndexerWeights {
  Tensor wq_b;          // [H_I*d_I, R_q]          (layers that score)
  Tensor weights_proj;  // [H_I, D]                (layers that score)
  CompressorWeights compressor;  // V4: the index keys' own compressor
  Tensor wk, k_norm;    // V4.1 index-key owners: [d_I, d], [d_I] (keys from the latent)
};

// Engram (V4.1, MODEL_SPEC §C.8) before one layer. The table stays in its checkpoint
// format (FP8 codes + one e8m0 exponent per 32 columns), read in place.
struct EngramWeights {
  Tensor table;        // [rows, head_dim] F8_E4M3
  Tensor table_scale;  // [rows, head_dim / 32] F8_E8M0
  Tensor wkv;          // [(n_hc + 1) * D, n_cols * head_dim] fp32
  Tensor q_weight, k_weight;  // [n_hc, D] fp32
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
  Tensor bias_vl;  // [E] V4.1: selection bias of image tokens (kept; text uses `bias`)
  Tensor tid2eid;  // [V, k] I32 (hash layers) or undefined
  std::vector<ExpertWeightsT> experts;
  ExpertWeightsT shared;
};

struct LayerWeights {
  Tensor attn_norm, ffn_norm;  // [D]
  HcWeightsT hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights moe;
  bool has_engram = false;
  EngramWeights engram;
};

// DSpark drafter (MODEL_SPEC §D.5) of V4.1 and of V4-Flash-DSpark / 0731: DsparkConfig::n_stages
// ratio-0 stages `mtp.k.*` with the backbone's layer layout (their own MoE: V4.1
// dspark_n_routed_experts, V4 the backbone's expert count), the feature projection, the last
// stage's norm, Markov and confidence heads, and (V4, ModelTraits::dspark_hc_head) the last
// stage's hc_head. Embedding and LM head are the backbone's.
struct DsparkStageWeights {
  Tensor attn_norm, ffn_norm;  // [D]
  HcWeightsT hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights moe;
};

struct DsparkWeights {
  Tensor main_proj;   // [D, n_taps * D]
  Tensor main_norm;   // [D]
  std::vector<DsparkStageWeights> stages;
  Tensor norm;        // [D] (mtp.<last>.norm)
  Tensor markov_embed, markov_head;  // [V, R] (V4.1 embed / head, V4 markov_w1 / markov_w2)
  Tensor confidence;  // [1, D + R]
  HcWeightsT hc_head;  // V4: mtp.<last>.hc_head_{fn,base,scale} [n_hc, n_hc*D], [n_hc], [1]
};

// MTP-1 of V4-Flash / V4-Pro (MODEL_SPEC §A.9, §D.7): `mtp.0.*`, one V4 block (compress ratio
// 0, score-routed MoE of the backbone's experts) with its input projections and norms and its own
// hc_head. Embedding and LM head are the backbone's.
struct MtpWeights {
  Tensor e_proj, h_proj;      // [D, D] (FP8 in official checkpoints, here fp32)
  Tensor enorm, hnorm, norm;  // [D]
  HcWeightsT hc_head;         // [n_hc, n_hc*D], [n_hc], [1]
  DsparkStageWeights block;   // the block's layout is a drafter stage's
};

struct ModelWeights {
  // Engram models only: raw token id -> compressed id (covers ids < vocab_size).
  EngramTokenMap engram_map;
  Tensor embed;  // [V, D]
  Tensor head;   // [V, D]
  Tensor norm;   // [D]
  bool has_dspark = false;  // the config has DSpark keys (dspark_block_size > 0)
  DsparkWeights dspark;
  // MTP-1: a V4 config with num_nextn_predict_layers >= 1, no DSpark keys, and `mtp.0.*` in the
  // checkpoint (HF conversions drop them; such checkpoints load without a drafter).
  bool has_mtp = false;
  MtpWeights mtp;
  HcWeightsT hc_head;  // V4 only (V4.1's single-pass mHC has no head collapse weights)
  std::vector<LayerWeights> layers;
};

// Takes every backbone tensor from `source` (checking names and shapes) and rejects
// tensors nobody took. `keep_expert` (expert parallelism): when set, a backbone layer's routed
// expert e of layer l is kept only if keep_expert(l, e); the others are taken (names and
// shapes still checked) and dropped, leaving MoeWeights::experts[e] undefined. The drafters'
// experts are always kept.
ModelWeights load_model_weights(const ModelConfig& config, WeightSource& source,
                                const std::function<bool(int64_t, int64_t)>& keep_expert = {});

}  // namespace deepinfer
