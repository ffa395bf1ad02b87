// CacheLayout: the shape of DeepSeek-V4's per-request attention state, in plain numbers
// (MODEL_SPEC.md §A.3, §A.5, §A.6). The engine fills it from ModelConfig; this layer does
// not link `io` and never touches device memory.
//
// Per request, each layer keeps:
//   * a sliding window of K=V vectors: only positions t-W+1..t are read by query t (every layer);
//   * compressed entries, one per `compress_ratio` tokens (ratio-4 "CSA" and ratio-128 "HCA");
//   * indexer keys, one per `compress_ratio` tokens (the layers that own an indexer: V4 ratio 4);
//   * compressor state of fixed size: partial windows and the overlap window (ratio 4).
//
// Layers with the same state kind and ratio form one StateGroup sharing one block table per
// request: block id b of a group addresses block b of every member layer's tensor
// ([n_blocks, block_size, entry_bytes] per layer), so one allocation serves all of them.
// A layer that reads another layer's compressed cache (V4.1 "reuse" layers) owns none and
// is described here with compress_ratio 0 and has_indexer false.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer {

// What one backbone (or drafter) layer owns.
struct LayerState {
  int64_t compress_ratio = 0;          // 0: window only; m > 0: one compressed entry per m tokens
  bool has_indexer = false;            // owns indexer keys (one per m tokens); needs m > 0
  int64_t compressor_state_bytes = 0;  // fixed per-request compressor state of this layer
};

enum class StateKind { kWindow, kCompressed, kIndexer };

const char* state_kind_name(StateKind kind);

// Layers sharing one block table per request. `ratio` is tokens per entry (1 for kWindow).
struct StateGroup {
  StateKind kind = StateKind::kWindow;
  int64_t ratio = 1;
  std::vector<int64_t> layers;  // member layer indices, ascending
  int64_t block_bytes = 0;      // bytes of one block summed over member layers

  // Entries that exist once `n_tokens` tokens are computed: n_tokens for the window
  // (positions), floor(n_tokens / ratio) for compressed entries and indexer keys
  // (entry w exists once token ratio*w + ratio - 1 is computed; §A.5).
  int64_t n_entries(int64_t n_tokens) const { return n_tokens / ratio; }
  std::string name() const;  // e.g. "window", "compressed/4", "indexer/4"
};

struct CacheLayout {
  int64_t window = 128;               // W: query t reads window positions max(0,t-W+1)..t
  int64_t block_size = 64;            // entries per block (tokens for window blocks)
  int64_t window_entry_bytes = 0;     // one position's window K=V in one layer
  int64_t compressed_entry_bytes = 0; // one compressed entry in one layer
  int64_t indexer_entry_bytes = 0;    // one indexer key in one layer
  std::vector<LayerState> layers;

  // Throws kInvalidInput naming the bad field.
  void validate() const;

  // Groups in a fixed order: the window group (if any layer), then compressed groups by
  // ascending ratio, then indexer groups by ascending ratio.
  std::vector<StateGroup> groups() const;

  // Sum of compressor_state_bytes over layers: the size of one per-request state slot.
  int64_t state_slot_bytes() const;
};

// Bytes of the fp32 compressor state of one layer (§A.5): the main compressor
// (d_c = head_dim) plus, with an indexer, its own compressor (d_c = index_head_dim).
// A compressor with ratio m keeps (a, z) pairs of c*d_c floats for m slots, or 2m slots
// with overlap factor c = 2 when m == 4 (V4's rule). Ratio 0 gives 0.
int64_t compressor_state_bytes(int64_t compress_ratio, int64_t head_dim, bool has_indexer,
                               int64_t index_head_dim);

// The V4 layout (Flash / Pro and their MTP-1 stage) from ModelConfig's numbers:
// `compress_ratios` one per layer (0, 4 or 128; drafter stages appended as ratio 0),
// indexer on exactly the ratio-4 layers, compressor state from compressor_state_bytes().
// Entry bytes depend on the cache formats the runtime picks.
CacheLayout v4_cache_layout(const std::vector<int64_t>& compress_ratios, int64_t window,
                            int64_t block_size, int64_t head_dim, int64_t index_head_dim,
                            int64_t window_entry_bytes, int64_t compressed_entry_bytes,
                            int64_t indexer_entry_bytes);

}  // namespace deepinfer
