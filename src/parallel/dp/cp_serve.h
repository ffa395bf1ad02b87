// Context-parallel prefill in `deepinfer serve --context-parallel-size C` (issue 19 deliverable
// 5 served; the CP forward itself is Model::forward_context_parallel, parallel/context_parallel.h).
//
// Process model: the C ranks of a CP group are ONE attention data-parallel replica. Its leader
// (CP rank 0) runs the engine, the scheduler and the HTTP server; the followers (CP ranks 1..C-1)
// have a Model and no engine, and run run_cp_follower. The leader's CpuRunner runs every launched
// step through a CpLeader (runtime/cpu_runner.h CpuStepDriver), which sends the followers one
// command per step over the CP communicator (two broadcasts: a fixed header, then the releases and
// tokens):
//   * a CP chunk: the step's chunk of at least min_tokens tokens whose sequence the followers
//     mirror (or that starts at position 0: the followers then make a fresh mirror state). Every
//     CP rank calls forward_context_parallel with it on its own state of that sequence (the
//     leader: the runner's; a follower: its mirror), so all states advance alike and the leader
//     uses the logits. With several eligible chunks the longest (then the first) goes.
//   * no CP chunk: the leader runs the step alone (Model::forward); a follower then runs an empty
//     forward when its model is expert-parallel (its EP group's step: the MoE exchanges are
//     collective) and nothing otherwise.
//   * releases: sequences whose mirrors are stale or gone (freed, preempted or aborted; finished;
//     advanced on the leader alone, e.g. a prefill's short last chunk or its first decode step;
//     rolled back). The leader collects them and sends them with its next command; a follower
//     drops those mirrors first.
// A step with a CP chunk and other chunks (e.g. decodes of other requests): without expert
// parallelism the leader runs the CP chunk with its followers and then the other chunks alone
// (two forwards, logits merged in the step's row order; bitwise the one-forward logits under
// batch_invariant); with expert parallelism a step must stay one forward per rank (the EP
// group's collective count), so the CP path is taken only when the chunk is the step's only one.
//
// Steps: every rank of the step group (the lcm(ep, cp) contiguous ranks that EP and CP tie
// together; serve_parallel.h) agrees before each step exactly as LockstepEngine does
// (dp_lockstep.h): the leader through its LockstepEngine, a follower as a rank that never has
// work. After an agreement to step, each leader runs exactly one launched step (EngineArgs::
// collective_steps) and so sends exactly one command, which its followers wait for.
//
// Failures (DEEPINFER_COMM_TIMEOUT_S bounds every wait): a follower that hangs makes the leader's
// next agreement or CP collective time out: the step fails, its requests get an error and the
// replica answers 503 from then on (LockstepEngine). A follower that dies ends the mpirun job
// (leader included: the front answers 503 for the replica). A leader that hangs or dies makes the
// followers' agreement time out: run_cp_follower throws. A chunk the model refuses (kInvalidInput,
// kUnsupported ...: the same on every CP rank, the forward agrees on the chunk first) fails that
// step on the leader; the followers drop that mirror and go on.
//
// Thread-safety: CpLeader's forward_step / invalidate are called by the runner one at a time
// (ModelRunner's contract); stats() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/context_parallel.h"
#include "runtime/cpu_runner.h"

namespace deepinfer::dp {

struct CpServeStats {
  int64_t cp_size = 1;
  int64_t steps = 0;         // commands sent (one per launched step)
  int64_t cp_chunks = 0;     // chunks run context-parallel
  int64_t cp_tokens = 0;     // their tokens
  int64_t mirrored = 0;      // sequences the followers mirror now
  int64_t releases = 0;      // mirrors released
};

class CpLeader final : public CpuStepDriver {
 public:
  // `comm`: the CP group, this rank its rank 0. `min_tokens` >= 1: the shortest chunk run
  // context-parallel.
  CpLeader(std::unique_ptr<Communicator> comm, int64_t min_tokens);

  Tensor forward_step(const Model& model, std::span<const SequenceChunk> chunks,
                      std::span<const int64_t> sequences) override;
  void invalidate(int64_t sequence) override;

  int64_t min_tokens() const { return min_tokens_; }
  CpServeStats stats() const;  // thread-safe

 private:
  void send(int64_t sequence, const SequenceChunk* chunk);
  void release(int64_t sequence);  // caller holds mu_

  std::unique_ptr<Communicator> comm_;
  ContextParallel cp_;
  const int64_t min_tokens_;
  mutable std::mutex mu_;
  std::unordered_set<int64_t> mirrored_;  // guarded by mu_
  std::vector<int64_t> pending_releases_;  // guarded by mu_
  std::atomic<int64_t> steps_{0}, cp_chunks_{0}, cp_tokens_{0}, releases_{0}, n_mirrored_{0};
};

// Prometheus lines of a leader's stats for /metrics: deepinfer_cp_size (gauge),
// deepinfer_cp_steps_total, deepinfer_cp_prefill_chunks_total, deepinfer_cp_prefill_tokens_total,
// deepinfer_cp_releases_total (counters), deepinfer_cp_mirrored_sequences (gauge).
std::string cp_metrics_text(const CpServeStats& stats);

// A follower (CP rank > 0): agrees on every step over `step_comm` (never busy; idle_poll between
// idle agreements, as LockstepEngine) and runs its leader's command over `cp_comm` after each
// agreement to step. Returns when a rank of the step group leaves (shutdown); throws Error
// (kDevice) when a communicator fails (a peer died or hangs).
void run_cp_follower(const Model& model, Communicator& step_comm, Communicator& cp_comm,
                     std::chrono::milliseconds idle_poll = std::chrono::milliseconds(5));

}  // namespace deepinfer::dp
