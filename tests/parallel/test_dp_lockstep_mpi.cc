// Lockstep of attention data parallel (parallel/dp/dp_lockstep.h) across processes, under
// mpirun with 2 ranks:
//   - step_agreement: every rank learns how many ranks have work, whatever the pattern;
//   - engines with collective_steps behind AsyncEngine + LockstepEngine: ranks with different
//     loads (one idle, one with several requests, then the other way round) run exactly the
//     same number of forwards (a runner wrapper all-reduces its launch count at every launch,
//     the stand-in for the MoE layers' all-to-all, and fails on a mismatch), idle ranks
//     forwards with zero chunks; every rank's tokens equal a plain single-process engine's;
//   - speculative decoding with collective_steps is refused (kUnsupported);
//   - a rank that stops stepping makes its peer fail every live request with an error
//     naming the timeout within DEEPINFER_COMM_TIMEOUT_S-like bounds, after which the peer's
//     engine is unavailable (submit answers kUnavailable) instead of hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "../engine/engine_test_util.h"
#include "base/error.h"
#include "engine/async_engine.h"
#include "engine/sampler.h"
#include "parallel/dp/dp_lockstep.h"
#include "parallel/mpi_communicator.h"

namespace deepinfer {
namespace {

using Clock = std::chrono::steady_clock;
using testing::ForwardingRunner;

// All-reduces the number of launches so far at every launch: a rank that launches more or
// fewer forwards than its peers makes every rank's check fail (or time out).
class CollectiveRunner final : public ForwardingRunner {
 public:
  CollectiveRunner(std::unique_ptr<ModelRunner> inner, Communicator& comm, std::shared_ptr<int64_t> n_empty)
      : ForwardingRunner(std::move(inner)), comm_(comm), n_empty_(std::move(n_empty)) {}
  void launch(std::span<const RunnerChunk> chunks, std::span<const RowRequest> rows,
              const std::function<void()>& before_sampling = {}) override {
    ++n_;
    int64_t lo = 0, hi = 0;
    comm_.all_reduce(&n_, &lo, 1, DType::I64, ReduceOp::kMin);
    comm_.all_reduce(&n_, &hi, 1, DType::I64, ReduceOp::kMax);
    ICHECK(lo == hi) << "forward " << n_ << " out of lockstep: the ranks are at " << lo << ".." << hi;
    if (chunks.empty()) ++*n_empty_;
    inner_->launch(chunks, rows, before_sampling);
  }

 private:
  Communicator& comm_;
  int64_t n_ = 0;
  std::shared_ptr<int64_t> n_empty_;
};

std::unique_ptr<ModelRunner> sampled_cpu_runner() {
  auto r = std::make_unique<CpuRunner>(testing::small_model());
  r->set_sampler(sample_row_request);
  return r;
}

// Outputs collected from AsyncEngine callbacks.
struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, std::string> errors;
  int n_finished = 0;
  AsyncEngine::Callback callback() {
    return [this](const RequestOutput& o, const std::string& error) {
      std::lock_guard<std::mutex> lock(mu);
      auto& t = tokens[o.id];
      t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
      if (o.finished) {
        ++n_finished;
        if (!error.empty()) errors[o.id] = error;
      }
      cv.notify_all();
    };
  }
  bool wait_for(int n, double seconds) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return n_finished >= n; });
  }
};

std::vector<EngineRequest> requests_of(int rank, int n, int round) {
  std::vector<EngineRequest> out;
  for (int i = 0; i < n; ++i) {
    const int len = 3 + 5 * i + rank;
    out.push_back(testing::greedy("r" + std::to_string(rank) + "-" + std::to_string(round) + "-" + std::to_string(i),
                                  testing::random_tokens(len, testing::small_config().vocab_size, 900 + 31 * rank + i),
                                  2 + (i % 3) * 3));
  }
  return out;
}

EngineArgs collective_args() {
  EngineArgs a;
  a.collective_steps = true;
  a.max_num_batched_tokens = 32;  // chunked prefill: several forwards per prompt
  a.long_prefill_token_threshold = 0;
  a.max_prefill_tokens_with_decodes = 0;
  a.max_model_len = 256;
  return a;
}

TEST(DpLockstep, StepAgreementCountsBusyRanks) {
  auto world = MpiCommunicator::world();
  const int me = world->rank(), n = world->size();
  for (int pattern = 0; pattern < (1 << n); ++pattern) {
    const bool busy = (pattern >> me) & 1;
    const dp::StepAgreement a = dp::step_agreement(*world, busy);
    EXPECT_EQ(a.n_busy, __builtin_popcount(unsigned(pattern)));
    EXPECT_EQ(a.any_busy, pattern != 0);
  }
}

TEST(DpLockstep, SpeculativeDecodingIsRefused) {
  EngineArgs a = collective_args();
  a.num_speculative_tokens = 2;
  a.spec_test_drafter = [](const std::string&, std::span<const int32_t>, int64_t) {
    return EngineArgs::DraftProposal{};
  };
  try {
    auto source = random_weights(testing::small_config(), testing::kEngineTestSeed);
    Engine e(a, Model::from_source(testing::small_config(), *source, {Numerics::kOfficial, true, /*max_rollback=*/4}),
             nullptr);
    FAIL() << "collective steps with speculative decoding were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("--data-parallel-size"), std::string::npos) << e.what();
  }
}

TEST(DpLockstep, UnequalLoadsStepTogetherAndMatchOneProcess) {
  auto world = MpiCommunicator::world();
  const int me = world->rank();
  std::unique_ptr<Communicator> forward_comm = world->split(0, me);
  auto n_empty = std::make_shared<int64_t>(0);
  auto engine = std::make_unique<Engine>(
      collective_args(), std::make_unique<CollectiveRunner>(sampled_cpu_runner(), *forward_comm, n_empty), nullptr);
  auto lockstep = std::make_unique<dp::LockstepEngine>(make_step_engine(std::move(engine)), world->split(0, me));
  dp::LockstepEngine* ls = lockstep.get();
  AsyncEngine async(std::move(lockstep), AsyncEngineOptions{});
  // Round 0: rank 0 has 4 requests, the others none; round 1: the last rank has 3, rank 0 one.
  std::vector<EngineRequest> all;
  Collected got;
  int n_mine = 0;
  for (int round = 0; round < 2; ++round) {
    const int n = round == 0 ? (me == 0 ? 4 : 0) : (me == world->size() - 1 ? 3 : (me == 0 ? 1 : 0));
    std::vector<EngineRequest> reqs = requests_of(me, n, round);
    all.insert(all.end(), reqs.begin(), reqs.end());
    n_mine += n;
    if (n > 0) ASSERT_EQ(async.submit(std::move(reqs), got.callback()), AsyncEngine::Admission::kAccepted);
    ASSERT_TRUE(got.wait_for(n_mine, 60)) << "rank " << me << " round " << round;
    world->barrier();
  }
  EXPECT_TRUE(got.errors.empty()) << got.errors.begin()->second;
  async.shutdown(0);  // the loop stops with no step in flight (every rank idle)
  EXPECT_GT(ls->n_agreements(), 0);
  // The ranks without work in a round ran empty forwards meanwhile.
  int64_t empties = *n_empty, total = 0;
  world->all_reduce(&empties, &total, 1, DType::I64, ReduceOp::kSum);
  EXPECT_GT(total, 0);
  // Same tokens as one plain engine (overlap on, no collectives).
  EngineArgs plain = collective_args();
  plain.collective_steps = false;
  Engine reference(plain, testing::small_model(), nullptr);
  for (const RequestOutput& o : reference.generate(all)) {
    EXPECT_EQ(got.tokens[o.id], o.new_tokens) << o.id;
  }
}

TEST(DpLockstep, AStalledPeerFailsRequestsAndMakesTheEngineUnavailable) {
  auto world = MpiCommunicator::world();
  const int me = world->rank(), n = world->size();
  auto group = world->split(0, me);
  dynamic_cast<MpiCommunicator&>(*group).set_timeout(std::chrono::milliseconds(2000));
  if (me == n - 1) {  // the stalled rank: never joins the group's agreements
    std::this_thread::sleep_for(std::chrono::milliseconds(4000));
  } else {
    auto engine = std::make_unique<Engine>(collective_args(), testing::small_model(), nullptr);
    auto lockstep = std::make_unique<dp::LockstepEngine>(make_step_engine(std::move(engine)), std::move(group));
    AsyncEngine async(std::move(lockstep), AsyncEngineOptions{});
    Collected got;
    const auto t0 = Clock::now();
    ASSERT_EQ(async.submit(requests_of(me, 2, 9), got.callback()), AsyncEngine::Admission::kAccepted);
    ASSERT_TRUE(got.wait_for(2, 10)) << "requests of a broken group did not fail";
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_GE(waited, 1.5);
    EXPECT_LT(waited, 6.0);
    ASSERT_EQ(got.errors.size(), 2u);
    for (const auto& [id, e] : got.errors) EXPECT_NE(e.find("timed out after 2 s"), std::string::npos) << e;
    EXPECT_NE(async.unavailable().find("timed out"), std::string::npos) << async.unavailable();
    EXPECT_EQ(async.submit(requests_of(me, 1, 10), got.callback()), AsyncEngine::Admission::kUnavailable);
    async.shutdown(0);
  }
  world->barrier();  // the world itself is fine
}

}  // namespace
}  // namespace deepinfer
