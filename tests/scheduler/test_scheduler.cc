// Scheduler unit tests: chunked prefill, decodes first, stops, aborts, preemption, priority,
// overlap (schedule t+1 before update t). Property tests with a simulated model are in
// test_scheduler_property.cc.
#include <gtest/gtest.h>

#include <algorithm>
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

PoolPlan plan_of(int64_t window_blocks, int64_t ratio4_blocks, int64_t ratio128_blocks,
                 int64_t slots) {
  PoolPlan plan;
  plan.n_blocks = {window_blocks, ratio4_blocks, ratio128_blocks, ratio4_blocks};
  plan.n_state_slots = slots;
  return plan;
}

RequestSpec spec(int64_t id, int64_t prompt_len, int64_t max_tokens, int64_t priority = 0) {
  RequestSpec s;
  s.id = id;
  s.prompt_token_ids.resize(size_t(prompt_len));
  std::iota(s.prompt_token_ids.begin(), s.prompt_token_ids.end(), int32_t(100 + id));
  s.max_tokens = max_tokens;
  s.priority = priority;
  return s;
}

// Samples `token` for every chunk that samples.
std::vector<std::vector<int32_t>> samples_for(const SchedulerOutput& out, int32_t token) {
  std::vector<std::vector<int32_t>> sampled;
  for (const ScheduledChunk& c : out.scheduled) {
    sampled.push_back(c.samples ? std::vector<int32_t>{token} : std::vector<int32_t>{});
  }
  return sampled;
}

const ScheduledChunk* chunk_of(const SchedulerOutput& out, int64_t id) {
  for (const ScheduledChunk& c : out.scheduled) {
    if (c.request_id == id) return &c;
  }
  return nullptr;
}

SchedulerConfig config_of(int64_t budget, int64_t max_seqs, bool priority = false) {
  SchedulerConfig config;
  config.max_num_batched_tokens = budget;
  config.max_num_seqs = max_seqs;
  config.priority = priority;
  return config;
}

TEST(Scheduler, ChunkedPrefillThenDecodeUntilMaxTokens) {
  Scheduler s(config_of(4, 8), small_layout(), plan_of(32, 32, 4, 4));
  s.add_request(spec(1, 10, 3));
  const std::vector<std::tuple<int64_t, int64_t, bool>> expected = {
      {0, 4, false}, {4, 4, false}, {8, 2, true}, {10, 1, true}, {11, 1, true}};
  std::vector<FinishedRequest> finished;
  for (size_t step = 0; step < expected.size(); ++step) {
    SchedulerOutput out = s.schedule();
    ASSERT_EQ(out.scheduled.size(), 1u) << "step " << step;
    const ScheduledChunk& c = out.scheduled[0];
    EXPECT_EQ(c.start_position, std::get<0>(expected[step]));
    EXPECT_EQ(c.n_tokens, std::get<1>(expected[step]));
    EXPECT_EQ(c.samples, std::get<2>(expected[step]));
    EXPECT_EQ(s.find(1)->num_computed_tokens, c.start_position + c.n_tokens);
    // The window table covers every position the chunk's queries read.
    const std::vector<int32_t>& window = s.cache().block_table(1, 0);
    for (int64_t p = std::max<int64_t>(0, c.start_position - 7); p < c.start_position + c.n_tokens;
         ++p) {
      ASSERT_NE(window.at(size_t(p / 4)), kNoBlock) << "position " << p;
    }
    finished = s.update(out, samples_for(out, int32_t(step)));
  }
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].reason, FinishReason::kLength);
  EXPECT_EQ(finished[0].output_token_ids, (std::vector<int32_t>{2, 3, 4}));
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_TRUE(s.cache().all_free());
  EXPECT_EQ(s.schedule().finished_ids, std::vector<int64_t>{1});
}

TEST(Scheduler, DecodesFirstThenPrefillChunksWithinTheBudget) {
  Scheduler s(config_of(6, 8), small_layout(), plan_of(64, 64, 8, 8));
  s.add_request(spec(1, 2, 10));
  s.add_request(spec(2, 3, 10));
  SchedulerOutput out = s.schedule();  // both prompts fit: 5 tokens
  ASSERT_EQ(out.scheduled.size(), 2u);
  s.update(out, samples_for(out, 7));
  s.add_request(spec(3, 20, 10));
  s.add_request(spec(4, 20, 10));
  out = s.schedule();
  // Two decodes, then request 3's first chunk takes the remaining 4 tokens; 4 waits.
  ASSERT_EQ(out.scheduled.size(), 3u);
  EXPECT_EQ(out.scheduled[0].request_id, 1);
  EXPECT_EQ(out.scheduled[0].n_tokens, 1);
  EXPECT_EQ(out.scheduled[1].request_id, 2);
  EXPECT_EQ(out.scheduled[1].n_tokens, 1);
  EXPECT_EQ(out.scheduled[2].request_id, 3);
  EXPECT_EQ(out.scheduled[2].n_tokens, 4);
  EXPECT_FALSE(out.scheduled[2].samples);
  EXPECT_EQ(out.n_scheduled_tokens, 6);
  s.update(out, samples_for(out, 7));
  out = s.schedule();  // decodes, then 3's next chunk of 4 (a running prefill before 4)
  ASSERT_EQ(out.scheduled.size(), 3u);
  EXPECT_EQ(out.scheduled[2].request_id, 3);
  EXPECT_EQ(out.scheduled[2].start_position, 4);
  EXPECT_EQ(s.num_waiting(), 1);
}

TEST(Scheduler, MaxNumSeqsLimitsRunningRequests) {
  Scheduler s(config_of(100, 2), small_layout(), plan_of(64, 64, 8, 8));
  for (int64_t id = 0; id < 4; ++id) s.add_request(spec(id, 3, 2));
  SchedulerOutput out = s.schedule();
  EXPECT_EQ(out.scheduled.size(), 2u);
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 2);
}

TEST(Scheduler, StopTokenFinishesAfterMinTokens) {
  Scheduler s(config_of(16, 4), small_layout(), plan_of(32, 32, 4, 4));
  RequestSpec r = spec(5, 3, 10);
  r.stop_token_ids = {0};
  r.min_tokens = 2;
  s.add_request(r);
  const std::vector<int32_t> tokens = {0, 9, 0, 8};
  std::vector<FinishedRequest> finished;
  for (int32_t t : tokens) {
    SchedulerOutput out = s.schedule();
    ASSERT_EQ(out.scheduled.size(), 1u);
    finished = s.update(out, samples_for(out, t));
    if (!finished.empty()) break;
  }
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].reason, FinishReason::kStop);
  EXPECT_EQ(finished[0].output_token_ids, (std::vector<int32_t>{0, 9, 0}));
  EXPECT_TRUE(s.cache().all_free());
}

TEST(Scheduler, SeveralSampledTokensAreComputedNextStepAndStopTruncates) {
  Scheduler s(config_of(16, 4), small_layout(), plan_of(32, 32, 4, 4));
  RequestSpec r = spec(1, 3, 10);
  r.stop_token_ids = {0};
  s.add_request(r);
  SchedulerOutput out = s.schedule();
  s.update(out, {{5, 6, 7}});  // e.g. accepted speculative tokens
  out = s.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].start_position, 3);
  EXPECT_EQ(out.scheduled[0].n_tokens, 3);
  EXPECT_TRUE(out.scheduled[0].samples);
  std::vector<FinishedRequest> finished = s.update(out, {{8, 0, 9}});
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].output_token_ids, (std::vector<int32_t>{5, 6, 7, 8, 0}));
}

TEST(Scheduler, DraftTokensAreVerifiedAndRejectedPositionsRecomputed) {
  Scheduler s(config_of(16, 4), small_layout(), plan_of(32, 32, 4, 4));
  s.add_request(spec(1, 4, 6));
  SchedulerOutput out = s.schedule();
  s.update(out, {{5}});
  EXPECT_EQ(s.set_draft_tokens(1, {6, 7, 8, 9, 10}), 4);  // 1 output so far, room for 4 + 1
  EXPECT_EQ(s.set_draft_tokens(1, {6, 7, 8}), 3);
  out = s.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].start_position, 4);
  EXPECT_EQ(out.scheduled[0].n_tokens, 4);
  EXPECT_TRUE(out.scheduled[0].samples);
  EXPECT_EQ(out.scheduled[0].draft_token_ids, (std::vector<int32_t>{6, 7, 8}));
  EXPECT_TRUE(s.find(1)->draft_token_ids.empty());
  EXPECT_EQ(s.find(1)->num_computed_tokens, 8);
  // Two drafts accepted, the third replaced by 9: positions 0..6 stay computed.
  EXPECT_THROW(s.update(out, {{6, 0, 9}}), Error);  // a mismatch before the last token
  EXPECT_TRUE(s.update(out, {{6, 7, 9}}).empty());
  EXPECT_EQ(s.find(1)->num_computed_tokens, 7);
  EXPECT_EQ(s.find(1)->output_token_ids(), (std::vector<int32_t>{5, 6, 7, 9}));
  out = s.schedule();
  EXPECT_EQ(out.scheduled[0].start_position, 7);
  EXPECT_EQ(out.scheduled[0].n_tokens, 1);
  EXPECT_TRUE(out.scheduled[0].draft_token_ids.empty());
  s.update(out, {{11}});
  // All drafts accepted plus one more token reaches max_tokens 6.
  EXPECT_EQ(s.set_draft_tokens(1, {12, 13}), 0);  // 5 outputs: room for none
  out = s.schedule();
  auto done = s.update(out, {{12}});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].output_token_ids, (std::vector<int32_t>{5, 6, 7, 9, 11, 12}));
}

TEST(Scheduler, DraftsCutByTheBudgetAndIgnoredWithSamplesInFlight) {
  Scheduler s(config_of(2, 4), small_layout(), plan_of(32, 32, 4, 4));
  s.add_request(spec(1, 2, 10));
  SchedulerOutput out = s.schedule();
  s.update(out, {{5}});
  EXPECT_EQ(s.set_draft_tokens(1, {6, 7, 8}), 3);
  out = s.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].n_tokens, 2);
  EXPECT_EQ(out.scheduled[0].draft_token_ids, (std::vector<int32_t>{6}));
  s.update(out, {{6, 7}});
  EXPECT_EQ(s.find(1)->num_computed_tokens, 4);
  // Overlap: with a sample in flight, drafts are refused.
  out = s.schedule();
  EXPECT_EQ(s.set_draft_tokens(1, {1}), 0);
  EXPECT_EQ(s.set_draft_tokens(99, {1}), 0);
}

TEST(Scheduler, AbortAndFinishFreeEverythingInAnyState) {
  Scheduler s(config_of(4, 1), small_layout(), plan_of(32, 32, 4, 4));
  s.add_request(spec(1, 10, 5));
  s.add_request(spec(2, 10, 5));
  SchedulerOutput out = s.schedule();
  ASSERT_EQ(chunk_of(out, 1)->n_tokens, 4);
  EXPECT_TRUE(s.cache().has_request(1));
  // Abort the running one mid-prefill, and the waiting one.
  std::optional<FinishedRequest> a = s.abort(1);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->reason, FinishReason::kAbort);
  EXPECT_TRUE(a->output_token_ids.empty());
  EXPECT_FALSE(s.abort(1).has_value());
  EXPECT_TRUE(s.cache().all_free());
  // update of the in-flight step skips the aborted request.
  EXPECT_TRUE(s.update(out, samples_for(out, 3)).empty());
  std::optional<FinishedRequest> b = s.finish(2, FinishReason::kStop);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->reason, FinishReason::kStop);
  out = s.schedule();
  EXPECT_TRUE(out.scheduled.empty());
  EXPECT_EQ(out.finished_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_FALSE(s.has_unfinished());
}

TEST(Scheduler, RejectsBadRequests) {
  SchedulerConfig config = config_of(16, 4);
  config.max_model_len = 40;
  Scheduler s(config, small_layout(), plan_of(32, 2, 4, 4));
  s.add_request(spec(1, 3, 3));
  EXPECT_THROW(s.add_request(spec(1, 3, 3)), Error);  // live duplicate
  EXPECT_THROW(s.add_request(spec(2, 0, 3)), Error);  // empty prompt
  EXPECT_THROW(s.add_request(spec(3, 3, 0)), Error);  // max_tokens 0
  EXPECT_THROW(s.add_request(spec(4, 30, 11)), Error);  // over max_model_len
  try {
    s.add_request(spec(5, 30, 10));  // 40 tokens: 10 ratio-4 entries need 3 blocks of 4
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
  }
  s.add_request(spec(6, 30, 2));  // 32 tokens: 8 entries, 2 blocks
  EXPECT_EQ(s.num_waiting(), 2);
}

// Two requests that cannot both hold their compressed entries: the later one is preempted,
// recomputes its prompt and outputs, and completes.
TEST(Scheduler, PreemptsTheLatestRequestAndRecomputesIt) {
  // Ratio-4 pool of 3 blocks of 4 entries: 48 tokens in total.
  Scheduler s(config_of(64, 4), small_layout(), plan_of(64, 3, 4, 4));
  s.add_request(spec(1, 16, 20));  // ends at 36 tokens: 9 entries, 3 blocks
  s.add_request(spec(2, 16, 8));   // 24 tokens: 6 entries, 2 blocks
  SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.scheduled.size(), 2u);  // 1 and 2 hold one ratio-4 block each
  bool preempted = false;
  std::vector<FinishedRequest> all;
  for (int step = 0; step < 100 && s.has_unfinished(); ++step) {
    auto done = s.update(out, samples_for(out, 42));
    all.insert(all.end(), done.begin(), done.end());
    out = s.schedule();
    for (int64_t id : out.preempted_ids) {
      EXPECT_EQ(id, 2);
      EXPECT_EQ(s.find(2)->status, RequestStatus::kPreempted);
      EXPECT_EQ(s.find(2)->num_computed_tokens, 0);
      EXPECT_GT(s.find(2)->num_output_tokens(), 0);  // outputs are kept
      EXPECT_FALSE(s.cache().has_request(2));
      EXPECT_EQ(chunk_of(out, 2), nullptr);
      preempted = true;
    }
    if (const ScheduledChunk* c = chunk_of(out, 2); c && c->start_position == 0 && preempted) {
      EXPECT_EQ(c->n_tokens, s.find(2)->num_tokens());  // recompute prompt + outputs
      EXPECT_TRUE(c->samples);
    }
  }
  EXPECT_TRUE(preempted);
  EXPECT_EQ(s.num_preemptions_total(), 1);
  ASSERT_EQ(all.size(), 2u);
  for (const FinishedRequest& f : all) {
    EXPECT_EQ(f.reason, FinishReason::kLength);
    EXPECT_EQ(int64_t(f.output_token_ids.size()), f.id == 1 ? 20 : 8);
    EXPECT_EQ(f.num_preemptions, f.id == 2 ? 1 : 0);
  }
  EXPECT_TRUE(s.cache().all_free());
}

TEST(Scheduler, PriorityOrdersAdmissionAndPicksTheVictim) {
  Scheduler s(config_of(64, 2, /*priority=*/true), small_layout(), plan_of(64, 3, 4, 4));
  s.add_request(spec(1, 4, 30, /*priority=*/5));
  s.add_request(spec(2, 4, 30, /*priority=*/1));
  s.add_request(spec(3, 4, 30, /*priority=*/3));
  SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.scheduled.size(), 2u);
  EXPECT_NE(chunk_of(out, 2), nullptr);
  EXPECT_NE(chunk_of(out, 3), nullptr);
  EXPECT_EQ(chunk_of(out, 1), nullptr);
  // 2 and 3 grow until the ratio-4 pool (3 blocks = 48 tokens) runs out: 3 is the victim.
  for (int step = 0; step < 40; ++step) {
    s.update(out, samples_for(out, 1));
    out = s.schedule();
    if (!out.preempted_ids.empty()) break;
  }
  EXPECT_EQ(out.preempted_ids, std::vector<int64_t>{3});
  EXPECT_NE(chunk_of(out, 2), nullptr);
}

// A higher-priority prefill that runs out of blocks preempts a lower-priority request that
// the decode pass already scheduled in the same step: its chunk and in-flight sample are
// withdrawn.
TEST(Scheduler, PreemptingAVictimScheduledEarlierInTheStepWithdrawsItsChunk) {
  Scheduler s(config_of(8, 4, /*priority=*/true), small_layout(), plan_of(64, 3, 4, 4));
  s.add_request(spec(2, 4, 40, /*priority=*/5));
  SchedulerOutput out = s.schedule();
  s.update(out, samples_for(out, 1));
  s.add_request(spec(1, 40, 5, /*priority=*/0));
  bool withdrawn = false;
  for (int step = 0; step < 200 && s.has_unfinished(); ++step) {
    out = s.schedule();
    for (const ScheduledChunk& c : out.scheduled) {
      EXPECT_LE(c.n_tokens, 8);
    }
    if (!out.preempted_ids.empty()) {
      EXPECT_EQ(out.preempted_ids, std::vector<int64_t>{2});
      EXPECT_EQ(chunk_of(out, 2), nullptr);
      EXPECT_EQ(s.find(2)->num_output_placeholders, 0);
      EXPECT_LE(out.n_scheduled_tokens, 8);
      withdrawn = true;
    }
    s.update(out, samples_for(out, 1));
  }
  EXPECT_TRUE(withdrawn);
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_TRUE(s.cache().all_free());
}

// A lone request whose chunk does not fit the window pool shrinks it instead of preempting.
TEST(Scheduler, LoneRequestShrinksItsChunkToTheWindowPool) {
  Scheduler s(config_of(64, 4), small_layout(), plan_of(4, 8, 4, 4));
  s.add_request(spec(1, 40, 3));
  std::vector<int64_t> chunks;
  std::vector<FinishedRequest> done;
  while (s.has_unfinished()) {
    SchedulerOutput out = s.schedule();
    ASSERT_EQ(out.scheduled.size(), 1u);
    EXPECT_TRUE(out.preempted_ids.empty());
    chunks.push_back(out.scheduled[0].n_tokens);
    done = s.update(out, samples_for(out, 1));
  }
  // Window 8, 4 blocks of 4: 16 positions from empty, then 8 new positions per step.
  EXPECT_EQ(chunks, (std::vector<int64_t>{16, 8, 8, 8, 1, 1}));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].num_preemptions, 0);
}

TEST(Scheduler, FcfsIgnoresPriority) {
  Scheduler s(config_of(64, 1), small_layout(), plan_of(64, 8, 4, 4));
  s.add_request(spec(1, 4, 3, 9));
  s.add_request(spec(2, 4, 3, 0));
  SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].request_id, 1);
}

// Overlap: step t+1 is scheduled before step t's samples arrive.
TEST(Scheduler, OverlapSchedulesTheInFlightPositionAndDropsSamplesAfterAStop) {
  Scheduler s(config_of(64, 4), small_layout(), plan_of(64, 8, 4, 4));
  RequestSpec r = spec(1, 5, 10);
  r.stop_token_ids = {0};
  s.add_request(r);
  SchedulerOutput t0 = s.schedule();
  ASSERT_TRUE(t0.scheduled[0].samples);
  EXPECT_EQ(s.find(1)->num_output_placeholders, 1);
  SchedulerOutput t1 = s.schedule();  // decode of the token step 0 is sampling
  ASSERT_EQ(t1.scheduled.size(), 1u);
  EXPECT_EQ(t1.scheduled[0].start_position, 5);
  EXPECT_EQ(t1.scheduled[0].n_tokens, 1);
  EXPECT_EQ(s.find(1)->num_output_placeholders, 2);
  EXPECT_TRUE(s.update(t0, samples_for(t0, 7)).empty());
  SchedulerOutput t2 = s.schedule();
  EXPECT_EQ(t2.scheduled[0].start_position, 6);
  // Step 1 sampled the stop token: step 2's sample is dropped.
  std::vector<FinishedRequest> done = s.update(t1, samples_for(t1, 0));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].output_token_ids, (std::vector<int32_t>{7, 0}));
  EXPECT_TRUE(s.update(t2, samples_for(t2, 5)).empty());
  EXPECT_TRUE(s.cache().all_free());
}

TEST(Scheduler, UpdatingAStepTwiceIsRejected) {
  Scheduler s(config_of(64, 4), small_layout(), plan_of(64, 8, 4, 4));
  s.add_request(spec(1, 5, 10));
  SchedulerOutput out = s.schedule();
  s.update(out, samples_for(out, 3));
  EXPECT_THROW(s.update(out, samples_for(out, 3)), Error);
  EXPECT_THROW(s.update(out, {}), Error);  // one sample list per chunk
  EXPECT_EQ(s.find(1)->num_tokens(), 6);
}

TEST(Scheduler, OverlapNeverSchedulesPastMaxTokens) {
  Scheduler s(config_of(64, 4), small_layout(), plan_of(64, 8, 4, 4));
  s.add_request(spec(1, 5, 1));
  SchedulerOutput t0 = s.schedule();
  SchedulerOutput t1 = s.schedule();
  EXPECT_TRUE(t1.scheduled.empty());  // the one output is in flight
  auto done = s.update(t0, samples_for(t0, 3));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].reason, FinishReason::kLength);
}

}  // namespace
}  // namespace deepinfer
