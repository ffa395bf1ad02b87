// A failure inside one request's sampling or grammar matching ends that request only
// (finish_reason "error", RequestOutput::error without source paths); every other request of
// the batch produces exactly what it produces alone (the single-sequence loop), overlap on and
// off. Failures are injected three ways: the backend returns a token the request's matcher
// refuses (a runner wrapper), the on_logits hook throws for one request's row, and a grammar
// whose matcher gets stuck (a complete output but no stop token: the model has no EOS ids).
#include <gtest/gtest.h>

#include "constrained_test_util.h"

namespace deepinfer::testing {
namespace {

// Returns, for every row the engine masked with a grammar bitmask, a token that mask refuses.
class RefusedTokenRunner final : public ForwardingRunner {
 public:
  using ForwardingRunner::ForwardingRunner;
  std::string name() const override { return "refused-token " + inner_->name(); }
  void launch(std::span<const RunnerChunk> chunks, std::span<const RowRequest> rows,
              const std::function<void()>& before_sampling = {}) override {
    masks_.clear();
    for (const RowRequest& r : rows) masks_.push_back(r.mode == RowMode::kSample ? r.bitmask : nullptr);
    inner_->launch(chunks, rows, before_sampling);
  }
  StepResult collect() override {
    StepResult r = inner_->collect();
    for (size_t i = 0; i < masks_.size(); ++i) {
      if (masks_[i] == nullptr) continue;
      for (int32_t t = 0; t < config().vocab_size; ++t) {
        if (!((masks_[i][t / 32] >> (t % 32)) & 1u)) {
          r.tokens[i] = t;
          ++*n_refused_;
          break;
        }
      }
    }
    return r;
  }

  std::shared_ptr<int64_t> n_refused_ = std::make_shared<int64_t>(0);

 private:
  std::vector<const uint32_t*> masks_;
};

std::vector<Job> innocent_jobs() { return random_jobs(9, 12, 14, 31, 0.8f); }

// The failed request ended with "error" and a message; the innocents match their solo runs.
void check_isolated(const std::map<std::string, std::vector<RequestOutput>>& outs, const std::vector<Job>& jobs,
                    const Model& model, const std::string& failed_id, const std::string& want_in_error) {
  const auto solo = solo_results(model, jobs);
  for (const Job& j : jobs) {
    ASSERT_TRUE(outs.count(j.id)) << j.id;
    const auto& o = outs.at(j.id);
    ASSERT_TRUE(o.back().finished) << j.id;
    EXPECT_EQ(o.back().finish_reason, solo.at(j.id).finish_reason) << j.id;
    EXPECT_TRUE(o.back().error.empty()) << j.id;
    EXPECT_EQ(all_tokens(o), solo.at(j.id).tokens) << j.id;
  }
  ASSERT_TRUE(outs.count(failed_id));
  const RequestOutput& last = outs.at(failed_id).back();
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(last.finish_reason, "error");
  EXPECT_NE(last.error.find(want_in_error), std::string::npos) << last.error;
  EXPECT_EQ(last.error.find(".cc"), std::string::npos) << last.error;
  EXPECT_EQ(last.error.find(".h:"), std::string::npos) << last.error;
}

EngineRequest constrained(const std::string& id, const char* regex, int64_t max_tokens) {
  EngineRequest r;
  r.id = id;
  r.prompt = random_tokens(5, small_config().vocab_size, 77);
  r.params.max_tokens = max_tokens;
  r.params.temperature = 0.0f;
  r.constraint_kind = "regex";
  r.constraint = regex;
  return r;
}

TEST(EngineIsolation, BackendTokenRefusedByTheMatcherFailsThatRequestOnly) {
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap" : "no overlap");
    auto cpu = std::make_unique<CpuRunner>(small_model());
    cpu->set_sampler(sample_row_request);
    auto runner = std::make_unique<RefusedTokenRunner>(std::move(cpu));
    auto n_refused = runner->n_refused_;
    EngineArgs args = tiny_pool_args(overlap);
    Engine engine(args, std::move(runner), constrained_test_tokenizer());
    const auto jobs = innocent_jobs();
    for (const Job& j : jobs) engine.add_request(to_request(j));
    engine.add_request(constrained("bad", kMaskPattern, 20));
    const auto outs = drain(engine);
    // Once, or twice with overlap (the next step was launched before the failure was handled).
    EXPECT_GE(*n_refused, 1);
    EXPECT_LE(*n_refused, overlap ? 2 : 1);
    check_isolated(outs, jobs, *small_model(), "bad", "not allowed by the constraint");
    EXPECT_TRUE(engine.state_cache().all_free());
  }
}

TEST(EngineIsolation, ExceptionInOneRowFailsThatRequestOnly) {
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap" : "no overlap");
    EngineArgs args = tiny_pool_args(overlap);
    args.on_logits = [](const std::string& id, int64_t index, std::span<const float>) {
      if (id == "bad" && index == 3) throw std::runtime_error("injected failure of row bad");
    };
    auto engine = small_engine(args);
    const auto jobs = innocent_jobs();
    for (const Job& j : jobs) engine->add_request(to_request(j));
    EngineRequest bad = to_request(jobs[0]);
    bad.id = "bad";
    bad.params.max_tokens = 12;
    bad.params.ignore_eos = true;
    engine->add_request(bad);
    const auto outs = drain(*engine);
    check_isolated(outs, jobs, cpu_model(*engine), "bad", "injected failure of row bad");
    EXPECT_EQ(all_tokens(outs.at("bad")).size(), 3u);  // its first three tokens were delivered
    EXPECT_TRUE(engine->state_cache().all_free());
  }
}

// Without EOS ids the grammar's complete output "ab" cannot be ended: after it the matcher allows
// no token and no end. The request fails with a clear message instead of sampling from nothing,
// on the runner-sampled path and on the host path (a repetition penalty).
TEST(EngineIsolation, StuckMatcherFailsThatRequestOnly) {
  ModelConfig cfg = small_config();
  cfg.eos_token_ids.clear();
  for (bool host_row : {false, true}) {
    for (bool overlap : {false, true}) {
      SCOPED_TRACE(std::string(overlap ? "overlap" : "no overlap") + (host_row ? ", host row" : ""));
      auto source = random_weights(cfg, kEngineTestSeed);
      auto model = Model::from_source(cfg, *source, {Numerics::kOfficial, true});
      Engine engine(tiny_pool_args(overlap), std::move(model), constrained_test_tokenizer());
      std::vector<Job> jobs = innocent_jobs();
      for (Job& j : jobs) j.params.ignore_eos = false;
      for (const Job& j : jobs) engine.add_request(to_request(j));
      EngineRequest bad = constrained("bad", "ab", 10);
      if (host_row) bad.params.repetition_penalty = 1.1f;
      engine.add_request(bad);
      const auto outs = drain(engine);
      check_isolated(outs, jobs, cpu_model(engine), "bad", "cannot be continued");
      std::string text;
      for (const RequestOutput& o : outs.at("bad")) text += o.new_text;
      EXPECT_EQ(text, "ab");
      EXPECT_TRUE(engine.state_cache().all_free());
    }
  }
}

}  // namespace
}  // namespace deepinfer::testing
