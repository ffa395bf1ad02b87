#include "parallel/expert_placement.h"

#include <sstream>

#include "base/error.h"

namespace deepinfer {

ExpertPlacement ExpertPlacement::contiguous(int64_t n_experts, int64_t ep_size,
                                            int64_t extra_slots_per_rank) {
  CHECK(n_experts > 0) << "expert parallelism needs routed experts (the model has " << n_experts
                       << ")";
  CHECK(ep_size > 0) << "--expert-parallel-size must be positive (got " << ep_size << ")";
  CHECK(n_experts % ep_size == 0) << "--expert-parallel-size " << ep_size
                                  << " does not divide the " << n_experts << " routed experts";
  CHECK(extra_slots_per_rank >= 0) << "extra expert slots per rank must be >= 0 (got "
                                   << extra_slots_per_rank << ")";
  const int64_t per_rank = n_experts / ep_size, slots = per_rank + extra_slots_per_rank;
  std::vector<int32_t> table(ep_size * slots, -1);
  for (int64_t e = 0; e < n_experts; ++e) {
    table[(e / per_rank) * slots + e % per_rank] = static_cast<int32_t>(e);
  }
  return from_slots(n_experts, ep_size, slots, std::move(table));
}

ExpertPlacement ExpertPlacement::from_slots(int64_t n_experts, int64_t ep_size,
                                            int64_t slots_per_rank,
                                            std::vector<int32_t> slot_experts) {
  CHECK(n_experts > 0 && ep_size > 0 && slots_per_rank > 0)
      << "expert placement: " << n_experts << " experts, " << ep_size << " ranks, "
      << slots_per_rank << " slots per rank";
  CHECK(static_cast<int64_t>(slot_experts.size()) == ep_size * slots_per_rank)
      << "expert placement: a table of " << slot_experts.size() << " slots for " << ep_size
      << " ranks of " << slots_per_rank;
  ExpertPlacement p;
  p.n_experts_ = n_experts;
  p.ep_size_ = ep_size;
  p.slots_per_rank_ = slots_per_rank;
  p.copies_.resize(n_experts);
  for (int64_t i = 0; i < ep_size * slots_per_rank; ++i) {
    const int32_t e = slot_experts[i];
    if (e == -1) continue;
    CHECK(e >= 0 && e < n_experts) << "expert placement: slot " << i % slots_per_rank
                                   << " of rank " << i / slots_per_rank << " holds expert " << e
                                   << ", outside [0, " << n_experts << ")";
    p.copies_[e].push_back({static_cast<int32_t>(i / slots_per_rank),
                            static_cast<int32_t>(i % slots_per_rank)});
  }
  for (int64_t e = 0; e < n_experts; ++e) {
    CHECK(!p.copies_[e].empty()) << "expert placement: expert " << e << " has no copy";
  }
  p.slot_experts_ = std::move(slot_experts);
  return p;
}

int32_t ExpertPlacement::expert_at(int64_t rank, int64_t slot) const {
  ICHECK(rank >= 0 && rank < ep_size_ && slot >= 0 && slot < slots_per_rank_);
  return slot_experts_[rank * slots_per_rank_ + slot];
}

const std::vector<ExpertCopy>& ExpertPlacement::copies(int64_t expert) const {
  ICHECK(expert >= 0 && expert < n_experts_) << "expert " << expert;
  return copies_[expert];
}

bool ExpertPlacement::holds(int64_t rank, int64_t expert) const {
  for (const ExpertCopy& c : copies(expert)) {
    if (c.rank == rank) return true;
  }
  return false;
}

std::vector<int32_t> ExpertPlacement::experts_of(int64_t rank) const {
  std::vector<int32_t> out;
  for (int64_t e = 0; e < n_experts_; ++e) {
    if (holds(rank, e)) out.push_back(static_cast<int32_t>(e));
  }
  return out;
}

const ExpertCopy& ExpertPlacement::choose(int64_t expert, int64_t home_rank,
                                          int64_t ordinal) const {
  const std::vector<ExpertCopy>& c = copies(expert);
  return c[static_cast<size_t>((ordinal + home_rank) % static_cast<int64_t>(c.size()))];
}

std::string ExpertPlacement::describe() const {
  std::ostringstream os;
  for (int64_t r = 0; r < ep_size_; ++r) {
    if (r > 0) os << " | ";
    os << "rank " << r << ":";
    for (int64_t s = 0; s < slots_per_rank_; ++s) {
      const int32_t e = expert_at(r, s);
      if (e < 0) {
        os << " -";
      } else {
        os << " " << e;
      }
    }
  }
  return os.str();
}

}  // namespace deepinfer
