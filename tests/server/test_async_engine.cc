// AsyncEngine over a scripted StepEngine: every output reaches its callback exactly once per
// step, each request ends with exactly one finished callback, admission is bounded (groups
// whole), aborts work for queued and running requests, engine rejections and step failures
// end requests with an error, shutdown drains or aborts.
#include "engine/async_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/error.h"

namespace deepinfer {
namespace {

// Each request produces one token per step (token = step index) until params.max_tokens.
// A step can be made to block until released, ids starting with "bad" are rejected, and those
// starting with "fail" fail on their own at their second token (RequestOutput::error).
class ScriptedEngine : public StepEngine {
 public:
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool gate_open = true;
    int64_t n_steps = 0;
    bool fail_next_step = false;
    std::set<std::string> aborted;
  };
  explicit ScriptedEngine(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  void add_request(EngineRequest r) override {
    CHECK(r.id.rfind("bad", 0) != 0) << "rejected " << r.id;
    CHECK(!live_.count(r.id)) << "duplicate " << r.id;
    live_[r.id] = {r.params.max_tokens, 0};
  }
  bool abort(const std::string& id) override {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (!live_.erase(id)) return false;
    shared_->aborted.insert(id);
    return true;
  }
  std::vector<RequestOutput> step() override {
    {
      std::unique_lock<std::mutex> lock(shared_->mu);
      shared_->cv.wait(lock, [&] { return shared_->gate_open; });
      ++shared_->n_steps;
      if (shared_->fail_next_step) {
        shared_->fail_next_step = false;
        THROW(kInternal) << "scripted failure";
      }
    }
    std::vector<RequestOutput> outs;
    for (auto it = live_.begin(); it != live_.end();) {
      RequestOutput o;
      o.id = it->first;
      o.new_tokens = {static_cast<int32_t>(it->second.produced)};
      it->second.produced += 1;
      o.n_output_tokens = it->second.produced;
      o.finished = it->second.produced >= it->second.max_tokens;
      if (o.finished) o.finish_reason = "length";
      if (it->first.rfind("fail", 0) == 0 && it->second.produced == 2) {
        o.finished = true;
        o.finish_reason = "error";
        o.error = "scripted row failure";
      }
      outs.push_back(o);
      it = o.finished ? live_.erase(it) : std::next(it);
    }
    return outs;
  }
  bool has_unfinished() const override { return !live_.empty(); }

 private:
  struct State {
    int64_t max_tokens;
    int64_t produced;
  };
  std::shared_ptr<Shared> shared_;
  std::map<std::string, State> live_;
};

EngineRequest request(const std::string& id, int64_t max_tokens) {
  EngineRequest r;
  r.id = id;
  r.prompt = {1, 2, 3};
  r.params.max_tokens = max_tokens;
  return r;
}

// Collects callbacks; waits for a number of finished outputs.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, std::string> reasons;
  std::map<std::string, std::string> errors;
  std::map<std::string, int> n_finished;
  int total_finished = 0;

  AsyncEngine::Callback callback() {
    return [this](const RequestOutput& out, const std::string& error) {
      std::lock_guard<std::mutex> lock(mu);
      auto& t = tokens[out.id];
      t.insert(t.end(), out.new_tokens.begin(), out.new_tokens.end());
      if (out.finished) {
        reasons[out.id] = out.finish_reason;
        n_finished[out.id] += 1;
        ++total_finished;
        if (!error.empty()) errors[out.id] = error;
        cv.notify_all();
      }
    };
  }
  bool wait_finished(int n, double seconds = 10.0) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return total_finished >= n; });
  }
};

TEST(AsyncEngine, DeliversEveryTokenAndOneFinish) {
  auto shared = std::make_shared<ScriptedEngine::Shared>();
  AsyncEngine engine(std::make_unique<ScriptedEngine>(shared), {.max_live_requests = 64});
  Collector c;
  const int n = 20;
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(engine.submit({request("r" + std::to_string(i), 1 + i % 7)}, c.callback()),
              AsyncEngine::Admission::kAccepted);
  }
  ASSERT_TRUE(c.wait_finished(n));
  for (int i = 0; i < n; ++i) {
    const std::string id = "r" + std::to_string(i);
    std::vector<int32_t> want;
    for (int k = 0; k < 1 + i % 7; ++k) want.push_back(k);
    EXPECT_EQ(c.tokens[id], want) << id;
    EXPECT_EQ(c.reasons[id], "length");
    EXPECT_EQ(c.n_finished[id], 1);
  }
  engine.shutdown(1.0);
  const AsyncEngineStats s = engine.stats();
  EXPECT_EQ(s.n_live, 0);
  EXPECT_GT(s.n_steps, 0);
  int64_t tokens = 0;
  for (int i = 0; i < n; ++i) tokens += 1 + i % 7;
  EXPECT_EQ(s.n_output_tokens, tokens);
}

TEST(AsyncEngine, BoundedAdmissionAdmitsGroupsWhole) {
  auto shared = std::make_shared<ScriptedEngine::Shared>();
  shared->gate_open = false;  // nothing finishes until released
  AsyncEngine engine(std::make_unique<ScriptedEngine>(shared), {.max_live_requests = 3});
  Collector c;
  EXPECT_EQ(engine.submit({request("a", 2), request("b", 2)}, c.callback()), AsyncEngine::Admission::kAccepted);
  // Two more do not fit (2 + 2 > 3): neither is admitted.
  EXPECT_EQ(engine.submit({request("c", 2), request("d", 2)}, c.callback()), AsyncEngine::Admission::kFull);
  EXPECT_EQ(engine.submit({request("c", 2)}, c.callback()), AsyncEngine::Admission::kAccepted);
  EXPECT_EQ(engine.submit({request("e", 2)}, c.callback()), AsyncEngine::Admission::kFull);
  EXPECT_EQ(engine.stats().n_live, 3);
  {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->gate_open = true;
  }
  shared->cv.notify_all();
  ASSERT_TRUE(c.wait_finished(3));
  EXPECT_EQ(c.tokens.count("d"), 0u);
  EXPECT_EQ(c.tokens.count("e"), 0u);
  // Room again once they finished.
  EXPECT_EQ(engine.submit({request("e", 1)}, c.callback()), AsyncEngine::Admission::kAccepted);
  ASSERT_TRUE(c.wait_finished(4));
}

TEST(AsyncEngine, DuplicateIdsAreRefusedWhole) {
  auto shared = std::make_shared<ScriptedEngine::Shared>();
  shared->gate_open = false;
  AsyncEngine engine(std::make_unique<ScriptedEngine>(shared), {.max_live_requests = 8});
  Collector c;
  ASSERT_EQ(engine.submit({request("x", 3)}, c.callback()), AsyncEngine::Admission::kAccepted);
  EXPECT_THROW(engine.submit({request("y", 1), request("x", 1)}, c.callback()), Error);
  EXPECT_THROW(engine.submit({request("z", 1), request("z", 1)}, c.callback()), Error);
  EXPECT_EQ(engine.stats().n_live, 1);
  {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->gate_open = true;
  }
  shared->cv.notify_all();
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.tokens.count("y"), 0u);
}

TEST(AsyncEngine, AbortEndsRunningRequestOnce) {
  auto shared = std::make_shared<ScriptedEngine::Shared>();
  AsyncEngine engine(std::make_unique<ScriptedEngine>(shared), {.max_live_requests = 8});
  Collector c;
  ASSERT_EQ(engine.submit({request("long", 1000000)}, c.callback()), AsyncEngine::Admission::kAccepted);
  ASSERT_EQ(engine.submit({request("short", 3)}, c.callback()), AsyncEngine::Admission::kAccepted);
  // Let it run a few steps, then abort.
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::lock_guard<std::mutex> lock(shared->mu);
    if (shared->n_steps > 5) break;
  }
  engine.abort("long");
  engine.abort("unknown-id");  // ignored
  ASSERT_TRUE(c.wait_finished(2));
  EXPECT_EQ(c.reasons["long"], "abort");
  EXPECT_EQ(c.n_finished["long"], 1);
  EXPECT_EQ(c.reasons["short"], "length");
  {
    std::lock_guard<std::mutex> lock(shared->mu);
    EXPECT_EQ(shared->aborted.count("long"), 1u);
  }
  EXPECT_EQ(engine.stats().n_live, 0);
  engine.abort("long");  // already finished: ignored
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(c.n_finished["long"], 1);
}

TEST(AsyncEngine, RejectedRequestEndsWithError) {
  auto shared = std::make_shared<ScriptedEngine::Shared>();
  AsyncEngine engine(std::make_unique<ScriptedEngine>(shared), {.max_live_requests = 8});
  Collector c;
  ASSERT_EQ(engine.submit({request("bad-1", 3), request("good", 2)}, c.callback()),
            AsyncEngine::Admission::kAccepted);
  ASSERT_TRUE(c.wait_finished(2));
  EXPECT_EQ(c.reasons["bad-1"], "error");
  EXPECT_NE(c.errors["bad-1"].find("rejected bad-1"), std::string::npos);
  EXPECT_EQ(c.reasons["good"], "length");
  EXPECT_EQ(engine.stats().n_live, 0);
}

TEST(AsyncEngine, RequestFailureEndsThatRequestOnly) {
  auto shared = std::make_shared<ScriptedEngine::Shared>();
  AsyncEngine engine(std::make_unique<ScriptedEngine>(shared), {.max_live_requests = 8});
  Collector c;
  ASSERT_EQ(engine.submit({request("fail-1", 5), request("good", 4)}, c.callback()),
            AsyncEngine::Admission::kAccepted);
  ASSERT_EQ(engine.submit({request("other", 6)}, c.callback()), AsyncEngine::Admission::kAccepted);
  ASSERT_TRUE(c.wait_finished(3));
  std::lock_guard<std::mutex> lock(c.mu);
  EXPECT_EQ(c.reasons["fail-1"], "error");
  EXPECT_EQ(c.errors["fail-1"], "scripted row failure");
  EXPECT_EQ(c.tokens["fail-1"].size(), 2u);
  EXPECT_EQ(c.reasons["good"], "length");
  EXPECT_EQ(c.reasons["other"], "length");
  EXPECT_EQ(c.tokens["good"].size(), 4u);
  EXPECT_EQ(c.tokens["other"].size(), 6u);
  EXPECT_EQ(c.errors.count("good") + c.errors.count("other"), 0u);
  EXPECT_EQ(c.n_finished["fail-1"], 1);
}

TEST(AsyncEngine, StepFailureFailsLiveRequestsAndKeepsServing) {
  auto shared = std::make_shared<ScriptedEngine::Shared>();
  shared->gate_open = false;
  AsyncEngine engine(std::make_unique<ScriptedEngine>(shared), {.max_live_requests = 8});
  Collector c;
  ASSERT_EQ(engine.submit({request("p", 5), request("q", 5)}, c.callback()), AsyncEngine::Admission::kAccepted);
  {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->fail_next_step = true;
    shared->gate_open = true;
  }
  shared->cv.notify_all();
  ASSERT_TRUE(c.wait_finished(2));
  EXPECT_EQ(c.reasons["p"], "error");
  EXPECT_EQ(c.reasons["q"], "error");
  EXPECT_NE(c.errors["p"].find("scripted failure"), std::string::npos);
  ASSERT_EQ(engine.submit({request("r", 2)}, c.callback()), AsyncEngine::Admission::kAccepted);
  ASSERT_TRUE(c.wait_finished(3));
  EXPECT_EQ(c.reasons["r"], "length");
}

TEST(AsyncEngine, ShutdownDrainsThenRefuses) {
  auto shared = std::make_shared<ScriptedEngine::Shared>();
  AsyncEngine engine(std::make_unique<ScriptedEngine>(shared), {.max_live_requests = 8});
  Collector c;
  ASSERT_EQ(engine.submit({request("d1", 50), request("d2", 30)}, c.callback()), AsyncEngine::Admission::kAccepted);
  engine.shutdown(10.0);  // long enough to finish both
  EXPECT_EQ(c.total_finished, 2);
  EXPECT_EQ(c.reasons["d1"], "length");
  EXPECT_EQ(c.tokens["d1"].size(), 50u);
  EXPECT_EQ(engine.submit({request("late", 1)}, c.callback()), AsyncEngine::Admission::kShuttingDown);
  engine.shutdown(1.0);  // idempotent
}

TEST(AsyncEngine, ShutdownAbortsWhatDoesNotDrain) {
  auto shared = std::make_shared<ScriptedEngine::Shared>();
  AsyncEngine engine(std::make_unique<ScriptedEngine>(shared), {.max_live_requests = 8});
  Collector c;
  ASSERT_EQ(engine.submit({request("forever", 1000000000)}, c.callback()), AsyncEngine::Admission::kAccepted);
  engine.shutdown(0.05);
  ASSERT_EQ(c.total_finished, 1);
  EXPECT_EQ(c.reasons["forever"], "abort");
  EXPECT_EQ(c.n_finished["forever"], 1);
}

TEST(AsyncEngine, CallbacksMaySubmitAndAbort) {
  auto shared = std::make_shared<ScriptedEngine::Shared>();
  AsyncEngine engine(std::make_unique<ScriptedEngine>(shared), {.max_live_requests = 8});
  Collector c;
  std::atomic<bool> chained{false};
  auto inner = c.callback();
  AsyncEngine::Callback cb = [&](const RequestOutput& out, const std::string& error) {
    inner(out, error);
    if (out.id == "first" && out.finished && !chained.exchange(true)) {
      EXPECT_EQ(engine.submit({request("second", 2)}, inner), AsyncEngine::Admission::kAccepted);
      engine.abort("nonexistent");
    }
  };
  ASSERT_EQ(engine.submit({request("first", 2)}, cb), AsyncEngine::Admission::kAccepted);
  ASSERT_TRUE(c.wait_finished(2));
  EXPECT_EQ(c.reasons["second"], "length");
}

}  // namespace
}  // namespace deepinfer
