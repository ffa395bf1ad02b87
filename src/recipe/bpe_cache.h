// Word cache for BPE: raw piece bytes -> token ids. 64 shards, each an open-addressing
// table whose keys and ids live in one byte arena (no allocation per entry), behind a
// shared_mutex so concurrent encoders mostly take uncontended read locks. Like HF's cache
// it never evicts: once a shard holds its share of `capacity` words, new words are
// simply not cached. Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::recipe {

class BpeCache {
 public:
  static constexpr size_t kShards = 64;
  static constexpr size_t kMaxWordBytes = 256;  // longer words are not cached

  explicit BpeCache(size_t capacity = 1 << 18);

  // Appends the cached ids of `word` to `out` and returns true on a hit. `hash` must be
  // hash(word).
  bool lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const;
  void insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t n_ids);

  static uint64_t hash(std::string_view word);

 private:
  struct Slot {
    uint64_t hash = 0;  // 0: empty (hash() never returns 0)
    uint32_t offset = 0;
    uint16_t key_bytes = 0;
    uint16_t n_ids = 0;
  };
  struct Shard {
    mutable std::shared_mutex mutex;
    std::vector<Slot> slots;  // allocated on first insert; size is a power of two
    std::string arena;        // key bytes followed by the ids, per entry
    size_t n_entries = 0;
  };
  size_t shard_capacity_;
  std::array<Shard, kShards> shards_;
};

}  // namespace deepinfer::recipe
