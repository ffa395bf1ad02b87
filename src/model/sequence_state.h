// Incremental state of one sequence (MODEL_SPEC §A.3, §A.5, §C.5-C.8): per layer the
// sliding-window ring of K=V vectors; in the layers that own them (LayerPlan) the
// compressor's partial window and overlap halves, the compressed entries and the index
// keys, which reader layers use in place; the last tokens for Engram's n-grams. Host
// memory, fp32. A fresh state is at position 0; every forward chunk advances `n_tokens`.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

// Gated-pooling compressor of one layer (main: width d, indexer: width d_I).
struct CompressorState {
  int64_t ratio = 0;   // m
  int64_t width = 0;   // d_c
  bool overlap = false;  // ratio 4: two series, entry w pools window w-1 (A) and w (B)
  // Current (incomplete) window: slot t mod m holds (a_t, z_t), each c*d_c wide (z has ape).
  std::vector<float> cur_a, cur_z;
  // Overlap only: A halves (first d_c channels) of the previous complete window.
  std::vector<float> prev_a, prev_z;
  bool has_prev = false;
  // Emitted entries [n_entries, d_c] after norm, RoPE at m*w and QAT rounding (the index
  // compressor of V4 leaves them empty: its entries are the layer's index_keys).
  std::vector<float> entries;
  int64_t n_entries = 0;

  void init(int64_t ratio, int64_t width);
};

struct SequenceLayerState {
  std::vector<float> ring;  // [W, d]; slot p mod W holds position p
  CompressorState compressor;
  CompressorState index_compressor;  // V4 ratio-4 layers: the index keys' own compressor
  std::vector<float> index_keys;     // [entries, d_I] after RoPE and QAT rounding
};

struct SequenceState {
  int64_t n_tokens = 0;  // positions already processed
  std::vector<SequenceLayerState> layers;
  // The last max_ngram_size - 1 tokens (oldest first, fewer near the start) for Engram.
  std::vector<int32_t> recent_tokens;
  // DSpark drafter (model/dspark.cc): per stage, the context K=V of committed positions,
  // slot p mod n_draft_slots, written by every forward; n_draft_slots = window + block + 1,
  // so that the slots a rejected draft would write never hold a position still read.
  std::vector<std::vector<float>> draft_rings;
  int64_t n_draft_slots = 0;
};

}  // namespace deepinfer
