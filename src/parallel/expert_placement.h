// ExpertPlacement: which rank of an expert-parallel (EP) group holds which copies of the routed
// experts of one MoE layer (DESIGN.md §1 `parallel`; issue 19 deliverable 3).
//
// E logical experts, EP size P, S physical slots per rank: S = E / P + extra slots (the EPLB's
// redundant copies, parallel/eplb.h). Every slot holds one logical expert or is empty (-1);
// every logical expert has at least one copy. The default placement is contiguous blocks:
// expert e in slot e % (E/P) of rank e / (E/P), the extra slots empty.
//
// Copy choice: a row of rank h routed to expert e uses copy choose(e, h, ordinal), where
// `ordinal` counts the rows of this step on rank h routed to e so far; it round-robins over the
// copies (offset by h), so every rank computes it locally with no communication. Which copy a
// row uses never changes its result: every copy holds the same weights, and in batch-invariant
// mode an expert's output row does not depend on the other rows it runs with.
//
// Immutable value type; thread-safe to read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer {

struct ExpertCopy {
  int32_t rank = 0;
  int32_t slot = 0;
  bool operator==(const ExpertCopy&) const = default;
};

class ExpertPlacement {
 public:
  ExpertPlacement() = default;

  // Contiguous blocks; throws kInvalidInput when ep_size does not divide n_experts
  // ("--expert-parallel-size 3 does not divide the 256 routed experts") or a count is not
  // positive / extra_slots_per_rank is negative.
  static ExpertPlacement contiguous(int64_t n_experts, int64_t ep_size,
                                    int64_t extra_slots_per_rank = 0);
  // From a slot table: slot_experts[rank * slots_per_rank + slot] = the logical expert in that
  // slot, or -1. Throws kInvalidInput for a table of the wrong size, an id out of range or an
  // expert without a copy.
  static ExpertPlacement from_slots(int64_t n_experts, int64_t ep_size, int64_t slots_per_rank,
                                    std::vector<int32_t> slot_experts);

  int64_t n_experts() const { return n_experts_; }
  int64_t ep_size() const { return ep_size_; }
  int64_t slots_per_rank() const { return slots_per_rank_; }
  // The logical expert in (rank, slot), -1 when empty.
  int32_t expert_at(int64_t rank, int64_t slot) const;
  // The copies of `expert`, ascending (rank, slot).
  const std::vector<ExpertCopy>& copies(int64_t expert) const;
  bool holds(int64_t rank, int64_t expert) const;
  // The distinct logical experts rank `rank` holds, ascending.
  std::vector<int32_t> experts_of(int64_t rank) const;
  const ExpertCopy& choose(int64_t expert, int64_t home_rank, int64_t ordinal) const;
  const std::vector<int32_t>& slot_experts() const { return slot_experts_; }

  bool operator==(const ExpertPlacement& other) const {
    return n_experts_ == other.n_experts_ && ep_size_ == other.ep_size_ &&
           slots_per_rank_ == other.slots_per_rank_ && slot_experts_ == other.slot_experts_;
  }
  // "rank 0: 0 1 2 3 | rank 1: 4 5 6 7 3" (logs and test messages).
  std::string describe() const;

 private:
  int64_t n_experts_ = 0, ep_size_ = 0, slots_per_rank_ = 0;
  std::vector<int32_t> slot_experts_;           // [ep_size * slots_per_rank]
  std::vector<std::vector<ExpertCopy>> copies_;  // [n_experts]
};

}  // namespace deepinfer
