// AsyncEngine: runs an engine's step loop on its own thread for the server (DESIGN.md §1
// `engine`, `server`). Callers on any thread submit requests with a callback and abort them;
// the loop thread adds them to the engine between steps, steps while anything is unfinished,
// and hands every RequestOutput to its request's callback.
//
// Admission is bounded: at most `max_live_requests` requests are live (queued for the loop
// thread, or inside the engine and unfinished). submit() of more answers kFull at once so the
// server can answer 429 with Retry-After; a group (the n choices of one HTTP request) is
// admitted whole or not at all.
//
// Callbacks run on the loop thread, never under AsyncEngine's lock: they must be quick (post
// the work elsewhere) and may call submit()/abort(). Each admitted request gets exactly one
// callback with `finished` true, which is its last:
//   - the engine finished it ("stop", "length"), or
//   - it was aborted (abort(), shutdown) and finish_reason is "abort", or
//   - the engine rejected it, it failed on its own (RequestOutput::error) or the whole step
//     failed: finish_reason "error", the message in `error`.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"

namespace deepinfer {

// How full the engine is, read by the loop thread after each step (for /metrics).
struct EngineLoad {
  int64_t n_state_slots = 0;       // requests the state cache can hold
  int64_t n_state_slots_used = 0;
  double max_block_usage = 0.0;    // fullest state-cache block pool, used / total in [0, 1]
  int64_t n_preemptions = 0;       // since start
  // Automatic prefix caching, since start (EngineStats::prefix_cache_*; all 0 while off).
  int64_t prefix_cache_block_tokens = 0;  // tokens per cached block; 0: caching off
  int64_t prefix_cache_queries = 0;       // lookups (admissions)
  int64_t prefix_cache_hits = 0;          // lookups that hit at least one block
  int64_t prefix_cache_lookup_tokens = 0; // tokens of the requests looked up (vLLM's queries)
  int64_t prefix_cache_query_tokens = 0;  // full blocks they could have hit, in tokens (the ideal)
  int64_t prefix_cache_hit_tokens = 0;    // tokens served from the cache
  int64_t prefix_cache_entries = 0;       // cached block boundaries now
  int64_t prefix_cache_pinned = 0;        // of those, held by admitted requests' hits now
  int64_t prefix_cache_bytes = 0;         // host memory they hold now
  int64_t prefix_cache_evictions = 0;     // entries evicted
};

// The part of Engine the loop drives (tests put a fake behind it). Single-threaded: only the
// loop thread calls it once AsyncEngine owns it.
class StepEngine {
 public:
  virtual ~StepEngine() = default;
  virtual void add_request(EngineRequest request) = 0;  // throws Error when rejected
  virtual bool abort(const std::string& id) = 0;
  virtual std::vector<RequestOutput> step() = 0;
  virtual bool has_unfinished() const = 0;
  virtual EngineLoad load() const { return {}; }
  // The constraint compiled for a later add_request (any thread); null when this engine does
  // not compile ahead (the request then compiles on the engine thread).
  virtual std::shared_ptr<const grammar::CompiledGrammar> compile_constraint(const std::string& kind,
                                                                             const std::string& text) {
    return nullptr;
  }
  // Collective engines (attention data parallel, parallel/dp/dp_lockstep.h: the ranks of an
  // expert-parallel group step together). Every loop iteration asks agree_to_step(busy), busy
  // meaning this engine has unfinished work, and steps iff it answers true; the engines of a
  // group are asked equally often and answer alike. While neither this engine nor its group
  // has work, the loop waits at most idle_poll() for new work before asking again (0: until
  // work arrives). A throw from agree_to_step fails every live request like a failed step.
  virtual bool agree_to_step(bool busy) { return busy; }
  virtual std::chrono::milliseconds idle_poll() const { return std::chrono::milliseconds(0); }
  // The loop is ending (shutdown): a collective engine tells its group, whose engines then
  // fail their live requests and become unavailable instead of waiting for this one.
  virtual void leave() {}
  // Non-empty once this engine can never step again (a collective of its group failed): why.
  // AsyncEngine then refuses new requests (Admission::kUnavailable). Called from any thread.
  virtual std::string unavailable() const { return {}; }
};

// Adapts an Engine (engine.h).
std::unique_ptr<StepEngine> make_step_engine(std::unique_ptr<Engine> engine);

struct AsyncEngineOptions {
  int64_t max_live_requests = 256;
};

struct AsyncEngineStats {
  int64_t n_queued = 0;         // submitted, not yet handed to the engine
  int64_t n_live = 0;           // queued + inside the engine, unfinished
  int64_t n_steps = 0;          // engine steps run
  int64_t n_output_tokens = 0;  // tokens delivered to callbacks
  double step_seconds = 0.0;    // total time inside step()
  EngineLoad load;              // after the latest step
};

class AsyncEngine {
 public:
  using Callback = std::function<void(const RequestOutput& output, const std::string& error)>;
  // kUnavailable: the engine can never step again (StepEngine::unavailable(); the server
  // answers 503 naming the reason).
  enum class Admission { kAccepted, kFull, kShuttingDown, kUnavailable };

  AsyncEngine(std::unique_ptr<StepEngine> engine, AsyncEngineOptions options);
  ~AsyncEngine();  // shutdown(0)
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Queues the requests (ids unique among live requests, else kInvalidInput is thrown and
  // nothing is queued). `callback` receives the outputs of every request of the group.
  Admission submit(std::vector<EngineRequest> requests, Callback callback);
  // Cancels a live request (queued or running); its final callback says "abort". Unknown or
  // finished ids are ignored.
  void abort(const std::string& id);
  // Stops admission, lets running requests finish for up to `drain_seconds`, aborts the rest,
  // delivers their final callbacks and joins the loop thread. Idempotent.
  void shutdown(double drain_seconds);

  AsyncEngineStats stats() const;
  int64_t max_live_requests() const { return options_.max_live_requests; }
  // StepEngine::unavailable(): empty while the engine can step.
  std::string unavailable() const { return engine_->unavailable(); }
  // StepEngine::compile_constraint, from any thread (the engine's constraint cache is
  // thread-safe); lets a caller compile a request's constraint off the engine thread.
  std::shared_ptr<const grammar::CompiledGrammar> compile_constraint(const std::string& kind,
                                                                     const std::string& text) {
    return engine_->compile_constraint(kind, text);
  }

 private:
  struct Pending {
    EngineRequest request;
    std::shared_ptr<Callback> callback;
  };
  void loop();
  void fail_all(const std::string& error);

  std::unique_ptr<StepEngine> engine_;
  const AsyncEngineOptions options_;

  mutable std::mutex mu_;
  std::condition_variable wake_;                // the loop thread waits on it
  std::condition_variable drained_;             // shutdown() waits for n_live == 0
  std::vector<Pending> inbox_;                  // guarded by mu_
  std::vector<std::string> aborts_;             // guarded by mu_
  std::unordered_map<std::string, std::shared_ptr<Callback>> live_;  // guarded by mu_
  bool accepting_ = true;                       // guarded by mu_
  bool stop_ = false;                           // guarded by mu_
  AsyncEngineStats stats_;                      // guarded by mu_
  std::mutex shutdown_mu_;
  std::thread thread_;
};

}  // namespace deepinfer
