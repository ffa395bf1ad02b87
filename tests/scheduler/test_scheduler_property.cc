// Scheduler property tests: a simulated model drives schedule()/update() with random prompts,
// max_tokens, stop tokens, aborts and priorities over tiny pools that force preemption, with
// and without overlap (step t+1 scheduled before step t's update). The simulated model keeps
// its own per-request state and samples token = hash(all previous tokens), so a request's
// outputs are fixed by its prompt alone: any lost, repeated or skipped position, or a wrong
// recomputation after preemption, changes them. Deterministic seeds.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "scheduler/scheduler.h"

namespace deepinfer {
namespace {

constexpr int32_t kVocab = 40;
constexpr int32_t kStopToken = 0;

int32_t next_token(const std::vector<int32_t>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) h = (h ^ uint64_t(t)) * 1099511628211ull;
  h ^= h >> 29;
  return int32_t(h % kVocab);
}

struct Expected {
  std::vector<int32_t> outputs;
  FinishReason reason = FinishReason::kLength;
};

// What the request produces alone.
Expected solo_run(const RequestSpec& spec) {
  Expected e;
  std::vector<int32_t> tokens = spec.prompt_token_ids;
  while (true) {
    const int32_t t = next_token(tokens);
    tokens.push_back(t);
    e.outputs.push_back(t);
    const bool stop_allowed = int64_t(e.outputs.size()) > spec.min_tokens;
    if (stop_allowed && t == kStopToken && !spec.stop_token_ids.empty()) {
      e.reason = FinishReason::kStop;
      return e;
    }
    if (int64_t(e.outputs.size()) >= spec.max_tokens) return e;
  }
}

struct Params {
  uint64_t seed = 1;
  bool overlap = false;
  bool priority = false;
  int64_t n_requests = 60;
  int64_t max_prompt = 100;
  int64_t max_output = 50;
  int64_t budget = 24;
  int64_t max_num_seqs = 5;
  std::vector<int64_t> n_blocks;  // window, compressed/4, compressed/128, indexer/4
  int64_t n_slots = 6;
  double abort_rate = 0.02;
  bool speculate = false;  // propose 0..4 drafts, each right with probability 0.7
  int64_t prefill_with_decodes = 0;  // SchedulerConfig prefill limits (0: off)
  int64_t long_threshold = 0;
};

struct Stats {
  int64_t n_steps = 0;
  int64_t n_preemptions = 0;
  int64_t n_finished = 0;
  int64_t n_aborted = 0;
  int64_t n_stopped = 0;
  int64_t n_completed_after_preemption = 0;  // finished by update() after >= 1 preemption
  int64_t n_drafts = 0;                       // draft tokens the scheduler kept
};

class SimulatedModel {
 public:
  explicit SimulatedModel(const Scheduler& s) : s_(s) {}

  // Runs one step on the "device": checks each chunk continues the request's state.
  std::vector<std::vector<int32_t>> execute(const SchedulerOutput& out) {
    for (int64_t id : out.finished_ids) state_.erase(id);
    for (int64_t id : out.preempted_ids) state_[id].computed = 0;
    std::vector<std::vector<int32_t>> sampled;
    for (const ScheduledChunk& c : out.scheduled) {
      const Request* r = s_.find(c.request_id);
      EXPECT_NE(r, nullptr) << "scheduled unknown request " << c.request_id;
      if (r == nullptr) return {};
      State& st = state_[c.request_id];
      if (st.tokens.empty()) st.tokens = r->token_ids;
      // The device's tokens extend the scheduler's by the samples in flight.
      EXPECT_GE(st.tokens.size(), r->token_ids.size());
      EXPECT_TRUE(std::equal(r->token_ids.begin(), r->token_ids.end(), st.tokens.begin()))
          << "request " << c.request_id << ": scheduler and device tokens differ";
      EXPECT_EQ(c.start_position, st.computed)
          << "request " << c.request_id << " chunk does not continue its state";
      EXPECT_GE(c.n_tokens, 1);
      st.computed = c.start_position + c.n_tokens;
      EXPECT_LE(st.computed, int64_t(st.tokens.size()) + int64_t(c.draft_token_ids.size()))
          << "request " << c.request_id << " computes unknown positions";
      const int64_t n_draft = int64_t(c.draft_token_ids.size());
      if (c.samples && n_draft > 0) {
        // Greedy verification: sample at the last known position and every draft position.
        EXPECT_EQ(st.computed, int64_t(st.tokens.size()) + n_draft);
        std::vector<int32_t> out_tokens;
        for (int64_t i = 0; i <= n_draft; ++i) {
          const int32_t t = next_token(st.tokens);
          st.tokens.push_back(t);
          out_tokens.push_back(t);
          if (i == n_draft || c.draft_token_ids[size_t(i)] != t) break;
        }
        st.computed = int64_t(st.tokens.size()) - 1;
        sampled.push_back(out_tokens);
      } else if (c.samples) {
        EXPECT_EQ(st.computed, int64_t(st.tokens.size()));
        const int32_t t = next_token(st.tokens);
        st.tokens.push_back(t);
        sampled.push_back({t});
      } else {
        EXPECT_LT(st.computed, int64_t(st.tokens.size()));
        sampled.push_back({});
      }
    }
    return sampled;
  }

 private:
  struct State {
    std::vector<int32_t> tokens;
    int64_t computed = 0;
  };
  const Scheduler& s_;
  std::map<int64_t, State> state_;
};

// Block tables cover what each chunk reads and writes; no block is shared; counts add up.
void check_cache(const Scheduler& s, const SchedulerOutput& out, const std::set<int64_t>& live) {
  const StateCache& cache = s.cache();
  const CacheLayout& layout = cache.layout();
  for (const ScheduledChunk& c : out.scheduled) {
    const std::vector<int32_t>& window = cache.block_table(c.request_id, 0);
    const int64_t end = c.start_position + c.n_tokens;
    for (int64_t p = std::max<int64_t>(0, c.start_position - layout.window + 1); p < end; ++p) {
      ASSERT_LT(p / layout.block_size, int64_t(window.size()));
      ASSERT_NE(window[size_t(p / layout.block_size)], kNoBlock);
    }
    for (int64_t g = 1; g < cache.n_groups(); ++g) {
      const int64_t entries = cache.groups()[size_t(g)].n_entries(end);
      ASSERT_GE(int64_t(cache.block_table(c.request_id, g).size()) * layout.block_size, entries);
    }
  }
  std::set<int32_t> slots;
  for (int64_t g = 0; g < cache.n_groups(); ++g) {
    std::set<int32_t> seen;
    int64_t held = 0;
    for (int64_t id : live) {
      if (!cache.has_request(id)) continue;
      for (int32_t b : cache.block_table(id, g)) {
        if (b == kNoBlock) continue;
        ++held;
        ASSERT_TRUE(seen.insert(b).second) << "block " << b << " held twice";
      }
      if (g == 0) {
        ASSERT_TRUE(slots.insert(cache.state_slot(id)).second);
        const Request* r = s.find(id);
        ASSERT_NE(r, nullptr);
        ASSERT_EQ(r->status, RequestStatus::kRunning);
      }
    }
    ASSERT_EQ(held + cache.num_free(g), cache.num_blocks(g));
  }
  ASSERT_EQ(int64_t(slots.size()), cache.num_requests());
  ASSERT_EQ(cache.num_requests(), s.num_running());
}

Stats run(const Params& p) {
  CacheLayout layout;
  layout.window = 16;
  layout.block_size = 4;
  layout.window_entry_bytes = 8;
  layout.compressed_entry_bytes = 8;
  layout.indexer_entry_bytes = 2;
  layout.layers = {{0, false, 0}, {4, true, 10}, {128, false, 10}, {4, true, 10}};
  PoolPlan plan;
  plan.n_blocks = p.n_blocks;
  plan.n_state_slots = p.n_slots;
  SchedulerConfig config;
  config.max_num_batched_tokens = p.budget;
  config.max_num_seqs = p.max_num_seqs;
  config.priority = p.priority;
  config.max_prefill_tokens_with_decodes = p.prefill_with_decodes;
  config.long_prefill_token_threshold = p.long_threshold;
  Scheduler s(config, layout, plan);
  SimulatedModel model(s);
  std::mt19937_64 rng(p.seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return lo + int64_t(rng() % uint64_t(hi - lo + 1));
  };

  std::map<int64_t, Expected> expected;
  std::map<int64_t, RequestSpec> specs;
  std::set<int64_t> live, done;
  Stats stats;
  int64_t next_id = 0;
  std::optional<std::pair<SchedulerOutput, std::vector<std::vector<int32_t>>>> in_flight;

  auto deliver = [&](const SchedulerOutput& out, const std::vector<std::vector<int32_t>>& smp) {
    for (const FinishedRequest& f : s.update(out, smp)) {
      EXPECT_TRUE(live.count(f.id)) << "request " << f.id << " finished twice or unknown";
      EXPECT_TRUE(done.insert(f.id).second);
      live.erase(f.id);
      const Expected& e = expected.at(f.id);
      EXPECT_EQ(f.output_token_ids, e.outputs) << "request " << f.id;
      EXPECT_EQ(f.reason, e.reason) << "request " << f.id;
      ++stats.n_finished;
      stats.n_stopped += f.reason == FinishReason::kStop;
      stats.n_preemptions += f.num_preemptions;
      stats.n_completed_after_preemption += f.num_preemptions > 0;
    }
  };

  const int64_t kMaxSteps = 20000;
  const int64_t kMaxWait = 200;
  std::map<int64_t, int64_t> last_scheduled;
  while ((next_id < p.n_requests || s.has_unfinished() || in_flight) &&
         stats.n_steps < kMaxSteps) {
    // Arrivals: a burst at the start, then a few per step.
    const int64_t arrivals = next_id == 0 ? p.n_requests / 3 : uniform(0, 1);
    for (int64_t i = 0; i < arrivals && next_id < p.n_requests; ++i) {
      RequestSpec r;
      r.id = next_id++;
      r.prompt_token_ids.resize(size_t(uniform(1, p.max_prompt)));
      for (int32_t& t : r.prompt_token_ids) t = int32_t(uniform(1, kVocab - 1));
      r.max_tokens = uniform(1, p.max_output);
      r.min_tokens = uniform(0, 1) ? uniform(0, r.max_tokens) : 0;
      if (uniform(0, 1)) r.stop_token_ids = {kStopToken};
      r.priority = uniform(0, 3);
      expected[r.id] = solo_run(r);
      specs[r.id] = r;
      live.insert(r.id);
      s.add_request(r);
    }
    // Random aborts of live requests, in any state.
    if (!live.empty() && double(rng() % 10000) / 10000.0 < p.abort_rate) {
      auto it = live.begin();
      std::advance(it, uniform(0, int64_t(live.size()) - 1));
      const int64_t id = *it;
      std::optional<FinishedRequest> f = s.abort(id);
      EXPECT_TRUE(f.has_value());
      EXPECT_EQ(f->reason, FinishReason::kAbort);
      live.erase(id);
      done.insert(id);
      ++stats.n_aborted;
      stats.n_preemptions += f->num_preemptions;
    }

    std::set<int64_t> decoding;  // running requests with one known token left
    for (int64_t id : live) {
      const Request* r = s.find(id);
      if (r != nullptr && r->status == RequestStatus::kRunning &&
          r->num_tokens_with_placeholders() - r->num_computed_tokens == 1) {
        decoding.insert(id);
      }
    }
    SchedulerOutput out = s.schedule();
    ++stats.n_steps;
    // Prefill limits: decodes first; with decodes in the step, prefill chunks within their
    // budget; no prefill chunk above the threshold unless it is alone in its step.
    {
      int64_t prefill = 0, n_decodes = 0;
      bool decodes_done = false;
      for (const ScheduledChunk& c : out.scheduled) {
        const bool decode = decoding.count(c.request_id) != 0;
        EXPECT_FALSE(decode && decodes_done) << "a decode after a prefill chunk";
        decodes_done = decodes_done || !decode;
        n_decodes += decode;
        if (decode) continue;
        prefill += c.n_tokens;
        if (p.long_threshold > 0 && out.scheduled.size() > 1) EXPECT_LE(c.n_tokens, p.long_threshold);
      }
      if (p.prefill_with_decodes > 0 && n_decodes > 0) EXPECT_LE(prefill, p.prefill_with_decodes);
    }
    EXPECT_LE(out.n_scheduled_tokens, p.budget);
    EXPECT_LE(int64_t(out.scheduled.size()), p.max_num_seqs);
    EXPECT_LE(s.num_running(), p.max_num_seqs);
    int64_t sum = 0;
    std::set<int64_t> ids;
    for (const ScheduledChunk& c : out.scheduled) {
      sum += c.n_tokens;
      EXPECT_TRUE(ids.insert(c.request_id).second) << "request scheduled twice in one step";
      EXPECT_TRUE(live.count(c.request_id));
    }
    EXPECT_EQ(sum, out.n_scheduled_tokens);
    for (int64_t id : out.preempted_ids) {
      EXPECT_FALSE(ids.count(id)) << "preempted request " << id << " kept a chunk";
      const Request* r = s.find(id);
      EXPECT_TRUE(r != nullptr && r->status == RequestStatus::kPreempted &&
                  r->num_computed_tokens == 0);
      // Without overlap nothing is in flight at schedule(): a withdrawn sample is undone.
      if (r != nullptr && !p.overlap) {
        EXPECT_EQ(r->num_output_placeholders, 0);
      }
    }
    check_cache(s, out, live);
    // Liveness: a running request gets a chunk within kMaxWait steps (aborts must not be
    // what ends a stuck request).
    for (const ScheduledChunk& c : out.scheduled) last_scheduled[c.request_id] = stats.n_steps;
    for (int64_t id : live) {
      const Request* r = s.find(id);
      if (r == nullptr || r->status != RequestStatus::kRunning) {
        last_scheduled[id] = stats.n_steps;
      } else {
        EXPECT_LT(stats.n_steps - last_scheduled[id], kMaxWait) << "request " << id << " stuck";
      }
    }
    if (::testing::Test::HasFailure()) break;
    std::vector<std::vector<int32_t>> sampled = model.execute(out);
    if (p.overlap) {
      if (in_flight) deliver(in_flight->first, in_flight->second);
      in_flight.emplace(std::move(out), std::move(sampled));
      if (!s.has_unfinished()) {
        deliver(in_flight->first, in_flight->second);
        in_flight.reset();
      }
    } else {
      deliver(out, sampled);
      if (p.speculate) {
        for (const ScheduledChunk& c : out.scheduled) {
          const Request* r = s.find(c.request_id);
          if (!c.samples || r == nullptr) continue;
          std::vector<int32_t> tokens = r->token_ids, drafts;
          for (int64_t k = uniform(0, 4); k > 0; --k) {
            const int32_t right = next_token(tokens);
            drafts.push_back(uniform(0, 9) < 7 ? right : int32_t(uniform(0, kVocab - 1)));
            tokens.push_back(drafts.back());
          }
          stats.n_drafts += s.set_draft_tokens(c.request_id, drafts);
        }
      }
    }
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_LT(stats.n_steps, kMaxSteps) << "no progress";
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_TRUE(live.empty()) << live.size() << " requests lost";
  EXPECT_EQ(int64_t(done.size()), p.n_requests);
  EXPECT_TRUE(s.cache().all_free());
  return stats;
}

Params tiny_pools(uint64_t seed) {
  Params p;
  p.seed = seed;
  // 2 layers of ratio 4 with 14 blocks of 4 entries: 224 tokens in flight at most; a request
  // is at most 100 + 50 = 150 tokens. Window blocks: a 16-wide window spans 5 blocks of 4.
  p.n_blocks = {24, 14, 2, 14};
  return p;
}

TEST(SchedulerProperty, TinyPoolsForcePreemptionAndEveryRequestCompletes) {
  int64_t preemptions = 0, stopped = 0, aborted = 0, recovered = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Stats st = run(tiny_pools(seed));
    preemptions += st.n_preemptions;
    recovered += st.n_completed_after_preemption;
    stopped += st.n_stopped;
    aborted += st.n_aborted;
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(recovered, 0);
  EXPECT_GT(stopped, 0);
  EXPECT_GT(aborted, 0);
  std::printf("12 seeds: %lld preemptions, %lld requests completed after preemption, "
              "%lld stopped, %lld aborted\n",
              (long long)preemptions, (long long)recovered, (long long)stopped, (long long)aborted);
}

TEST(SchedulerProperty, OverlapSchedulingKeepsTheSameOutputs) {
  int64_t preemptions = 0;
  for (uint64_t seed = 101; seed <= 112; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Params p = tiny_pools(seed);
    p.overlap = true;
    preemptions += run(p).n_preemptions;
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(preemptions, 0);
}

TEST(SchedulerProperty, PriorityPolicy) {
  int64_t preemptions = 0;
  for (uint64_t seed = 201; seed <= 210; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Params p = tiny_pools(seed);
    p.priority = true;
    p.overlap = seed % 2 == 0;
    preemptions += run(p).n_preemptions;
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(preemptions, 0);
}

TEST(SchedulerProperty, RoomyPoolsNeverPreempt) {
  for (uint64_t seed = 301; seed <= 304; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Params p = tiny_pools(seed);
    p.n_blocks = {200, 200, 20, 200};
    p.budget = 64;
    p.max_num_seqs = 8;
    p.n_slots = 8;
    EXPECT_EQ(run(p).n_preemptions, 0);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(SchedulerProperty, SpeculativeDraftsKeepTheSameOutputs) {
  int64_t drafts = 0, preemptions = 0;
  for (uint64_t seed = 501; seed <= 510; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Params p = tiny_pools(seed);
    p.speculate = true;
    p.priority = seed % 2 == 0;
    const Stats st = run(p);
    drafts += st.n_drafts;
    preemptions += st.n_preemptions;
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(drafts, 0);
  EXPECT_GT(preemptions, 0);
}

// Prefill limits on, with preemption, overlap, priority and drafts: the same outputs, every
// request completes, and the limits hold in every step (checked in run()).
TEST(SchedulerProperty, PrefillLimitsKeepTheSameOutputs) {
  int64_t preemptions = 0;
  for (uint64_t seed = 601; seed <= 612; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Params p = tiny_pools(seed);
    p.prefill_with_decodes = int64_t(seed % 3) * 4 + 4;  // 4, 8, 12 of a budget of 24
    p.long_threshold = int64_t(seed % 4) * 3 + 1;       // 1, 4, 7, 10
    p.overlap = seed % 2 == 0;
    p.priority = seed % 3 == 0;
    p.speculate = !p.overlap && seed % 4 == 1;
    preemptions += run(p).n_preemptions;
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(preemptions, 0);
}

// Window-pool pressure: few window blocks, so long prefill chunks must shrink or wait.
TEST(SchedulerProperty, TightWindowPool) {
  for (uint64_t seed = 401; seed <= 406; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Params p = tiny_pools(seed);
    p.n_blocks = {7, 40, 4, 40};
    p.budget = 40;
    p.overlap = seed % 2 == 1;
    run(p);
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace
}  // namespace deepinfer
