// The runner's step API (runtime/model_runner.h: launch / collect, backend sampling, sample
// references) on the CPU, and the engine's overlap path that launches step t+1 before step
// t's tokens reach the host: tokens equal the single-sequence loop (host sampling of the
// forward's logits) and the engine with every row sampled on the host.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/error.h"
#include "engine/sampler.h"
#include "engine_test_util.h"

namespace deepinfer::testing {
namespace {

std::unique_ptr<CpuRunner> sampling_runner() {
  auto r = std::make_unique<CpuRunner>(small_model());
  r->set_sampler(sample_row_request);
  return r;
}

RowRequest sample_row(float temperature, uint64_t seed, int64_t position) {
  RowRequest r;
  r.mode = RowMode::kSample;
  r.temperature = temperature;
  r.top_p = 0.9f;
  r.seed = seed;
  r.position = position;
  return r;
}

// Step 1 samples on the runner; step 2, launched before step 1 is collected, feeds those
// samples back by reference. A second runner does the same with forward() and the host
// sampler: tokens and logits are equal (the model is batch invariant: bitwise).
TEST(RunnerSteps, LaunchCollectWithSampleReferencesEqualsForwardAndHostSampling) {
  const int64_t V = small_config().vocab_size;
  const auto p1 = random_tokens(11, V, 21), p2 = random_tokens(5, V, 22), p3 = random_tokens(3, V, 23);
  auto runner = sampling_runner();
  const int64_t a = runner->new_sequence(), b = runner->new_sequence(), c = runner->new_sequence();
  const std::vector<RunnerChunk> step1 = {{a, p1, false}, {b, p2, false}, {c, p3, false}};
  RowRequest none;  // c: neither logits nor token
  const std::vector<RowRequest> rows1 = {sample_row(0.0f, 1, 0), sample_row(0.8f, 9, 0), none};
  runner->launch(step1, rows1);
  const std::vector<int32_t> in_a = {sample_ref(0)}, in_b = {sample_ref(1)};
  const std::vector<RunnerChunk> step2 = {{a, in_a, false}, {b, in_b, false}};
  RowRequest host;
  host.mode = RowMode::kHost;
  runner->launch(step2, std::vector<RowRequest>{host, sample_row(0.8f, 9, 1)});
  EXPECT_EQ(runner->n_tokens(a), 12);
  const StepResult r1 = runner->collect();
  const StepResult r2 = runner->collect();
  EXPECT_GT(runner->busy_seconds(), 0.0);

  CpuRunner ref(small_model());
  const int64_t ra = ref.new_sequence(), rb = ref.new_sequence(), rc = ref.new_sequence();
  const Tensor l1 = ref.forward(std::vector<RunnerChunk>{{ra, p1, false}, {rb, p2, false}, {rc, p3, false}});
  const int32_t ta = sample_row_request({l1.f32(), size_t(V)}, rows1[0]);
  const int32_t tb = sample_row_request({l1.f32() + V, size_t(V)}, rows1[1]);
  ASSERT_EQ(r1.tokens, (std::vector<int32_t>{ta, tb, -1}));
  EXPECT_EQ(r1.logits_row, (std::vector<int64_t>{-1, -1, -1}));
  const std::vector<int32_t> ia = {ta}, ib = {tb};
  const Tensor l2 = ref.forward(std::vector<RunnerChunk>{{ra, ia, false}, {rb, ib, false}});
  ASSERT_EQ(r2.logits_row.size(), 2u);
  ASSERT_GE(r2.logits_row[0], 0);
  EXPECT_EQ(r2.logits_row[1], -1);
  EXPECT_TRUE(std::equal(l2.f32(), l2.f32() + V, r2.logits.f32() + r2.logits_row[0] * V));
  EXPECT_EQ(r2.tokens[0], -1);
  EXPECT_EQ(r2.tokens[1], sample_row_request({l2.f32() + V, size_t(V)}, sample_row(0.8f, 9, 1)));
}

TEST(RunnerSteps, RefusesBadRequests) {
  const int64_t V = small_config().vocab_size;
  const auto p = random_tokens(4, V, 31);
  auto runner = sampling_runner();
  const int64_t a = runner->new_sequence();
  RowRequest host;
  host.mode = RowMode::kHost;
  // A reference to a row that was not sampled (kHost), and a row count that does not match.
  runner->launch(std::vector<RunnerChunk>{{a, p, false}}, std::vector<RowRequest>{host});
  const std::vector<int32_t> ref0 = {sample_ref(0)};
  EXPECT_THROW(runner->launch(std::vector<RunnerChunk>{{a, ref0, false}}, std::vector<RowRequest>{host}), Error);
  EXPECT_THROW(runner->launch(std::vector<RunnerChunk>{{a, p, false}}, std::vector<RowRequest>{}), Error);
  EXPECT_EQ(runner->n_tokens(a), 4);  // refused before any work
  runner->collect();
  // kSample rows need the host sampler.
  CpuRunner bare(small_model());
  const int64_t s = bare.new_sequence();
  EXPECT_THROW(bare.launch(std::vector<RunnerChunk>{{s, p, false}}, std::vector<RowRequest>{sample_row(0.0f, 0, 0)}),
               Error);
}

class EngineSteps : public ::testing::TestWithParam<float> {};

// Jobs mix rows sampled on the runner (plain sampling) with host rows (penalties, ignore_eos,
// logprobs): with overlap on, steps are chained through sample references, and every
// request's tokens equal the single-sequence loop's, with and without overlap.
TEST_P(EngineSteps, ChainedStepsEqualSoloAndHostSampling) {
  auto jobs = random_jobs(30, 30, 14, 13, GetParam());
  std::vector<EngineRequest> requests;
  for (size_t i = 0; i < jobs.size(); ++i) {
    EngineRequest r = to_request(jobs[i]);
    if (i % 7 == 3) r.n_logprobs = 2;
    requests.push_back(std::move(r));
  }
  auto solo_model = small_model();
  const auto solo = solo_results(*solo_model, jobs);
  for (const bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "sequential");
    auto counting = std::make_unique<CountingRunner>(std::unique_ptr<ModelRunner>(sampling_runner()));
    auto n_chained = counting->n_chained_, n_device = counting->n_device_rows_;
    Engine engine(tiny_pool_args(overlap), std::move(counting), nullptr);
    for (const EngineRequest& r : requests) engine.add_request(r);
    const auto out = drain(engine);
    for (const Job& j : jobs) {
      SCOPED_TRACE(j.id);
      ASSERT_TRUE(out.count(j.id));
      EXPECT_EQ(all_tokens(out.at(j.id)), solo.at(j.id).tokens);
    }
    EXPECT_GT(*n_device, 50);
    EXPECT_GT(engine.stats().n_preemptions, 0);
    EXPECT_TRUE(engine.state_cache().all_free());
    // Chained launches: step t+1 launched before step t was collected (its inputs are
    // references to step t's samples; the runner refuses a third uncollected launch).
    if (overlap) {
      EXPECT_GT(*n_chained, 5);
    } else {
      EXPECT_EQ(*n_chained, 0);
    }
  }
  // The on_logits hook puts every row on the host path: the same tokens, nothing chained.
  EngineArgs args = tiny_pool_args(true);
  args.on_logits = [](const std::string&, int64_t, std::span<const float>) {};
  auto counting = std::make_unique<CountingRunner>(std::unique_ptr<ModelRunner>(sampling_runner()));
  auto n_chained = counting->n_chained_, n_device = counting->n_device_rows_;
  Engine engine(args, std::move(counting), nullptr);
  for (const EngineRequest& r : requests) engine.add_request(r);
  const auto out = drain(engine);
  for (const Job& j : jobs) EXPECT_EQ(all_tokens(out.at(j.id)), solo.at(j.id).tokens) << j.id;
  EXPECT_EQ(*n_chained, 0);
  EXPECT_EQ(*n_device, 0);
}

INSTANTIATE_TEST_SUITE_P(Temperature, EngineSteps, ::testing::Values(0.0f, 0.8f),
                         [](const ::testing::TestParamInfo<float>& i) {
                           return i.param == 0.0f ? std::string("greedy") : std::string("seeded");
                         });

}  // namespace
}  // namespace deepinfer::testing
