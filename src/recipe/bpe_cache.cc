#include "recipe/bpe_cache.h"

#include <cstring>
#include <mutex>

namespace deepinfer::recipe {

size_t BpeCache::hash(std::string_view s) {
  // FNV-1a over 8-byte words: cheap for the short pieces BPE sees.
  uint64_t h = 1469598103934665603ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 1099511628211ull;
    h ^= h >> 29;
  }
  for (; i < s.size(); ++i) h = (h ^ static_cast<uint8_t>(s[i])) * 1099511628211ull;
  h ^= h >> 32;
  return static_cast<size_t>(h);
}

bool BpeCache::lookup(std::string_view word, size_t hash, std::vector<int32_t>& out) const {
  const Shard& shard = shards_[hash % kShards];
  std::shared_lock lock(shard.mutex);
  auto it = shard.map.find(word);
  if (it == shard.map.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void BpeCache::insert(std::string_view word, size_t hash, const int32_t* ids, size_t n_ids) {
  if (word.size() > kMaxWordBytes) return;
  Shard& shard = shards_[hash % kShards];
  std::unique_lock lock(shard.mutex);
  if (shard.map.size() >= shard_capacity_) return;
  shard.map.try_emplace(std::string(word), ids, ids + n_ids);
}

}  // namespace deepinfer::recipe
