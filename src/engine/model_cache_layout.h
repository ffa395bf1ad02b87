// The per-request attention state of a model (cache/cache_layout.h) from its layer plan
// (io/layer_plan.h): a layer holds compressed entries and index keys only where it owns
// them (V4: every ratio>0 layer; V4.1: the KV sources), so V4.1's reuse and reindex layers
// cost nothing beyond their window.
#pragma once

#include <cstdint>

#include "cache/cache_layout.h"
#include "io/model_config.h"

namespace deepinfer {

CacheLayout model_cache_layout(const ModelConfig& config, int64_t block_size,
                               int64_t window_entry_bytes, int64_t compressed_entry_bytes,
                               int64_t indexer_entry_bytes);

}  // namespace deepinfer
