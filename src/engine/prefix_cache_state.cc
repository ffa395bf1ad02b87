#include "engine/prefix_cache_state.h"

#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/logging.h"

namespace deepinfer {

PrefixStateCache::PrefixStateCache(ModelRunner& runner, const PrefixCacheOptions& options)
    : runner_(runner), cache_(options) {
  CHECK(runner_.supports_prefix_state()) << "prefix caching: " << runner_.name() << " has no prefix states";
}

int64_t PrefixStateCache::cached_prefix(const Request& r) {
  lookup_tokens_ += r.num_tokens();
  PrefixHit hit = cache_.lookup(r.token_ids, r.num_tokens() - 1);
  const int64_t n = hit.n_tokens();
  if (n > 0) {
    pending_[r.id] = std::move(hit);
  } else {
    pending_.erase(r.id);
  }
  return n;
}

int64_t PrefixStateCache::take_hit(int64_t id, int64_t start_position) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return -1;
  PrefixHit hit = std::move(it->second);
  pending_.erase(it);
  if (hit.n_tokens() != start_position || start_position == 0) return -1;
  std::vector<const PrefixState*> chain;
  for (const auto& p : hit.payloads()) chain.push_back(static_cast<const PrefixState*>(p.get()));
  return runner_.import_prefix(chain);  // the hit unpins when it goes out of scope
}

void PrefixStateCache::offer(int64_t sequence, std::span<const int32_t> tokens, int64_t n_tokens) {
  const int64_t B = cache_.block_tokens();
  if (n_tokens <= 0 || n_tokens % B != 0 || n_tokens > int64_t(tokens.size())) return;
  const std::span<const int32_t> prefix = tokens.first(size_t(n_tokens));
  const int64_t n_blocks = n_tokens / B;
  std::shared_ptr<const void> parent;
  const int64_t parent_blocks = cache_.deepest(prefix, n_blocks, &parent);
  if (parent_blocks == n_blocks) return;  // cached already
  std::shared_ptr<const PrefixState> piece;
  try {
    piece = runner_.export_prefix(sequence, parent ? static_cast<const PrefixState*>(parent.get()) : nullptr);
  } catch (const Error& e) {
    // No memory for the piece (CUDA: device memory outside the runner's pools): this
    // boundary is not cached; the request itself is unaffected.
    if (e.kind() != ErrorKind::kResourceExhausted) throw;
    if (!warned_no_memory_) LOG(WARNING) << "prefix caching: a state is not cached: " << e.what();
    warned_no_memory_ = true;
    return;
  }
  const int64_t bytes = piece->bytes;
  cache_.insert(prefix, n_blocks, parent_blocks, std::move(piece), bytes);
}

uint64_t prefix_cache_salt(const ModelRunner& runner, const std::string& model_dir, uint64_t dummy_seed) {
  const ModelConfig& c = runner.config();
  std::string key = runner.name() + "|" + model_dir + "|" + std::to_string(dummy_seed) + "|" + c.model_type;
  for (int64_t v : {c.vocab_size, c.hidden_size, c.num_layers, c.num_heads, c.head_dim, c.sliding_window,
                    c.index_topk}) {
    key += "|" + std::to_string(v);
  }
  for (int64_t r : c.compress_ratios) key += "," + std::to_string(r);
  return std::hash<std::string>{}(key);
}

}  // namespace deepinfer
