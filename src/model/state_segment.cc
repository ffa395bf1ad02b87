#include "model/state_segment.h"

#include "base/error.h"

namespace deepinfer {

namespace {

std::vector<float>& array_of(SequenceLayerState& ls, int a) {
  return a == 0 ? ls.compressor.entries : a == 1 ? ls.index_compressor.entries : ls.index_keys;
}
const std::vector<float>& array_of(const SequenceLayerState& ls, int a) {
  return array_of(const_cast<SequenceLayerState&>(ls), a);
}

int64_t floats_bytes(const std::vector<float>& v) { return int64_t(v.size() * sizeof(float)); }

}  // namespace

int64_t StateSegment::bytes() const {
  int64_t n = 0;
  for (const auto& arrays : appended) {
    for (const auto& v : arrays) n += floats_bytes(v);
  }
  for (const SequenceLayerState& ls : boundary.layers) {
    n += floats_bytes(ls.ring) + floats_bytes(ls.compressor.rows_a) + floats_bytes(ls.compressor.rows_z) +
         floats_bytes(ls.index_compressor.rows_a) + floats_bytes(ls.index_compressor.rows_z);
  }
  for (const auto& r : boundary.draft_rings) n += floats_bytes(r);
  n += floats_bytes(boundary.mtp_ring) + floats_bytes(boundary.mtp_streams);
  n += int64_t(boundary.recent_tokens.size() * sizeof(int32_t));
  return n;
}

std::shared_ptr<const StateSegment> export_segment(const SequenceState& state, const StateSegment* parent) {
  const size_t n_layers = state.layers.size();
  ICHECK(parent == nullptr || (parent->end <= state.n_tokens && parent->length.size() == n_layers))
      << "export_segment: the parent segment is not a prefix of this state";
  auto s = std::make_shared<StateSegment>();
  s->begin = parent ? parent->end : 0;
  s->end = state.n_tokens;
  s->appended.resize(n_layers);
  s->length.resize(n_layers);
  s->boundary.n_tokens = state.n_tokens;
  s->boundary.n_ring_slots = state.n_ring_slots;
  s->boundary.rollback_floor = state.rollback_floor;  // the rings are copied as they are
  s->boundary.recent_tokens = state.recent_tokens;
  s->boundary.draft_rings = state.draft_rings;
  s->boundary.n_draft_slots = state.n_draft_slots;
  s->boundary.mtp_ring = state.mtp_ring;
  s->boundary.n_mtp_slots = state.n_mtp_slots;
  s->boundary.mtp_streams = state.mtp_streams;
  s->boundary.n_mtp_stream_slots = state.n_mtp_stream_slots;
  s->boundary.layers.resize(n_layers);
  for (size_t l = 0; l < n_layers; ++l) {
    const SequenceLayerState& from = state.layers[l];
    SequenceLayerState& to = s->boundary.layers[l];
    to.ring = from.ring;
    to.compressor = from.compressor;
    to.index_compressor = from.index_compressor;
    to.compressor.entries.clear();
    to.index_compressor.entries.clear();
    for (int a = 0; a < StateSegment::kArrays; ++a) {
      const std::vector<float>& v = array_of(from, a);
      const size_t start = parent ? parent->length[l][size_t(a)] : 0;
      ICHECK(start <= v.size()) << "export_segment: layer " << l << " holds fewer entries than its parent";
      s->appended[l][size_t(a)].assign(v.begin() + std::ptrdiff_t(start), v.end());
      s->length[l][size_t(a)] = v.size();
    }
  }
  return s;
}

std::unique_ptr<SequenceState> import_segments(std::span<const StateSegment* const> chain) {
  CHECK(!chain.empty()) << "import_segments: no segments";
  for (size_t i = 0; i < chain.size(); ++i) {
    ICHECK(chain[i]->begin == (i == 0 ? 0 : chain[i - 1]->end))
        << "import_segments: segment " << i << " does not continue the chain";
  }
  const StateSegment& last = *chain.back();
  auto state = std::make_unique<SequenceState>(last.boundary);
  for (size_t l = 0; l < state->layers.size(); ++l) {
    for (int a = 0; a < StateSegment::kArrays; ++a) {
      std::vector<float>& v = array_of(state->layers[l], a);
      v.reserve(last.length[l][size_t(a)]);
      for (const StateSegment* s : chain) {
        const std::vector<float>& part = s->appended[l][size_t(a)];
        v.insert(v.end(), part.begin(), part.end());
      }
      ICHECK(v.size() == last.length[l][size_t(a)]) << "import_segments: layer " << l << " entries do not add up";
    }
  }
  return state;
}

}  // namespace deepinfer
