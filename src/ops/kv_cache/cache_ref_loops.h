// The slot loops shared by the reference (CPU) store / load of the paged caches
// (kv_cache_ref.cc, index_cache_ref.cc). Layout: KvCacheLayout or IndexCacheLayout (block_size,
// head_dim, data_offset(slot)). `cache` names the cache in errors ("kv cache").
#pragma once

#include <algorithm>
#include <cstdint>

#include "base/error.h"

namespace deepinfer::cache_ref {

// Slot -1 (skip) or one in [0, n_blocks * block_size); anything else fails naming the slot.
template <class Layout>
void check_slot(const char* cache, const Layout& layout, int32_t slot, int64_t n_blocks) {
  CHECK(slot >= -1 && slot < n_blocks * layout.block_size)
      << cache << ": slot " << slot << " outside [-1, " << n_blocks * layout.block_size << ")";
}

// For i in [0, n): checks slots[i], skips slot -1, else calls store(i, data of slots[i]).
template <class Layout, class Store>
void for_each_store(const char* cache, const Layout& layout, const int32_t* slots, int64_t n,
                    uint8_t* cache_bytes, int64_t n_blocks, Store store) {
  for (int64_t i = 0; i < n; ++i) {
    check_slot(cache, layout, slots[i], n_blocks);
    if (slots[i] < 0) continue;
    store(i, cache_bytes + layout.data_offset(slots[i]));
  }
}

// For i in [0, n): checks slots[i]; row y = out + i * head_dim is zero for slot -1, else
// load(y, slots[i], data of slots[i]) fills it.
template <class Layout, class Load>
void for_each_load(const char* cache, const Layout& layout, const uint8_t* cache_bytes,
                   int64_t n_blocks, const int32_t* slots, int64_t n, float* out, Load load) {
  const int64_t d = layout.head_dim;
  for (int64_t i = 0; i < n; ++i) {
    check_slot(cache, layout, slots[i], n_blocks);
    float* y = out + i * d;
    if (slots[i] < 0) {
      std::fill(y, y + d, 0.0f);
      continue;
    }
    load(y, slots[i], cache_bytes + layout.data_offset(slots[i]));
  }
}

}  // namespace deepinfer::cache_ref
