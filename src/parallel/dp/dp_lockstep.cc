// Lockstep of attention data parallel (dp_lockstep.h).
#include "parallel/dp/dp_lockstep.h"

#include "base/error.h"
#include "base/logging.h"

namespace deepinfer::dp {

StepAgreement step_agreement(Communicator& comm, bool busy, bool leaving) {
  const int64_t mine[2] = {busy ? 1 : 0, leaving ? 1 : 0};
  int64_t all[2] = {0, 0};
  comm.all_reduce(mine, all, 2, DType::I64, ReduceOp::kSum);
  return {all[0] > 0, all[0], all[1]};
}

LockstepEngine::LockstepEngine(std::unique_ptr<StepEngine> inner, std::unique_ptr<Communicator> comm,
                               std::chrono::milliseconds idle_poll)
    : inner_(std::move(inner)), comm_(std::move(comm)), idle_poll_(idle_poll) {
  ICHECK(inner_ != nullptr && comm_ != nullptr);
  CHECK(idle_poll_.count() > 0) << "lockstep: idle_poll must be positive";
}

void LockstepEngine::break_group(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (unavailable_.empty()) {
    unavailable_ = "rank " + std::to_string(comm_->rank()) + " of its lockstep group of " +
                   std::to_string(comm_->size()) + ": " + what;
    LOG(ERROR) << "data parallel: this replica is unavailable from now on (" << unavailable_ << ")";
  }
}

bool LockstepEngine::agree_to_step(bool busy) {
  if (!unavailable().empty()) return false;
  StepAgreement a;
  try {
    ++n_agreements_;
    a = step_agreement(*comm_, busy);
  } catch (const std::exception& e) {
    break_group(e.what());
    throw;
  }
  if (a.n_leaving > 0) {
    break_group(std::to_string(a.n_leaving) + " rank(s) of the group shut down");
    THROW(kDevice) << "this replica's lockstep group is shutting down (" << unavailable() << ")";
  }
  return a.any_busy;
}

void LockstepEngine::leave() {
  if (!unavailable().empty()) return;
  try {
    step_agreement(*comm_, false, true);
  } catch (const std::exception& e) {
    break_group(e.what());
    throw;
  }
  break_group("this rank shut down");
}

std::vector<RequestOutput> LockstepEngine::step() {
  try {
    return inner_->step();
  } catch (const std::exception& e) {
    // The forward count of this rank may now differ from its peers': the group cannot go on.
    break_group(std::string("a step failed: ") + e.what());
    throw;
  }
}

std::string LockstepEngine::unavailable() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unavailable_;
}

}  // namespace deepinfer::dp
