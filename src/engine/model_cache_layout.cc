#include "engine/model_cache_layout.h"

#include "io/config_parser.h"

namespace deepinfer {

CacheLayout model_cache_layout(const ModelConfig& config, int64_t block_size,
                               int64_t window_entry_bytes, int64_t compressed_entry_bytes,
                               int64_t indexer_entry_bytes) {
  ModelConfig cfg = config;
  complete_model_config(&cfg);
  CacheLayout layout;
  layout.window = cfg.sliding_window;
  layout.block_size = block_size;
  layout.window_entry_bytes = window_entry_bytes;
  layout.compressed_entry_bytes = compressed_entry_bytes;
  layout.indexer_entry_bytes = indexer_entry_bytes;
  for (const LayerPlan& p : cfg.plan) {
    LayerState s;
    s.compress_ratio = p.owns_compressor ? p.ratio : 0;
    s.has_indexer = p.owns_index_keys;
    s.compressor_state_bytes =
        p.owns_compressor ? compressor_state_bytes(p.ratio, cfg.head_dim, p.own_index_compressor,
                                                   cfg.index_head_dim)
                          : 0;
    layout.layers.push_back(s);
  }
  layout.validate();
  return layout;
}

}  // namespace deepinfer
