// Word cache for BPE: raw piece bytes -> token ids. Sharded, each shard behind a
// shared_mutex, so concurrent encoders mostly take uncontended read locks. Like HF's
// cache it never evicts: once a shard is full, new words are simply not cached.
// Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace deepinfer::recipe {

class BpeCache {
 public:
  static constexpr size_t kShards = 64;
  static constexpr size_t kMaxWordBytes = 256;  // longer words are not cached

  explicit BpeCache(size_t capacity = 1 << 18) : shard_capacity_(capacity / kShards) {}

  // Appends the cached ids of `word` to `out` and returns true on a hit.
  bool lookup(std::string_view word, size_t hash, std::vector<int32_t>& out) const;
  void insert(std::string_view word, size_t hash, const int32_t* ids, size_t n_ids);

  static size_t hash(std::string_view word);

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return BpeCache::hash(s); }
  };
  struct Shard {
    mutable std::shared_mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
  };
  size_t shard_capacity_;
  std::array<Shard, kShards> shards_;
};

}  // namespace deepinfer::recipe
