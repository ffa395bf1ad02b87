#include "cache/cache_layout.h"

#include <algorithm>
#include <map>

#include "base/error.h"

namespace deepinfer {

const char* state_kind_name(StateKind kind) {
  switch (kind) {
    case StateKind::kWindow: return "window";
    case StateKind::kCompressed: return "compressed";
    case StateKind::kIndexer: return "indexer";
  }
  return "?";
}

std::string StateGroup::name() const {
  if (kind == StateKind::kWindow) return state_kind_name(kind);
  return std::string(state_kind_name(kind)) + "/" + std::to_string(ratio);
}

void CacheLayout::validate() const {
  CHECK(window > 0) << "CacheLayout: window must be positive, got " << window;
  CHECK(block_size > 0) << "CacheLayout: block_size must be positive, got " << block_size;
  CHECK(!layers.empty()) << "CacheLayout: no layers";
  CHECK(window_entry_bytes > 0) << "CacheLayout: window_entry_bytes must be positive, got "
                                << window_entry_bytes;
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerState& s = layers[l];
    CHECK(s.compress_ratio >= 0) << "CacheLayout: layer " << l << " has negative compress_ratio "
                                 << s.compress_ratio;
    CHECK(!s.has_indexer || s.compress_ratio > 0)
        << "CacheLayout: layer " << l << " has an indexer but compress_ratio 0";
    CHECK(s.compressor_state_bytes >= 0)
        << "CacheLayout: layer " << l << " has negative compressor_state_bytes";
    if (s.compress_ratio > 0) {
      CHECK(compressed_entry_bytes > 0)
          << "CacheLayout: layer " << l << " is compressed but compressed_entry_bytes is "
          << compressed_entry_bytes;
    }
    if (s.has_indexer) {
      CHECK(indexer_entry_bytes > 0) << "CacheLayout: layer " << l
                                     << " has an indexer but indexer_entry_bytes is "
                                     << indexer_entry_bytes;
    }
  }
}

std::vector<StateGroup> CacheLayout::groups() const {
  validate();
  std::vector<StateGroup> out;
  StateGroup window_group;
  window_group.kind = StateKind::kWindow;
  for (size_t l = 0; l < layers.size(); ++l) window_group.layers.push_back(int64_t(l));
  window_group.block_bytes = block_size * window_entry_bytes * int64_t(layers.size());
  out.push_back(window_group);

  // std::map keeps ratios ascending.
  std::map<int64_t, std::vector<int64_t>> compressed, indexer;
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].compress_ratio > 0) compressed[layers[l].compress_ratio].push_back(int64_t(l));
    if (layers[l].has_indexer) indexer[layers[l].compress_ratio].push_back(int64_t(l));
  }
  auto add = [&](StateKind kind, const std::map<int64_t, std::vector<int64_t>>& by_ratio,
                 int64_t entry_bytes) {
    for (const auto& [ratio, members] : by_ratio) {
      StateGroup g;
      g.kind = kind;
      g.ratio = ratio;
      g.layers = members;
      g.block_bytes = block_size * entry_bytes * int64_t(members.size());
      out.push_back(g);
    }
  };
  add(StateKind::kCompressed, compressed, compressed_entry_bytes);
  add(StateKind::kIndexer, indexer, indexer_entry_bytes);
  return out;
}

int64_t CacheLayout::state_slot_bytes() const {
  int64_t total = 0;
  for (const LayerState& s : layers) total += s.compressor_state_bytes;
  return total;
}

int64_t compressor_state_bytes(int64_t compress_ratio, int64_t head_dim, bool has_indexer,
                               int64_t index_head_dim) {
  CHECK(compress_ratio >= 0) << "compressor_state_bytes: negative ratio " << compress_ratio;
  if (compress_ratio == 0) return 0;
  const int64_t overlap = compress_ratio == 4 ? 2 : 1;
  const int64_t slots = overlap * compress_ratio;
  auto one = [&](int64_t d_c) {
    return slots * 2 /* a and z */ * overlap * d_c * int64_t(sizeof(float));
  };
  return one(head_dim) + (has_indexer ? one(index_head_dim) : 0);
}

CacheLayout v4_cache_layout(const std::vector<int64_t>& compress_ratios, int64_t window,
                            int64_t block_size, int64_t head_dim, int64_t index_head_dim,
                            int64_t window_entry_bytes, int64_t compressed_entry_bytes,
                            int64_t indexer_entry_bytes) {
  CacheLayout layout;
  layout.window = window;
  layout.block_size = block_size;
  layout.window_entry_bytes = window_entry_bytes;
  layout.compressed_entry_bytes = compressed_entry_bytes;
  layout.indexer_entry_bytes = indexer_entry_bytes;
  for (size_t l = 0; l < compress_ratios.size(); ++l) {
    const int64_t ratio = compress_ratios[l];
    CHECK(ratio == 0 || ratio == 4 || ratio == 128)
        << "v4_cache_layout: layer " << l << " has compress ratio " << ratio
        << "; V4 uses 0, 4 or 128";
    LayerState s;
    s.compress_ratio = ratio;
    s.has_indexer = ratio == 4;
    s.compressor_state_bytes = compressor_state_bytes(ratio, head_dim, s.has_indexer, index_head_dim);
    layout.layers.push_back(s);
  }
  layout.validate();
  return layout;
}

}  // namespace deepinfer
