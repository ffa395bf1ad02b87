// Scheduler: requests, their state machine (request.h) and one step's batch.
//
// The one idea: there is no prefill phase and no decode phase. Each request has
// num_computed_tokens, which catches up with num_tokens_with_drafts() (prompt + outputs +
// samples in flight + speculative drafts). A step gives each running request a chunk of the
// difference within a token budget: a whole prompt, a prefill chunk, one decode token, the
// recomputation of a preempted request, and a verification of draft tokens are all the same
// case.
//
// Per step: (1) running requests that need one token (decodes), then running requests that
// need more (prefill chunks), in policy order, each within max_num_batched_tokens and the
// prefill limits below; when the
// state cache cannot hold a chunk, the running request latest in policy order is preempted
// (state freed, num_computed_tokens = 0, back to waiting with its outputs kept) until it fits;
// with no later request left to preempt, it shrinks its chunk to what fits, or preempts
// itself when not even one token fits;
// (2) if nothing was preempted, waiting requests in policy order are admitted while the
// budget, max_num_seqs and the free state blocks allow (a waiting request never preempts).
// Policy order: FCFS by arrival, or by (priority, arrival) with priority on.
//
// Prefill limits (fairness: a long prompt must not stall running streams or a short request
// that arrives after it). Decodes are always scheduled first and never limited. Then:
//   * a step that runs decodes gives prefill chunks (running prefills and admissions
//     together) at most max_prefill_tokens_with_decodes tokens, which bounds its length;
//   * a request's prefill chunk is at most long_prefill_token_threshold tokens while the step
//     has other work (decodes, or another request that wants prefill tokens), so what is
//     left of the prefill budget reaches later requests; a prefill alone in its step gets
//     the whole budget (an idle server's long prompt runs at full chunk size).
// Both 0: off. A chunk's cost grows with the context before it (attention and indexer are
// O(context) per token), so the limits are in tokens of the newest position's cost.
//
// Overlap: num_computed_tokens advances inside schedule(), so the engine may call schedule()
// for step t+1 before update() of step t; outputs in flight count as placeholders. Draft
// tokens are accepted only with no sample in flight (i.e. without overlap).
// Not thread-safe: one thread calls every method.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "cache/cache_layout.h"
#include "cache/pool_plan.h"
#include "cache/state_cache.h"
#include "scheduler/request.h"
#include "scheduler/scheduler_output.h"

namespace deepinfer {

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 8192;  // tokens computed per step, all requests together
  int64_t max_num_seqs = 256;             // running requests at once
  int64_t max_model_len = 0;              // prompt + max_tokens limit; 0: only the cache's limit
  bool priority = false;                  // false: FCFS; true: by (priority, arrival)
  // Prefill limits (see the top of this file); 0: off.
  int64_t max_prefill_tokens_with_decodes = 0;
  int64_t long_prefill_token_threshold = 0;
  // Prefix caching (engine/prefix_cache_state.h), optional. `cached_prefix(r)`: how many of
  // r's first tokens the engine restores from its cache when r is admitted (0 <= n <
  // num_tokens()); the request starts with num_computed_tokens = n. Called at each admission
  // attempt, which may fail (the engine keeps only the latest answer per request).
  std::function<int64_t(const Request&)> cached_prefix;
  // > 0: a chunk of several tokens without drafts that crosses a multiple of this ends at the
  // last multiple it crosses (below the request's last known token, which a hit leaves to
  // compute), so the state is cached at block boundaries (the engine snapshots states
  // between steps). 0: off.
  int64_t prefix_block_tokens = 0;
};

class Scheduler {
 public:
  // The scheduler owns the state cache built from `layout` and `plan`.
  Scheduler(SchedulerConfig config, CacheLayout layout, const PoolPlan& plan);

  // Queues a request. Throws kInvalidInput for a bad spec or a live duplicate id, and
  // kResourceExhausted when prompt + max_tokens could never fit the pools alone.
  void add_request(RequestSpec spec);

  // Plans one step (see the top of this file).
  SchedulerOutput schedule();

  // Delivers the samples of `output` (a schedule() result, oldest not yet updated first):
  // sampled[i] are the tokens for output.scheduled[i], non-empty exactly where
  // scheduled[i].samples. Appends them, then finishes requests on a stop token id (after
  // min_tokens outputs; tokens after it are dropped) or at max_tokens. Chunks of requests
  // that finished meanwhile are skipped. Returns the requests finished by this call.
  // With draft tokens, sampled[i] holds the accepted drafts then one more token (at most
  // drafts + 1 tokens); num_computed_tokens falls back to the last position whose input
  // was right, so rejected positions are recomputed (their blocks stay allocated; restoring
  // the compressor state of rejected positions is the runtime's job). Tokens
  // beyond the drafts without drafts (e.g. a caller's own multi-token step) are computed
  // in the next step.
  std::vector<FinishedRequest> update(const SchedulerOutput& output,
                                      const std::vector<std::vector<int32_t>>& sampled);

  // Finishes a live request now (stop string found by the detokenizer: kStop; cancellation:
  // kAbort), freeing its state. Returns nullopt for an unknown or already finished id.
  std::optional<FinishedRequest> finish(int64_t id, FinishReason reason);
  std::optional<FinishedRequest> abort(int64_t id) { return finish(id, FinishReason::kAbort); }

  // Proposes speculative tokens for a running request's next step (after update() of its
  // last step, with no sample in flight; otherwise ignored). Trimmed so that the verified
  // step cannot produce more than max_tokens outputs. Returns how many were kept.
  int64_t set_draft_tokens(int64_t id, std::vector<int32_t> draft_token_ids);

  // A live request, or nullptr. Valid until the next call that may finish it.
  const Request* find(int64_t id) const;
  int64_t num_waiting() const { return int64_t(waiting_.size()); }
  int64_t num_running() const { return int64_t(running_.size()); }
  bool has_unfinished() const { return !requests_.empty(); }
  int64_t num_preemptions_total() const { return num_preemptions_total_; }

  const SchedulerConfig& config() const { return config_; }
  // Block tables and state slots of running requests (read them after schedule()).
  const StateCache& cache() const { return cache_; }

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t>;  // (priority, arrival, id)
  Key key(const Request& r) const;
  // Tokens the request could compute next, drafts included (0 when it must wait for an
  // in-flight sample).
  int64_t remaining(const Request& r) const;
  // Preempts the latest running request in policy order after `r`, or returns false.
  bool preempt_one_after(const Request& r, SchedulerOutput& out, int64_t& budget);
  void preempt(Request& r, SchedulerOutput& out, int64_t& budget);
  void add_chunk(Request& r, int64_t n_tokens, SchedulerOutput& out, int64_t& budget);
  FinishedRequest finish_request(Request& r, FinishReason reason);

  SchedulerConfig config_;
  StateCache cache_;
  std::unordered_map<int64_t, std::unique_ptr<Request>> requests_;  // live requests
  std::set<Key> waiting_;           // kWaiting and kPreempted, in policy order
  std::vector<Request*> running_;   // kRunning
  std::vector<int64_t> finished_since_schedule_;
  int64_t next_arrival_ = 0;
  int64_t next_step_ = 0;
  int64_t num_preemptions_total_ = 0;
};

}  // namespace deepinfer
