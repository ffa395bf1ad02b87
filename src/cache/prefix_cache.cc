#include "cache/prefix_cache.h"

#include <algorithm>

#include "base/error.h"

namespace deepinfer {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

PrefixHit& PrefixHit::operator=(PrefixHit&& other) noexcept {
  if (this != &other) {
    release();
    cache_ = other.cache_;
    keys_ = std::move(other.keys_);
    payloads_ = std::move(other.payloads_);
    n_tokens_ = other.n_tokens_;
    other.cache_ = nullptr;
    other.keys_.clear();
    other.payloads_.clear();
    other.n_tokens_ = 0;
  }
  return *this;
}

void PrefixHit::release() {
  if (cache_ != nullptr) cache_->unpin(keys_);
  cache_ = nullptr;
  keys_.clear();
  payloads_.clear();
  n_tokens_ = 0;
}

PrefixCache::PrefixCache(const PrefixCacheOptions& options) : options_(options) {
  CHECK(options_.block_tokens >= 1) << "prefix cache: block of " << options_.block_tokens << " tokens";
  CHECK(options_.byte_budget >= 0) << "prefix cache: negative byte budget";
}

PrefixCache::~PrefixCache() = default;

std::vector<uint64_t> PrefixCache::block_keys(std::span<const int32_t> tokens) const {
  const int64_t B = options_.block_tokens, n = int64_t(tokens.size()) / B;
  std::vector<uint64_t> keys(static_cast<size_t>(n));
  uint64_t h = mix(options_.salt);
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t i = k * B; i < (k + 1) * B; ++i) h = mix(h ^ uint64_t(uint32_t(tokens[size_t(i)])));
    h = mix(h ^ uint64_t(k + 1));
    keys[size_t(k)] = h == 0 ? 1 : h;  // 0 means "no parent"
  }
  return keys;
}

const PrefixCache::Entry* PrefixCache::find(std::span<const int32_t> tokens, uint64_t key, int64_t n) const {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.n_blocks != n) return nullptr;
  const Entry& e = it->second;
  const int64_t end = n * options_.block_tokens, begin = end - int64_t(e.tokens.size());
  if (begin < 0 || !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin() + begin)) return nullptr;
  return &e;
}

int64_t PrefixCache::deepest(std::span<const int32_t> tokens, int64_t max_blocks,
                             std::shared_ptr<const void>* payload) const {
  const std::vector<uint64_t> keys = block_keys(tokens);
  for (int64_t n = std::min<int64_t>(max_blocks, int64_t(keys.size())); n >= 1; --n) {
    if (const Entry* e = find(tokens, keys[size_t(n - 1)], n)) {
      if (payload != nullptr) *payload = e->payload;
      return n;
    }
  }
  return 0;
}

PrefixHit PrefixCache::lookup(std::span<const int32_t> tokens, int64_t max_tokens) {
  const int64_t max_blocks = std::max<int64_t>(0, max_tokens) / options_.block_tokens;
  ++stats_.n_queries;
  stats_.n_query_tokens += std::min<int64_t>(max_blocks, int64_t(tokens.size()) / options_.block_tokens) *
                           options_.block_tokens;
  PrefixHit hit;
  const int64_t n = deepest(tokens, max_blocks);
  if (n == 0) return hit;
  const std::vector<uint64_t> keys = block_keys(tokens);
  ++clock_;
  for (uint64_t key = keys[size_t(n - 1)]; key != 0;) {  // leaf to root, then reversed
    Entry& e = entries_.at(key);
    ++e.pins;
    e.last_use = clock_;
    hit.keys_.push_back(key);
    hit.payloads_.push_back(e.payload);
    key = e.parent;
  }
  std::reverse(hit.keys_.begin(), hit.keys_.end());
  std::reverse(hit.payloads_.begin(), hit.payloads_.end());
  hit.cache_ = this;
  hit.n_tokens_ = n * options_.block_tokens;
  ++stats_.n_hits;
  stats_.n_hit_tokens += hit.n_tokens_;
  return hit;
}

bool PrefixCache::insert(std::span<const int32_t> tokens, int64_t n_blocks, int64_t parent_blocks,
                         std::shared_ptr<const void> payload, int64_t bytes) {
  const int64_t B = options_.block_tokens;
  CHECK(n_blocks >= 1 && n_blocks * B <= int64_t(tokens.size()) && parent_blocks >= 0 &&
        parent_blocks < n_blocks)
      << "prefix cache: entry of blocks (" << parent_blocks << ", " << n_blocks << "] for "
      << tokens.size() << " tokens";
  CHECK(bytes >= 0 && payload != nullptr) << "prefix cache: entry without a payload";
  const std::vector<uint64_t> keys = block_keys(tokens.first(size_t(n_blocks * B)));
  const uint64_t key = keys.back();
  if (entries_.count(key) != 0 || bytes > options_.byte_budget) return false;
  uint64_t parent = 0;
  if (parent_blocks > 0) {
    parent = keys[size_t(parent_blocks - 1)];
    ICHECK(find(tokens, parent, parent_blocks) != nullptr)
        << "prefix cache: parent entry of block " << parent_blocks << " is not cached";
    ++entries_.at(parent).n_children;
  }
  Entry e;
  e.tokens.assign(tokens.begin() + parent_blocks * B, tokens.begin() + n_blocks * B);
  e.parent = parent;
  e.n_blocks = n_blocks;
  e.payload = std::move(payload);
  e.bytes = bytes;
  e.last_use = ++clock_;
  entries_.emplace(key, std::move(e));
  n_bytes_ += bytes;
  ++stats_.n_inserted;
  evict_to_budget();
  return true;
}

void PrefixCache::erase(uint64_t key) {
  auto it = entries_.find(key);
  ICHECK(it != entries_.end() && it->second.pins == 0 && it->second.n_children == 0)
      << "prefix cache: erasing an entry in use";
  if (it->second.parent != 0) --entries_.at(it->second.parent).n_children;
  n_bytes_ -= it->second.bytes;
  entries_.erase(it);
}

// A linear scan per eviction: entries are few (each holds a block's whole state).
void PrefixCache::evict_to_budget() {
  while (n_bytes_ > options_.byte_budget) {
    uint64_t victim = 0, oldest = UINT64_MAX;
    for (const auto& [key, e] : entries_) {
      if (e.pins == 0 && e.n_children == 0 && e.last_use < oldest) {
        oldest = e.last_use;
        victim = key;
      }
    }
    if (victim == 0) return;  // everything left is in use
    erase(victim);
    ++stats_.n_evicted;
  }
}

void PrefixCache::clear() {
  for (bool erased = true; erased;) {  // leaves first, until only pinned chains remain
    erased = false;
    for (auto it = entries_.begin(); it != entries_.end();) {
      const uint64_t key = it->first;
      const bool free = it->second.pins == 0 && it->second.n_children == 0;
      ++it;
      if (free) {
        erase(key);
        erased = true;
      }
    }
  }
}

int64_t PrefixCache::n_pinned() const {
  int64_t n = 0;
  for (const auto& [key, e] : entries_) n += e.pins > 0;
  return n;
}

void PrefixCache::unpin(std::span<const uint64_t> keys) {
  for (uint64_t key : keys) {
    auto it = entries_.find(key);
    ICHECK(it != entries_.end() && it->second.pins > 0) << "prefix cache: unpinning an entry not pinned";
    --it->second.pins;
  }
  evict_to_budget();
}

}  // namespace deepinfer
