#include "cache/state_cache.h"

#include <algorithm>

#include "base/error.h"

namespace deepinfer {

StateCache::StateCache(CacheLayout layout, const PoolPlan& plan)
    : layout_(std::move(layout)), groups_(layout_.groups()), slots_(plan.n_state_slots) {
  CHECK(plan.n_blocks.size() == groups_.size())
      << "StateCache: plan has " << plan.n_blocks.size() << " pools, layout has "
      << groups_.size() << " groups";
  for (int64_t n : plan.n_blocks) pools_.emplace_back(n);
  group_of_layer_.assign(3, std::vector<int64_t>(layout_.layers.size(), -1));
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (int64_t layer : groups_[g].layers) {
      group_of_layer_[size_t(groups_[g].kind)][size_t(layer)] = int64_t(g);
    }
  }
}

int64_t StateCache::group_index(StateKind kind, int64_t layer) const {
  CHECK(layer >= 0 && layer < int64_t(layout_.layers.size()))
      << "StateCache: layer " << layer << " out of range";
  return group_of_layer_[size_t(kind)][size_t(layer)];
}

void StateCache::count_needed(const Entry* e, int64_t num_computed, int64_t n_new,
                              std::vector<int64_t>& needed, int64_t& window_released) const {
  const int64_t bs = layout_.block_size;
  const int64_t end = num_computed + n_new;
  needed.assign(groups_.size(), 0);
  window_released = 0;

  // Window: live positions [lo, end).
  const int64_t lo_block = std::max<int64_t>(0, num_computed - layout_.window + 1) / bs;
  const int64_t hi_block = (end + bs - 1) / bs;
  if (e == nullptr) {
    needed[0] = std::max<int64_t>(0, hi_block - lo_block);
  } else {
    const std::vector<int32_t>& table = e->tables[0];
    for (int64_t b = e->window_begin; b < std::min<int64_t>(lo_block, int64_t(table.size())); ++b) {
      if (table[size_t(b)] != kNoBlock) ++window_released;
    }
    for (int64_t b = lo_block; b < hi_block; ++b) {
      if (b >= int64_t(table.size()) || table[size_t(b)] == kNoBlock) ++needed[0];
    }
  }
  for (size_t g = 1; g < groups_.size(); ++g) {
    const int64_t blocks = (groups_[g].n_entries(end) + bs - 1) / bs;
    const int64_t held = e == nullptr ? 0 : int64_t(e->tables[g].size());
    needed[g] = std::max<int64_t>(0, blocks - held);
  }
}

bool StateCache::can_allocate(int64_t id, int64_t num_computed, int64_t n_new) const {
  CHECK(num_computed >= 0 && n_new >= 0)
      << "StateCache: bad range start " << num_computed << " count " << n_new;
  auto it = requests_.find(id);
  const Entry* e = it == requests_.end() ? nullptr : &it->second;
  if (e == nullptr && slots_.num_free() == 0) return false;
  std::vector<int64_t> needed;
  int64_t released = 0;
  count_needed(e, num_computed, n_new, needed, released);
  if (needed[0] > pools_[0].num_free() + released) return false;
  for (size_t g = 1; g < groups_.size(); ++g) {
    if (needed[g] > pools_[g].num_free()) return false;
  }
  return true;
}

int64_t StateCache::max_allocatable(int64_t id, int64_t num_computed, int64_t n_max) const {
  if (n_max <= 0 || !can_allocate(id, num_computed, 1)) return 0;
  if (can_allocate(id, num_computed, n_max)) return n_max;
  // can_allocate is monotone in n: binary search the boundary in (1, n_max).
  int64_t ok = 1, bad = n_max;
  while (bad - ok > 1) {
    const int64_t mid = ok + (bad - ok) / 2;
    if (can_allocate(id, num_computed, mid)) {
      ok = mid;
    } else {
      bad = mid;
    }
  }
  return ok;
}

void StateCache::release_slid_out(int64_t id, int64_t num_computed) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Entry& e = it->second;
  std::vector<int32_t>& table = e.tables[0];
  const int64_t lo_block =
      std::max<int64_t>(0, num_computed - layout_.window + 1) / layout_.block_size;
  const int64_t stop = std::min<int64_t>(lo_block, int64_t(table.size()));
  for (int64_t b = e.window_begin; b < stop; ++b) {
    if (table[size_t(b)] != kNoBlock) {
      pools_[0].free(table[size_t(b)]);
      table[size_t(b)] = kNoBlock;
    }
  }
  e.window_begin = std::max(e.window_begin, stop);
}

void StateCache::allocate(int64_t id, int64_t num_computed, int64_t n_new) {
  CHECK_KIND(kResourceExhausted, can_allocate(id, num_computed, n_new))
      << "StateCache: request " << id << " cannot get blocks for positions [" << num_computed
      << ", " << num_computed + n_new << ")";
  auto [it, inserted] = requests_.try_emplace(id);
  Entry& e = it->second;
  if (inserted) {
    e.tables.resize(groups_.size());
    e.slot = slots_.allocate();
  }
  release_slid_out(id, num_computed);

  const int64_t bs = layout_.block_size;
  const int64_t end = num_computed + n_new;
  const int64_t lo_block = std::max<int64_t>(0, num_computed - layout_.window + 1) / bs;
  const int64_t hi_block = (end + bs - 1) / bs;
  std::vector<int32_t>& window = e.tables[0];
  if (int64_t(window.size()) < hi_block) window.resize(size_t(hi_block), kNoBlock);
  for (int64_t b = lo_block; b < hi_block; ++b) {
    if (window[size_t(b)] == kNoBlock) window[size_t(b)] = pools_[0].allocate();
  }
  for (size_t g = 1; g < groups_.size(); ++g) {
    const int64_t blocks = (groups_[g].n_entries(end) + bs - 1) / bs;
    while (int64_t(e.tables[g].size()) < blocks) e.tables[g].push_back(pools_[g].allocate());
  }
}

void StateCache::free_request(int64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Entry& e = it->second;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (int32_t b : e.tables[g]) {
      if (b != kNoBlock) pools_[g].free(b);
    }
  }
  slots_.free(e.slot);
  requests_.erase(it);
}

bool StateCache::fits_alone(int64_t n_tokens) const {
  if (slots_.num_blocks() == 0) return false;
  // Decoding one token at position t reads min(t+1, W) positions.
  const int64_t window_positions = std::min(n_tokens, layout_.window);
  if (blocks_spanned(window_positions, layout_.block_size) > pools_[0].num_blocks()) return false;
  for (size_t g = 1; g < groups_.size(); ++g) {
    const int64_t blocks = (groups_[g].n_entries(n_tokens) + layout_.block_size - 1) /
                           layout_.block_size;
    if (blocks > pools_[g].num_blocks()) return false;
  }
  return true;
}

const std::vector<int32_t>& StateCache::block_table(int64_t id, int64_t group) const {
  auto it = requests_.find(id);
  ICHECK(it != requests_.end()) << "StateCache: unknown request " << id;
  ICHECK(group >= 0 && group < n_groups()) << "StateCache: group " << group << " out of range";
  return it->second.tables[size_t(group)];
}

int32_t StateCache::state_slot(int64_t id) const {
  auto it = requests_.find(id);
  ICHECK(it != requests_.end()) << "StateCache: unknown request " << id;
  return it->second.slot;
}

bool StateCache::all_free() const {
  if (slots_.num_free() != slots_.num_blocks()) return false;
  for (const BlockPool& p : pools_) {
    if (p.num_free() != p.num_blocks()) return false;
  }
  return true;
}

}  // namespace deepinfer
