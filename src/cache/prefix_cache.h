// PrefixCache: automatic prefix caching's index (issue 18). Prompts are cut into full blocks
// of `block_tokens` tokens; block k's key is a chained hash of its tokens and block k-1's key
// (block 0's parent is the salt: model, numerics and batch-invariance, so a cache never
// serves another model's state). An entry is a cached piece of sequence state ending at a
// block boundary: it covers the blocks from its parent entry's end to its own end, holds an
// opaque read-only payload (the runner's, e.g. runtime's PrefixState) and its size in bytes.
// A hit is the chain of entries from the first block to the deepest cached boundary.
//
// Eviction: least recently used first, under a byte budget, only entries that are neither
// pinned by a hit in use (PrefixHit) nor a parent of another entry (leaf first, so every
// cached entry's ancestors stay cached and each entry is reachable). Ids and counts only: no
// device memory. Not thread-safe (the engine thread owns it).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

namespace deepinfer {

struct PrefixCacheOptions {
  int64_t block_tokens = 64;  // tokens per block (>= 1)
  int64_t byte_budget = 0;    // payload bytes kept at most (0: nothing is cached)
  uint64_t salt = 0;          // model + numerics key, the chain's root
};

struct PrefixCacheStats {
  int64_t n_queries = 0;       // lookups
  int64_t n_hits = 0;          // lookups that found at least one block
  int64_t n_query_tokens = 0;  // tokens the lookups could have hit (their cap)
  int64_t n_hit_tokens = 0;    // tokens served from the cache
  int64_t n_inserted = 0;      // entries inserted
  int64_t n_evicted = 0;       // entries evicted
};

class PrefixCache;

// A lookup's result: the entries' payloads oldest first and the tokens they cover. Holds a pin
// on each entry (not evictable) until destroyed or released. Move-only; must not outlive
// its cache.
class PrefixHit {
 public:
  PrefixHit() = default;
  PrefixHit(PrefixHit&& other) noexcept { *this = std::move(other); }
  PrefixHit& operator=(PrefixHit&& other) noexcept;
  PrefixHit(const PrefixHit&) = delete;
  PrefixHit& operator=(const PrefixHit&) = delete;
  ~PrefixHit() { release(); }

  int64_t n_tokens() const { return n_tokens_; }
  bool empty() const { return n_tokens_ == 0; }
  const std::vector<std::shared_ptr<const void>>& payloads() const { return payloads_; }
  void release();  // unpins (idempotent)

 private:
  friend class PrefixCache;
  PrefixCache* cache_ = nullptr;
  std::vector<uint64_t> keys_;
  std::vector<std::shared_ptr<const void>> payloads_;
  int64_t n_tokens_ = 0;
};

class PrefixCache {
 public:
  explicit PrefixCache(const PrefixCacheOptions& options);
  ~PrefixCache();

  const PrefixCacheOptions& options() const { return options_; }
  int64_t block_tokens() const { return options_.block_tokens; }

  // Key of each full block of `tokens` (tokens.size() / block_tokens keys).
  std::vector<uint64_t> block_keys(std::span<const int32_t> tokens) const;

  // The deepest cached boundary of `tokens` covering at most `max_tokens` tokens, pinned;
  // counted in stats() (a query of max_tokens rounded down to blocks). Refreshes the LRU
  // order of the entries it returns.
  PrefixHit lookup(std::span<const int32_t> tokens, int64_t max_tokens);
  // The same without pinning or counting: the deepest cached boundary within the first
  // `max_blocks` full blocks of `tokens`, in blocks (0: none), and its payload.
  int64_t deepest(std::span<const int32_t> tokens, int64_t max_blocks,
                  std::shared_ptr<const void>* payload = nullptr) const;

  // Caches the state after the first `n_blocks` blocks of `tokens` (at least that many full
  // blocks), whose parent entry ends at block `parent_blocks` (0: none; else it must be
  // cached: deepest() gives it). Evicts to the budget afterwards (the new entry too if
  // nothing else can go). Returns false (nothing cached) when that boundary is cached
  // already or the payload alone exceeds the budget.
  bool insert(std::span<const int32_t> tokens, int64_t n_blocks, int64_t parent_blocks,
              std::shared_ptr<const void> payload, int64_t bytes);

  // Drops every unpinned entry that no pinned entry depends on (model or numerics change).
  void clear();

  int64_t n_entries() const { return int64_t(entries_.size()); }
  int64_t n_bytes() const { return n_bytes_; }
  int64_t n_pinned() const;
  const PrefixCacheStats& stats() const { return stats_; }

 private:
  friend class PrefixHit;
  struct Entry {
    // The tokens of its blocks (from the parent's end): compared on every lookup, so a hash
    // collision is a miss, never another prefix's state.
    std::vector<int32_t> tokens;
    uint64_t parent = 0;  // parent entry's key (0: none)
    int64_t n_blocks = 0;
    std::shared_ptr<const void> payload;
    int64_t bytes = 0;
    int64_t pins = 0;
    int64_t n_children = 0;
    uint64_t last_use = 0;
  };
  // The entry ending at block n (1-based) of `tokens` given its key, or null (absent or
  // another prefix's entry under a colliding key).
  const Entry* find(std::span<const int32_t> tokens, uint64_t key, int64_t n) const;
  void unpin(std::span<const uint64_t> keys);
  void erase(uint64_t key);
  void evict_to_budget();

  PrefixCacheOptions options_;
  std::unordered_map<uint64_t, Entry> entries_;
  int64_t n_bytes_ = 0;
  uint64_t clock_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace deepinfer
