// Prefill limits (scheduler.h): a long prompt shares each step with running decodes and with
// requests that arrive after it. Decodes are always scheduled; while they run, a step's
// prefill tokens stay within max_prefill_tokens_with_decodes and a request's prefill chunk
// within long_prefill_token_threshold; a prefill alone gets the whole budget; the long
// prompt always progresses (no starvation) and completes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "base/error.h"
#include "scheduler/scheduler.h"

namespace deepinfer {
namespace {

// Window 8, blocks of 4; one window-only layer, one ratio-4 layer with indexer, one ratio-128.
CacheLayout small_layout() {
  CacheLayout layout;
  layout.window = 8;
  layout.block_size = 4;
  layout.window_entry_bytes = 16;
  layout.compressed_entry_bytes = 16;
  layout.indexer_entry_bytes = 4;
  layout.layers = {{0, false, 0}, {4, true, 64}, {128, false, 64}};
  return layout;
}

// Room for every request of these tests at once (no preemption).
PoolPlan roomy_plan() {
  PoolPlan plan;
  plan.n_blocks = {512, 2048, 64, 2048};
  plan.n_state_slots = 32;
  return plan;
}

RequestSpec spec(int64_t id, int64_t prompt_len, int64_t max_tokens) {
  RequestSpec s;
  s.id = id;
  s.prompt_token_ids.resize(size_t(prompt_len));
  std::iota(s.prompt_token_ids.begin(), s.prompt_token_ids.end(), int32_t(100 + id));
  s.max_tokens = max_tokens;
  return s;
}

SchedulerConfig config_of(int64_t budget, int64_t prefill_with_decodes, int64_t threshold) {
  SchedulerConfig config;
  config.max_num_batched_tokens = budget;
  config.max_num_seqs = 16;
  config.max_prefill_tokens_with_decodes = prefill_with_decodes;
  config.long_prefill_token_threshold = threshold;
  return config;
}

// One step: what each request computed (0: not scheduled), and whether it was a decode
// (one token reaching the request's end).
struct Step {
  std::map<int64_t, int64_t> tokens;
  std::map<int64_t, bool> decode;
  std::vector<FinishedRequest> finished;
  int64_t prefill_tokens() const {
    int64_t n = 0;
    for (const auto& [id, t] : tokens) n += decode.at(id) ? 0 : t;
    return n;
  }
};

Step run_step(Scheduler& s) {
  Step st;
  std::map<int64_t, int64_t> before;
  for (int64_t id = 0; id < 64; ++id) {
    if (const Request* r = s.find(id)) before[id] = r->num_tokens() - r->num_computed_tokens;
  }
  const SchedulerOutput out = s.schedule();
  std::vector<std::vector<int32_t>> sampled;
  for (const ScheduledChunk& c : out.scheduled) {
    st.tokens[c.request_id] = c.n_tokens;
    st.decode[c.request_id] = before.at(c.request_id) == 1;
    sampled.push_back(c.samples ? std::vector<int32_t>{7} : std::vector<int32_t>{});
  }
  st.finished = s.update(out, sampled);
  return st;
}

// Streams 0..n-1 with short prompts, run until each is decoding.
void start_streams(Scheduler& s, int64_t n, int64_t max_tokens) {
  for (int64_t id = 0; id < n; ++id) s.add_request(spec(id, 3, max_tokens));
  for (int i = 0; i < 3; ++i) run_step(s);
  for (int64_t id = 0; id < n; ++id) ASSERT_EQ(s.find(id)->num_computed_tokens + 1, s.find(id)->num_tokens());
}

TEST(SchedulerFairness, DecodesRunEveryStepAndTheLongPrefillStaysWithinItsCaps) {
  Scheduler s(config_of(256, 48, 32), small_layout(), roomy_plan());
  const int64_t n_streams = 4, long_len = 1000;
  start_streams(s, n_streams, 10000);
  s.add_request(spec(20, long_len, 1));
  int64_t long_done = 0, steps = 0;
  while (s.find(20) != nullptr) {
    const Step st = run_step(s);
    ++steps;
    for (int64_t id = 0; id < n_streams; ++id) {
      ASSERT_EQ(st.tokens.count(id), 1u) << "stream " << id << " skipped in step " << steps;
      EXPECT_TRUE(st.decode.at(id));
      EXPECT_EQ(st.tokens.at(id), 1);
    }
    EXPECT_LE(st.prefill_tokens(), 48) << "step " << steps;
    ASSERT_EQ(st.tokens.count(20), 1u) << "the long prompt got nothing in step " << steps;
    EXPECT_LE(st.tokens.at(20), 32);
    long_done += st.tokens.at(20);
  }
  EXPECT_EQ(long_done, long_len);
  EXPECT_EQ(steps, (long_len + 31) / 32);  // the cap every step: no step without progress
}

TEST(SchedulerFairness, SeveralLongPromptsShareThePrefillBudgetOfAStepWithDecodes) {
  Scheduler s(config_of(256, 48, 32), small_layout(), roomy_plan());
  start_streams(s, 2, 10000);
  for (int64_t id = 20; id < 23; ++id) s.add_request(spec(id, 300, 1));
  std::map<int64_t, int64_t> done;
  for (int step = 0; step < 200 && (s.find(20) || s.find(21) || s.find(22)); ++step) {
    const Step st = run_step(s);
    EXPECT_EQ(st.tokens.at(0), 1);
    EXPECT_EQ(st.tokens.at(1), 1);
    EXPECT_LE(st.prefill_tokens(), 48);
    for (const auto& [id, n] : st.tokens) {
      if (!st.decode.at(id)) EXPECT_LE(n, 32);
      if (id >= 20) done[id] += n;
    }
  }
  for (int64_t id = 20; id < 23; ++id) {
    EXPECT_EQ(s.find(id), nullptr) << "long prompt " << id << " did not finish";
    EXPECT_EQ(done[id], 300);
  }
}

TEST(SchedulerFairness, AShortRequestAfterALongPromptStartsAtOnce) {
  // No decodes: the long prompt alone takes the whole budget; once a short request waits,
  // the long chunk is capped and the short one is admitted in the same step.
  Scheduler s(config_of(256, 48, 32), small_layout(), roomy_plan());
  s.add_request(spec(20, 2000, 1));
  Step st = run_step(s);
  EXPECT_EQ(st.tokens.at(20), 256);
  s.add_request(spec(21, 10, 1));
  st = run_step(s);
  EXPECT_EQ(st.tokens.at(20), 32);
  EXPECT_EQ(st.tokens.at(21), 10);  // its whole prompt: it samples
  ASSERT_EQ(st.finished.size(), 1u);
  EXPECT_EQ(st.finished[0].id, 21);
  // Alone again: the whole budget.
  st = run_step(s);
  EXPECT_EQ(st.tokens.at(20), 256);
}

TEST(SchedulerFairness, TheLongPromptIsNotStarvedByShortArrivals) {
  // A new short request arrives every step while streams decode: the long prompt, earlier in
  // FCFS order than each of them, still gets its capped chunk every step and completes.
  Scheduler s(config_of(256, 48, 32), small_layout(), roomy_plan());
  start_streams(s, 3, 10000);
  s.add_request(spec(20, 640, 1));
  int64_t next_id = 30, steps = 0;
  while (s.find(20) != nullptr) {
    s.add_request(spec(next_id++, 5, 2));
    const Step st = run_step(s);
    ++steps;
    ASSERT_EQ(st.tokens.count(20), 1u) << "step " << steps;
    EXPECT_EQ(st.tokens.at(20), 32);
    EXPECT_LE(st.prefill_tokens(), 48);
    ASSERT_LT(next_id, 60);
  }
  EXPECT_EQ(steps, 640 / 32);
}

TEST(SchedulerFairness, LimitsOffGiveThePrefillTheRestOfTheBudget) {
  Scheduler s(config_of(256, 0, 0), small_layout(), roomy_plan());
  start_streams(s, 4, 10000);
  s.add_request(spec(20, 1000, 1));
  const Step st = run_step(s);
  EXPECT_EQ(st.tokens.at(20), 256 - 4);
}

TEST(SchedulerFairness, OnlyTheThresholdLimitsChunksWhenTheDecodeBudgetIsOff) {
  Scheduler s(config_of(256, 0, 32), small_layout(), roomy_plan());
  start_streams(s, 2, 10000);
  for (int64_t id = 20; id < 30; ++id) s.add_request(spec(id, 100, 1));
  const Step st = run_step(s);
  EXPECT_EQ(st.prefill_tokens(), 256 - 2);  // 7 chunks of 32 and one of 30
  for (int64_t id = 20; id < 27; ++id) EXPECT_EQ(st.tokens.at(id), 32);
  EXPECT_EQ(st.tokens.at(27), 30);
}

TEST(SchedulerFairness, NegativeLimitsAreRejected) {
  EXPECT_THROW(Scheduler(config_of(256, -1, 0), small_layout(), roomy_plan()), Error);
  EXPECT_THROW(Scheduler(config_of(256, 0, -1), small_layout(), roomy_plan()), Error);
}

}  // namespace
}  // namespace deepinfer
