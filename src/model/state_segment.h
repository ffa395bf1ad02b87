// StateSegment: a read-only piece of a SequenceState for prefix caching (issue 18; the
// engine's index is cache/prefix_cache.h). A segment covers positions [begin, end) after a
// parent segment ending at `begin` (none: begin 0):
//   * the append-only arrays (per layer: compressed entries, the V4 index compressor's
//     entries, index keys; V4.1: in the source layers that own them) store only the rows
//     positions [begin, end) appended, so a chain of segments shares them;
//   * everything per position (window rings, compressor raw rows, Engram's recent tokens,
//     the DSpark / MTP rings and streams) is copied whole at `end` (`boundary`): they are
//     bounded by the window and the ratios, not by the context.
// import_segments rebuilds the state at the last segment's end, equal in every element
// to the exported one, so a request resumed from it computes what a cold run computes.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/sequence_state.h"

namespace deepinfer {

struct StateSegment {
  int64_t begin = 0, end = 0;  // positions
  static constexpr int kArrays = 3;  // compressor.entries, index_compressor.entries, index_keys
  // [layer][array]: rows appended by positions [begin, end), and the array's length at end.
  std::vector<std::array<std::vector<float>, kArrays>> appended;
  std::vector<std::array<size_t, kArrays>> length;
  SequenceState boundary;  // the state at `end` with the append-only arrays empty
  int64_t bytes() const;   // host memory held (floats and tokens)
};

// The segment of `state` (at state.n_tokens) after `parent` (null: from position 0). The
// parent must be a segment of the same sequence's prefix.
std::shared_ptr<const StateSegment> export_segment(const SequenceState& state, const StateSegment* parent);

// The state at the end of `chain` (segments oldest first, each the parent of the next).
std::unique_ptr<SequenceState> import_segments(std::span<const StateSegment* const> chain);

}  // namespace deepinfer
