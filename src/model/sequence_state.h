// Incremental state of one sequence (MODEL_SPEC §A.3, §A.5, §C.5-C.8): per layer the
// sliding-window ring of K=V vectors; in the layers that own them (LayerPlan) the
// compressor's partial window and overlap halves, the compressed entries and the index
// keys, which reader layers use in place; the last tokens for Engram's n-grams. Host
// memory, fp32. A fresh state is at position 0; every forward chunk advances `n_tokens`.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

// Gated-pooling compressor of one layer (main: width d, indexer: width d_I). The raw
// per-token rows (a_t, z_t) are kept by position, slot t mod n_slots, so a window is pooled
// from the positions it covers and a rollback needs no undo (MODEL_SPEC §A.5, §D.6).
struct CompressorState {
  int64_t ratio = 0;     // m
  int64_t width = 0;     // d_c
  bool overlap = false;  // ratio 4: two series, entry w pools window w-1 (A) and w (B)
  int64_t n_slots = 0;   // rows kept: m (2m with overlap) + the rollback depth
  std::vector<float> rows_a, rows_z;  // [n_slots, c*d_c]; z includes ape
  // Emitted entries [n_entries, d_c] after norm, RoPE at m*w and QAT rounding (the index
  // compressor of V4 leaves them empty: its entries are the layer's index_keys).
  std::vector<float> entries;
  int64_t n_entries = 0;

  void init(int64_t ratio, int64_t width, int64_t rollback_depth);
};

struct SequenceLayerState {
  std::vector<float> ring;  // [n_ring_slots, d]; slot p mod n_ring_slots holds position p
  CompressorState compressor;
  CompressorState index_compressor;  // V4 ratio-4 layers: the index keys' own compressor
  std::vector<float> index_keys;     // [entries, d_I] after RoPE and QAT rounding
};

struct SequenceState {
  int64_t n_tokens = 0;  // positions already processed
  // Window slots per layer: W + the rollback depth + 1, so positions a rolled-back chunk
  // wrote never held a position a later query reads (Model::truncate).
  int64_t n_ring_slots = 0;
  // The shortest length Model::truncate may give the state: max over its forwards of (length
  // at the forward's end - rollback depth). The rings hold the last W + depth + 1 positions
  // written, so after a forward, a truncation and a shorter forward, the positions below the
  // older bound are overwritten: "at most depth back" per call is not enough.
  int64_t rollback_floor = 0;
  std::vector<SequenceLayerState> layers;
  // SWA bounded replay (model/swa_replay.h): the decoder layers never computed the positions
  // below this one, and their window queries see no key below it. 0: every position.
  int64_t decoder_window_floor = 0;
  // The last max_ngram_size - 1 + rollback depth tokens (oldest first, fewer near the start),
  // for Engram's n-grams.
  std::vector<int32_t> recent_tokens;
  // DSpark drafter (model/dspark.cc): per stage, the context K=V of committed positions,
  // slot p mod n_draft_slots, written by every forward; n_draft_slots = window + block + 1,
  // so that the slots a rejected draft would write never hold a position still read.
  std::vector<std::vector<float>> draft_rings;
  int64_t n_draft_slots = 0;
  // MTP-1 drafter (model/mtp.cc). `mtp_ring`: the MTP block's window K=V of position t (from
  // the backbone's final streams X^L[t] and token t+1), slot t mod n_mtp_slots, written by the
  // forward that sees token t+1; n_mtp_slots = window + rollback depth + 1 (as the backbone's
  // rings). `mtp_streams`: X^L [n_hc*D] of the last rollback depth + 1 positions, slot
  // t mod n_mtp_stream_slots, so that after a rollback the last committed position's are there.
  std::vector<float> mtp_ring;
  int64_t n_mtp_slots = 0;
  std::vector<float> mtp_streams;
  int64_t n_mtp_stream_slots = 0;
};

}  // namespace deepinfer
