// Lockstep of attention data parallel (issue 19 deliverable 2): every rank of an
// expert-parallel group is a DP replica with its own scheduler and requests, while the MoE
// layers of the model are collective over the group (parallel/expert_parallel.h). So all
// ranks of a group step together, as DeepInfer does: before each step the ranks agree (one
// all_reduce of two int64 over the group) whether anyone has work; if so every rank steps,
// an idle one with zero chunks (EngineArgs::collective_steps: Engine::step() then runs
// exactly one forward, empty when nothing is scheduled). While nobody has work the ranks ask
// again every idle_poll (AsyncEngine waits on its inbox meanwhile: no spinning). Mixed
// prefill + decode batches stay allowed: only the number of forwards must match.
//
// The same lockstep ties a context-parallel replica's leader to its followers (cp_serve.h): the
// group is then the step group of serve_parallel.h (lcm(ep, cp) ranks), the followers agreeing
// as ranks without work.
//
// LockstepEngine wraps the StepEngine that AsyncEngine drives (StepEngine::agree_to_step,
// idle_poll, unavailable; async_engine.h). A failed agreement or step (a peer died or hangs:
// the communicator's timeout, DEEPINFER_COMM_TIMEOUT_S) breaks the group for good: the
// exception fails every live request (AsyncEngine), and from then on unavailable() names the
// failure, so the server answers 503 instead of hanging; agree_to_step() answers false
// without touching the communicator. Shutdown is collective too: a rank whose server stops
// says so in its last agreement (leave()), and its peers end as if the group broke, at once
// rather than after the timeout.
//
// Steps agreed: step_agreement() is the agreement alone, for tests and for callers that
// drive an Engine themselves (tests/parallel/test_dp_lockstep_mpi.cc).
//
// Thread-safety: the StepEngine methods are called by the AsyncEngine loop thread only (the
// communicator's one thread); unavailable() from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "engine/async_engine.h"
#include "parallel/communicator.h"

namespace deepinfer::dp {

struct StepAgreement {
  bool any_busy = false;     // some rank of the group has work: every rank steps
  int64_t n_busy = 0;        // ranks with work
  int64_t n_leaving = 0;     // ranks that stop (shutdown): the group ends
};

// One agreement over `comm` (collective): whether any rank has work, whether any leaves.
StepAgreement step_agreement(Communicator& comm, bool busy, bool leaving = false);

class LockstepEngine final : public StepEngine {
 public:
  // `comm`: the expert-parallel group (the same ranks as the model's EP communicator; a
  // communicator of its own, since the agreement and the forward run in order on one thread
  // anyway it may also be a split of it).
  LockstepEngine(std::unique_ptr<StepEngine> inner, std::unique_ptr<Communicator> comm,
                 std::chrono::milliseconds idle_poll = std::chrono::milliseconds(5));

  void add_request(EngineRequest request) override { inner_->add_request(std::move(request)); }
  bool abort(const std::string& id) override { return inner_->abort(id); }
  std::vector<RequestOutput> step() override;
  bool has_unfinished() const override { return inner_->has_unfinished(); }
  EngineLoad load() const override { return inner_->load(); }
  std::shared_ptr<const grammar::CompiledGrammar> compile_constraint(const std::string& kind,
                                                                     const std::string& text) override {
    return inner_->compile_constraint(kind, text);
  }
  bool agree_to_step(bool busy) override;
  std::chrono::milliseconds idle_poll() const override { return idle_poll_; }
  // One last agreement saying this rank leaves; the peers' agree_to_step then throws (their
  // live requests fail: "rank k ... shut down") and they stay unavailable.
  void leave() override;
  std::string unavailable() const override;

  int64_t n_agreements() const { return n_agreements_; }

 private:
  void break_group(const std::string& what);

  std::unique_ptr<StepEngine> inner_;
  std::unique_ptr<Communicator> comm_;
  const std::chrono::milliseconds idle_poll_;
  int64_t n_agreements_ = 0;
  mutable std::mutex mu_;
  std::string unavailable_;  // guarded by mu_
};

}  // namespace deepinfer::dp
