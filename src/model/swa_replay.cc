// SWA bounded replay (swa_replay.h): the decoder boundary from the layer plan, the checks
// of the mode, and the row selection that cuts a batch down to the kept positions.
#include "model/swa_replay.h"

#include <algorithm>

#include "base/error.h"

namespace deepinfer {

int64_t decoder_boundary(const ModelConfig& config) {
  for (int64_t l = 0; l < config.num_layers; ++l) {
    if (config.plan[l].owns_compressor && config.plan[l].ratio == 1) return l;
  }
  return -1;
}

void check_swa_bounded_replay(const ModelConfig& config, int64_t keep, int64_t rollback_depth,
                              bool has_mtp) {
  if (keep == 0) return;
  const char* flag = "swa_bounded_replay_keep (--swa-bounded-replay)";
  CHECK(keep > 0) << flag << " is " << keep << "; it must be positive (0: off)";
  const int64_t boundary = decoder_boundary(config);
  CHECK_KIND(kUnsupported, boundary >= 0)
      << flag << " needs a model whose decoder takes its long-range KV from a ratio-1 source "
      << "(V4.1); this model has no ratio-1 KV source";
  for (int64_t l = boundary + 1; l < config.num_layers; ++l) {
    const LayerPlan& p = config.plan[l];
    CHECK_KIND(kUnsupported, !p.owns_compressor && !p.owns_index_keys &&
                                 (p.kv_from < 0 || p.kv_from == boundary) &&
                                 (p.index_keys_from < 0 || p.index_keys_from == boundary))
        << flag << ": layer " << l << " after the decoder boundary (layer " << boundary
        << ") owns or reads long-range KV other than layer " << boundary << "'s";
  }
  for (int64_t l : config.engram.layer_ids) {
    CHECK_KIND(kUnsupported, l <= boundary)
        << flag << ": Engram before layer " << l << ", after the decoder boundary (layer "
        << boundary << "), is not supported";
  }
  CHECK_KIND(kUnsupported, !has_mtp) << flag << " is not supported with an MTP drafter";
  CHECK(keep >= config.sliding_window + rollback_depth)
      << flag << " keeps " << keep << " positions; it must keep at least the sliding window ("
      << config.sliding_window << ") + the rollback depth (" << rollback_depth
      << ") = " << config.sliding_window + rollback_depth
      << ", so that the decoder windows are full after a rollback";
}

std::vector<int64_t> Model::Batch::kept_rows(const std::vector<int64_t>& keep_from) const {
  ICHECK(keep_from.size() == segments.size());
  std::vector<int64_t> rows;
  for (size_t s = 0; s < segments.size(); ++s) {
    for (int64_t row = segments[s].begin; row < segments[s].end; ++row) {
      if (positions[row] >= keep_from[s]) rows.push_back(row);
    }
  }
  return rows;
}

Model::Batch Model::Batch::subset(const std::vector<int64_t>& rows) const {
  Batch b;
  b.compressors_fed = compressors_fed;
  size_t next = 0;
  for (const Segment& seg : segments) {
    const int64_t begin = b.n_rows();
    while (next < rows.size() && rows[next] < seg.end) {
      const int64_t row = rows[next++];
      ICHECK(row >= seg.begin);
      b.tokens.push_back(tokens[row]);
      b.positions.push_back(positions[row]);
      b.segment_of_row.push_back(static_cast<int32_t>(b.segments.size()));
    }
    const int64_t start = b.n_rows() > begin ? b.positions[begin] : seg.start_pos + (seg.end - seg.begin);
    b.segments.push_back({seg.state, begin, b.n_rows(), start, seg.all_logits});
  }
  ICHECK(next == rows.size());
  b.selections.resize(selections.size());
  for (size_t l = 0; l < selections.size(); ++l) {
    const Selection& from = selections[l];
    Selection& to = b.selections[l];
    for (int64_t row : rows) {
      if (!from.picks.empty()) to.picks.push_back(from.picks[row]);
      if (!from.candidates.empty()) to.candidates.push_back(from.candidates[row]);
    }
  }
  return b;
}

void gather_rows(std::vector<float>& v, const std::vector<int64_t>& rows, int64_t width) {
  for (size_t i = 0; i < rows.size(); ++i) {
    ICHECK(rows[i] >= static_cast<int64_t>(i));
    std::copy_n(v.begin() + rows[i] * width, width, v.begin() + static_cast<int64_t>(i) * width);
  }
  v.resize(rows.size() * width);
}

}  // namespace deepinfer
