// StateCache: per-request block tables over fixed-size block pools, one pool and one table per
// StateGroup (see cache_layout.h), plus one compressor state slot per request. Accounting
// only: ids and counts, no device memory. Not thread-safe (the scheduler thread owns it).
//
// Positions and entries map to blocks by index:
//   * window group: position p lives in block table[p / block_size] at offset p % block_size.
//     Only positions a future query can read are kept: before computing positions
//     [s, s+n) the request needs [max(0, s-W+1), s+n); blocks wholly below s-W+1 are freed
//     (their table entries become kNoBlock) as the request advances.
//   * compressed / indexer group of ratio m: entry w (emitted once token m*w+m-1 is computed)
//     lives in table[w / block_size] at offset w % block_size; the table covers
//     floor((s+n)/m) entries and never shrinks while the request lives.
// The state slot is a dense id in [0, n_state_slots) held from the first allocation until
// free_request; a request whose allocation starts at position 0 must reset it.
//
// Freeing blocks that an in-flight device step still reads or writes is safe as long as the
// device executes steps in order: a block handed to another request is first written by a
// later step.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "cache/block_pool.h"
#include "cache/cache_layout.h"
#include "cache/pool_plan.h"

namespace deepinfer {

inline constexpr int32_t kNoBlock = -1;

class StateCache {
 public:
  // Pools sized by `plan` (n_blocks per group in layout.groups() order, n_state_slots).
  StateCache(CacheLayout layout, const PoolPlan& plan);

  const CacheLayout& layout() const { return layout_; }
  const std::vector<StateGroup>& groups() const { return groups_; }
  int64_t n_groups() const { return int64_t(groups_.size()); }
  // Index of the group holding `layer`'s state of `kind`, or -1 if the layer has none.
  int64_t group_index(StateKind kind, int64_t layer) const;

  // Whether request `id` (known or new) can get the blocks and slot to compute positions
  // [num_computed, num_computed + n_new), counting its own window blocks that slide out.
  bool can_allocate(int64_t id, int64_t num_computed, int64_t n_new) const;
  // Largest n in [0, n_max] with can_allocate(id, num_computed, n).
  int64_t max_allocatable(int64_t id, int64_t num_computed, int64_t n_max) const;
  // Frees the request's slid-out window blocks, then allocates what positions
  // [num_computed, num_computed + n_new) need. Throws kResourceExhausted (allocating
  // nothing) when can_allocate is false.
  void allocate(int64_t id, int64_t num_computed, int64_t n_new);
  // Frees window blocks no query at position >= num_computed can read.
  void release_slid_out(int64_t id, int64_t num_computed);
  // Frees every block and the slot of `id`; unknown ids are ignored.
  void free_request(int64_t id);

  // Whether a request of n_tokens can run alone in empty pools, one token per step.
  bool fits_alone(int64_t n_tokens) const;

  bool has_request(int64_t id) const { return requests_.count(id) != 0; }
  int64_t num_requests() const { return int64_t(requests_.size()); }
  // Block table of `id` in `group` (see the mapping above). ICHECKs that `id` is known.
  const std::vector<int32_t>& block_table(int64_t id, int64_t group) const;
  // State slot of `id`. ICHECKs that `id` is known.
  int32_t state_slot(int64_t id) const;

  int64_t num_blocks(int64_t group) const { return pools_.at(size_t(group)).num_blocks(); }
  int64_t num_free(int64_t group) const { return pools_.at(size_t(group)).num_free(); }
  int64_t num_slots() const { return slots_.num_blocks(); }
  int64_t num_free_slots() const { return slots_.num_free(); }
  // True when every block and slot is free.
  bool all_free() const;

 private:
  struct Entry {
    std::vector<std::vector<int32_t>> tables;  // per group
    int32_t slot = kNoBlock;
    int64_t window_begin = 0;  // window table entries below this index are kNoBlock
  };
  // Blocks per group the allocation needs beyond what the request holds, and the window
  // blocks it releases first.
  void count_needed(const Entry* e, int64_t num_computed, int64_t n_new,
                    std::vector<int64_t>& needed, int64_t& window_released) const;

  CacheLayout layout_;
  std::vector<StateGroup> groups_;
  std::vector<std::vector<int64_t>> group_of_layer_;  // [kind][layer]
  std::vector<BlockPool> pools_;
  BlockPool slots_;
  std::unordered_map<int64_t, Entry> requests_;
};

}  // namespace deepinfer
