// Model::Batch: the rows of one forward call (all chunks concatenated) with their
// positions and the segment (sequence) each row belongs to. Internal to the model.
#pragma once

#include <vector>

#include "model/model.h"

namespace deepinfer {

struct Model::Batch {
  struct Segment {
    SequenceState* state;
    int64_t begin, end;  // rows [begin, end) of the batch
    int64_t start_pos;   // position of row `begin`
    bool all_logits;
  };
  std::vector<int32_t> tokens;     // [N]
  std::vector<int64_t> positions;  // [N]
  std::vector<int32_t> segment_of_row;
  std::vector<Segment> segments;
  // Per layer that selects entries (LayerPlan::scores): per row, the picked entries of its
  // KV source (ascending) and, for the candidate source, the candidate mask over the
  // visible entries. Later layers of the same forward read them (topk_from,
  // candidates_from).
  struct Selection {
    std::vector<std::vector<int64_t>> picks;
    std::vector<std::vector<uint8_t>> candidates;
  };
  std::vector<Selection> selections;

  // SWA bounded replay (swa_replay.h): the layer whose compressors were already fed from the
  // rows this batch was cut from (attention_block then does not feed them again), or -1.
  int64_t compressors_fed = -1;

  int64_t n_rows() const { return static_cast<int64_t>(tokens.size()); }

  // SWA bounded replay: the rows whose position is at least their segment's keep_from (one
  // value per segment), ascending; and the batch of only such rows (ascending), tokens,
  // positions and segments renumbered (a segment may become empty), the per-row selections of
  // the layers already run gathered.
  std::vector<int64_t> kept_rows(const std::vector<int64_t>& keep_from) const;
  Batch subset(const std::vector<int64_t>& rows) const;

  static Batch build(std::span<const SequenceChunk> chunks) {
    Batch b;
    for (const SequenceChunk& c : chunks) {
      const int64_t begin = b.n_rows();
      const int64_t start = c.state->n_tokens;
      for (size_t i = 0; i < c.tokens.size(); ++i) {
        b.tokens.push_back(c.tokens[i]);
        b.positions.push_back(start + static_cast<int64_t>(i));
        b.segment_of_row.push_back(static_cast<int32_t>(b.segments.size()));
      }
      b.segments.push_back({c.state, begin, b.n_rows(), start, c.all_logits});
    }
    return b;
  }
};

// The per-row inputs of a layer's compressors (Model::compressor_inputs): a, z [N, main_width]
// (main_width = 2d with ratio 4's overlap, else d; z = 0 without a gate), and for V4's index
// compressor ai, zi [N, index_width] (2 d_I; empty otherwise). ape is added when stepping.
struct Model::CompressorInputs {
  int64_t main_width = 0, index_width = 0;
  std::vector<float> a, z, ai, zi;
};

}  // namespace deepinfer
