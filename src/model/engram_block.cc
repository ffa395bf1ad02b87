// Engram before a layer (MODEL_SPEC §C.8; ops/engram/engram.h): each row's n-gram of its
// own token and the max_ngram_size - 1 tokens before it in its sequence (the state keeps
// the last ones of earlier chunks; never across the sequence start), hashed per column into
// the layer's table, the gathered FP8 rows projected, gated per stream and added to X.
// engram_rows / engram_apply split the n-gram rows (from the token history, known to every
// rank) from the per-row update, for the context-parallel forward.
#include <algorithm>

#include "model/model_batch.h"

namespace deepinfer {

void Model::engram_block(int64_t layer, const Batch& batch, float* X) const {
  engram_apply(layer, engram_rows(layer, batch).data(), batch.n_rows(), X);
}

const EngramLayerTables& Model::engram_tables_of(int64_t layer) const {
  const auto& ids_cfg = config_.engram.layer_ids;
  const size_t slot = std::find(ids_cfg.begin(), ids_cfg.end(), layer) - ids_cfg.begin();
  ICHECK(slot < engram_tables_.size());
  return engram_tables_[slot];
}

std::vector<int32_t> Model::engram_rows(int64_t layer, const Batch& batch) const {
  const int max_ngram = engram_tables_of(layer).max_ngram;
  std::vector<int32_t> rows(batch.n_rows() * max_ngram);
  for (const Batch::Segment& seg : batch.segments) {
    // The sequence as far as it is known here: recent tokens, then this chunk.
    std::vector<int32_t> seq = seg.state->recent_tokens;
    const int64_t first = static_cast<int64_t>(seq.size());
    seq.insert(seq.end(), batch.tokens.begin() + seg.begin, batch.tokens.begin() + seg.end);
    engram_ngram_rows(seq.data(), first, static_cast<int64_t>(seq.size()), max_ngram,
                      &rows[seg.begin * max_ngram]);
  }
  return rows;
}

void Model::engram_apply(int64_t layer, const int32_t* rows, int64_t N, float* X) const {
  const ModelConfig& cfg = config_;
  const EngramLayerTables& tables = engram_tables_of(layer);
  const EngramWeights& w = weights_.layers[layer].engram;
  std::vector<int64_t> ids(N * tables.n_cols);
  const EngramTokenMap& map = weights_.engram_map;
  engram_hash_ids({&tables, map.ids.data(), static_cast<int64_t>(map.ids.size()),
                   map.compressed_vocab_size, static_cast<int32_t>(cfg.engram.pad_token_id)},
                  rows, N, ids.data());
  EngramLayerParams p;
  p.n_rows = N;
  p.n_hc = static_cast<int>(cfg.hc_mult);
  p.dim = cfg.hidden_size;
  p.layer = &tables;
  p.ids = ids.data();
  p.embed = static_cast<const uint8_t*>(w.table.raw());
  p.embed_scale = static_cast<const uint8_t*>(w.table_scale.raw());
  p.n_table_rows = w.table.size(0);
  p.wkv = w.wkv.f32();
  p.q_weight = w.q_weight.f32();
  p.k_weight = w.k_weight.f32();
  p.eps = static_cast<float>(cfg.rms_norm_eps);
  engram_layer_ref(p, X);
}

}  // namespace deepinfer
