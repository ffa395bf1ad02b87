#include "recipe/bpe_cache.h"

#include <cstring>
#include <mutex>

namespace deepinfer::recipe {

BpeCache::BpeCache(size_t capacity) : shard_capacity_(capacity / kShards) {}

uint64_t BpeCache::hash(std::string_view s) {
  // FNV-1a over 8-byte words with a final mix: cheap for the short pieces BPE sees.
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
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 29;
  return h | 1;
}

bool BpeCache::lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const {
  const Shard& shard = shards_[hash % kShards];
  std::shared_lock lock(shard.mutex);
  if (shard.slots.empty()) return false;
  const size_t mask = shard.slots.size() - 1;
  for (size_t i = (hash / kShards) & mask;; i = (i + 1) & mask) {
    const Slot& slot = shard.slots[i];
    if (slot.hash == 0) return false;
    if (slot.hash == hash && slot.key_bytes == word.size() &&
        std::memcmp(shard.arena.data() + slot.offset, word.data(), word.size()) == 0) {
      const size_t old = out.size();
      out.resize(old + slot.n_ids);
      std::memcpy(out.data() + old, shard.arena.data() + slot.offset + slot.key_bytes, 4ull * slot.n_ids);
      return true;
    }
  }
}

void BpeCache::insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t n_ids) {
  if (word.size() > kMaxWordBytes || n_ids > 0xFFFF || shard_capacity_ == 0) return;
  Shard& shard = shards_[hash % kShards];
  std::unique_lock lock(shard.mutex);
  if (shard.n_entries >= shard_capacity_) return;
  if (shard.slots.empty()) {
    size_t n = 16;
    while (n < 2 * shard_capacity_) n <<= 1;
    shard.slots.resize(n);
  }
  if (shard.arena.size() + word.size() + 4 * n_ids > 0xFFFFFFFFull) return;
  const size_t mask = shard.slots.size() - 1;
  size_t i = (hash / kShards) & mask;
  for (;; i = (i + 1) & mask) {
    const Slot& slot = shard.slots[i];
    if (slot.hash == 0) break;
    if (slot.hash == hash && slot.key_bytes == word.size() &&
        std::memcmp(shard.arena.data() + slot.offset, word.data(), word.size()) == 0)
      return;  // another thread cached it first
  }
  Slot& slot = shard.slots[i];
  slot.offset = static_cast<uint32_t>(shard.arena.size());
  slot.key_bytes = static_cast<uint16_t>(word.size());
  slot.n_ids = static_cast<uint16_t>(n_ids);
  shard.arena.append(word);
  shard.arena.append(reinterpret_cast<const char*>(ids), 4 * n_ids);
  slot.hash = hash;
  ++shard.n_entries;
}

}  // namespace deepinfer::recipe
