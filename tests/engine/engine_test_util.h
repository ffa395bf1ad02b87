// Helpers for engine tests: a small random-weight model (tests/model's small_config) and
// the single-sequence reference loop.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../model/model_test_util.h"
#include "cache/state_cache.h"
#include "engine/engine.h"
#include "engine/generate_loop.h"
#include "model/weight_source.h"
#include "runtime/cpu_runner.h"

namespace deepinfer::testing {

constexpr uint64_t kEngineTestSeed = 7;

inline std::unique_ptr<Model> small_model(bool batch_invariant = true,
                                          Numerics numerics = Numerics::kOfficial) {
  auto source = random_weights(small_config(), kEngineTestSeed);
  return Model::from_source(small_config(), *source, {numerics, batch_invariant});
}

// Engine args with tiny pools: a few requests fill them, so preemption happens.
inline EngineArgs tiny_pool_args(bool overlap) {
  EngineArgs a;
  a.overlap = overlap;
  a.max_num_seqs = 24;
  a.max_num_batched_tokens = 64;
  a.max_model_len = 160;
  a.block_size = 8;
  a.state_budget_bytes = 5 << 19;  // 2.5 MiB: compressed pools for 160 tokens in all
  return a;
}

inline std::unique_ptr<Engine> small_engine(const EngineArgs& args, bool batch_invariant = true,
                                            Numerics numerics = Numerics::kOfficial) {
  return std::make_unique<Engine>(args, small_model(batch_invariant, numerics), nullptr);
}

// The CPU Model an engine on the CPU backend runs.
inline const Model& cpu_model(const Engine& engine) {
  return dynamic_cast<const CpuRunner&>(engine.runner()).model();
}

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
};

// n jobs with prompts of 1..max_prompt tokens and 1..max_out outputs.
inline std::vector<Job> random_jobs(int n, int max_prompt, int max_out, uint32_t seed,
                                    float temperature) {
  std::mt19937 gen(seed);
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    Job j;
    j.id = "r" + std::to_string(i);
    const int len = 1 + int(gen() % uint32_t(max_prompt));
    j.prompt = random_tokens(len, small_config().vocab_size, seed * 1000 + uint32_t(i));
    j.params.temperature = temperature;
    j.params.top_p = temperature > 0 ? 0.9f : 1.0f;
    j.params.seed = 100 + uint64_t(i);
    j.params.max_tokens = 1 + int64_t(gen() % uint32_t(max_out));
    j.params.ignore_eos = (i % 3 == 0);
    if (i % 5 == 2) {
      j.params.repetition_penalty = 1.3f;
      j.params.frequency_penalty = 0.2f;
      j.params.presence_penalty = 0.1f;
      j.params.top_k = 20;
    }
    jobs.push_back(std::move(j));
  }
  return jobs;
}

inline EngineRequest to_request(const Job& j) {
  EngineRequest r;
  r.id = j.id;
  r.prompt = j.prompt;
  r.params = j.params;
  return r;
}

// What each job produces alone: the single-sequence loop (whole-prompt prefill, then one
// token per forward), which shares nothing with the engine but the model and the sampler.
inline std::map<std::string, GenerateResult> solo_results(const Model& model,
                                                          const std::vector<Job>& jobs) {
  std::map<std::string, GenerateResult> out;
  for (const Job& j : jobs) out[j.id] = generate_tokens(model, j.prompt, j.params);
  return out;
}

// Drives the engine with step() until it is idle; returns all outputs per id, in order.
inline std::map<std::string, std::vector<RequestOutput>> drain(Engine& engine, int max_steps = 100000) {
  std::map<std::string, std::vector<RequestOutput>> out;
  for (int s = 0; s < max_steps && engine.has_unfinished(); ++s) {
    for (RequestOutput& o : engine.step()) out[o.id].push_back(std::move(o));
  }
  return out;
}

inline std::vector<int32_t> all_tokens(const std::vector<RequestOutput>& outs) {
  std::vector<int32_t> t;
  for (const RequestOutput& o : outs) t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
  return t;
}

// A runner that forwards everything to `inner`; test wrappers override what they watch.
class ForwardingRunner : public ModelRunner {
 public:
  explicit ForwardingRunner(std::unique_ptr<ModelRunner> inner) : inner_(std::move(inner)) {}
  const ModelConfig& config() const override { return inner_->config(); }
  RunnerCapacity capacity() const override { return inner_->capacity(); }
  std::string name() const override { return inner_->name(); }
  int64_t new_sequence() override { return inner_->new_sequence(); }
  void free_sequence(int64_t s) override { inner_->free_sequence(s); }
  int64_t n_tokens(int64_t s) const override { return inner_->n_tokens(s); }
  Tensor forward(std::span<const RunnerChunk> chunks) override { return inner_->forward(chunks); }
  void launch(std::span<const RunnerChunk> chunks, std::span<const RowRequest> rows,
              const std::function<void()>& before_sampling = {}) override {
    inner_->launch(chunks, rows, before_sampling);
  }
  StepResult collect() override { return inner_->collect(); }
  double busy_seconds() const override { return inner_->busy_seconds(); }

 protected:
  std::unique_ptr<ModelRunner> inner_;
};

// A runner wrapper that counts the launches whose inputs refer to the previous launch's
// samples (step t+1 launched before step t's tokens reached the host), the rows sampled on
// the backend and those of them masked by a grammar bitmask in the runner (the counters
// outlive the engine).
class CountingRunner final : public ForwardingRunner {
 public:
  using ForwardingRunner::ForwardingRunner;
  std::string name() const override { return "counting " + inner_->name(); }
  void launch(std::span<const RunnerChunk> chunks, std::span<const RowRequest> rows,
              const std::function<void()>& before_sampling = {}) override {
    for (const RunnerChunk& c : chunks) {
      if (std::any_of(c.tokens.begin(), c.tokens.end(), is_sample_ref)) {
        ++*n_chained_;
        break;
      }
    }
    for (const RowRequest& r : rows) {
      *n_device_rows_ += r.mode == RowMode::kSample;
      *n_masked_rows_ += r.mode == RowMode::kSample && r.bitmask != nullptr;
    }
    inner_->launch(chunks, rows, before_sampling);
  }

  std::shared_ptr<int64_t> n_chained_ = std::make_shared<int64_t>(0);
  std::shared_ptr<int64_t> n_device_rows_ = std::make_shared<int64_t>(0);
  std::shared_ptr<int64_t> n_masked_rows_ = std::make_shared<int64_t>(0);
};

// A greedy request of max_tokens tokens with EOS ignored (runs to its length).
inline EngineRequest greedy(const std::string& id, std::vector<int32_t> prompt, int64_t max_tokens) {
  EngineRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

// Engine arguments of the prefix-cache tests: chunked prefill of 64 tokens, caching on or off
// with blocks of block_tokens.
inline EngineArgs cache_args(bool enable, int64_t block_tokens, bool overlap = true) {
  EngineArgs a;
  a.overlap = overlap;
  a.max_num_batched_tokens = 64;  // chunked prefill
  a.long_prefill_token_threshold = 0;
  a.max_prefill_tokens_with_decodes = 0;
  a.max_model_len = 1024;
  a.enable_prefix_caching = enable;
  a.prefix_cache_block_tokens = block_tokens;
  return a;
}

// Every sampled row's raw logits, per request id, in output order (EngineArgs::on_logits).
struct LogitsLog {
  std::map<std::string, std::vector<std::vector<float>>> rows;
  void attach(EngineArgs& a) {
    a.on_logits = [this](const std::string& id, int64_t, std::span<const float> l) {
      rows[id].emplace_back(l.begin(), l.end());
    };
  }
};

}  // namespace deepinfer::testing
