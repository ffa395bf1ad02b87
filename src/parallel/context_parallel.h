// Context parallelism (CP) for long prefills (issue 19 deliverable 5; DeepInfer's zigzag "mirror"
// CP, research/deepinfer-source.md §7): the split of one prefill chunk's positions over the ranks
// of a CP group, and the row exchange the CP forward (model/context_parallel_forward.cc) runs
// over the group's Communicator.
//
// Zigzag split of a chunk of L positions over cp ranks: the chunk is cut into 2*cp pieces of
// C = ceil(L / (2*cp)) positions, piece j = offsets [j*C, min((j+1)*C, L)). Rank r owns pieces r and
// 2*cp-1-r (an early and a late piece, so causal attention work is balanced). Padding rule: it is
// as if L were padded to 2*cp*C with positions nobody computes, so only the last pieces can be
// short or empty (pieces j*C >= L are empty; a rank may own no position at all, e.g. L = 1). Every
// offset 0..L-1 belongs to exactly one rank. Offsets are relative to the chunk's first position
// (the sequence's n_tokens before the chunk).
//
// Exchange: gather_rows all-gathers per-position rows (fp32, any width) so that every rank ends
// with the rows of all L offsets in offset order. Each rank contributes max_rows() = 2*C rows
// (its own rows, then padding), so one all_gather of 2*C*width floats per rank does it; the
// padding costs at most 2*cp - 1 rows per call. What the CP forward exchanges per layer and its
// bytes per token: model/context_parallel_forward.cc and Model::forward_context_parallel.
//
// Thread-safety: a ContextParallel is used by one thread at a time (its Communicator's rule).
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/communicator.h"

namespace deepinfer {

class ZigzagSplit {
 public:
  // Throws kInvalidInput for length < 0 or cp < 1.
  ZigzagSplit(int64_t length, int cp);

  int64_t length() const { return length_; }
  int cp() const { return cp_; }
  int64_t piece() const { return piece_; }          // C (0 when length is 0)
  int64_t max_rows() const { return 2 * piece_; }   // rows any rank owns at most
  // The offsets rank r owns, ascending (piece r, then piece 2*cp-1-r).
  std::vector<int64_t> offsets(int rank) const;
  // The rank owning an offset in [0, length).
  int owner(int64_t offset) const;

 private:
  int64_t length_;
  int cp_;
  int64_t piece_;
};

// A CP group: the communicator of its ranks (host memory; rank() / size() are the CP rank and
// degree). Not owning.
class ContextParallel {
 public:
  // Throws kInvalidInput when the communicator's memory is not host (the CPU backend).
  explicit ContextParallel(Communicator& comm);

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  Communicator& comm() const { return *comm_; }

  // full [split.length(), width] (offset order) = every rank's `mine` [offsets(rank).size(), width]
  // placed at its offsets. Collective over the group.
  void gather_rows(const ZigzagSplit& split, const float* mine, int64_t width, float* full) const;

  // Throws kInvalidInput on every rank when the ranks' `values` differ (callers pass what must
  // agree: the chunk's length, start position, a hash of its tokens); collective.
  void check_agree(const std::vector<int64_t>& values, const char* what) const;

 private:
  Communicator* comm_;
};

// FNV-1a over the ids (for check_agree).
int64_t hash_tokens(const int32_t* tokens, int64_t n);

}  // namespace deepinfer
