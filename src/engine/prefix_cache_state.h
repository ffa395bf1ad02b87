// PrefixStateCache: automatic prefix caching in the engine (issue 18), on a runner with
// prefix states (ModelRunner::supports_prefix_state: the CPU and CUDA backends).
//
// Design (copy on hit): between steps, when a request's state stands at a block boundary
// (prepare() of a chunk starting at a multiple of block_tokens), the runner exports the
// state as a piece after the deepest boundary of the same tokens already cached: the
// append-only arrays (compressed entries, index keys) only for the new span, shared along
// the chain; the per-position parts (window rings, compressor partial rows, Engram tokens,
// drafter rings) copied whole, so a hit needs no replay and is exact at any alignment.
// The scheduler aligns multi-token chunks to block boundaries (SchedulerConfig::
// prefix_block_tokens) so prefills stop there. On admission the scheduler asks
// cached_prefix(); the hit is pinned until the request's first chunk imports it (a new
// sequence holding a copy of the chain's state) or the request ends.
//
// Not thread-safe: the engine thread calls everything, while no launch() runs.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>

#include "cache/prefix_cache.h"
#include "runtime/model_runner.h"
#include "scheduler/request.h"

namespace deepinfer {

class PrefixStateCache {
 public:
  PrefixStateCache(ModelRunner& runner, const PrefixCacheOptions& options);

  // Scheduler hook (SchedulerConfig::cached_prefix): the tokens of r's known tokens
  // (at most num_tokens() - 1: the last one is computed to sample) restored on admission.
  int64_t cached_prefix(const Request& r);
  // A new sequence holding request `id`'s pending hit, if its first chunk starts where the
  // hit ends; else -1 (the hit is dropped either way).
  int64_t take_hit(int64_t id, int64_t start_position);
  // Drops request `id`'s pending hit (it ended or was preempted).
  void forget(int64_t id) { pending_.erase(id); }
  // The state of `sequence` stands after the first n_tokens of `tokens`: caches it when
  // n_tokens is a block boundary not cached yet (skipped, logged once, when the runner has
  // no memory for the piece: kResourceExhausted).
  void offer(int64_t sequence, std::span<const int32_t> tokens, int64_t n_tokens);

  const PrefixCache& index() const { return cache_; }
  // Tokens of the requests looked up (r.num_tokens() per cached_prefix call): vLLM's
  // prefix-cache queries, counted in tokens (/metrics vllm:prefix_cache_queries).
  int64_t lookup_tokens() const { return lookup_tokens_; }
  void clear() { cache_.clear(); }

 private:
  ModelRunner& runner_;
  PrefixCache cache_;
  std::unordered_map<int64_t, PrefixHit> pending_;  // by scheduler id
  int64_t lookup_tokens_ = 0;
  bool warned_no_memory_ = false;  // an export found no memory (logged once)
};

// The prefix-cache salt of a model on a runner: model config, weights' origin, numerics and
// batch-invariance (runner name), so a changed model or numerics never hits.
uint64_t prefix_cache_salt(const ModelRunner& runner, const std::string& model_dir, uint64_t dummy_seed);

}  // namespace deepinfer
