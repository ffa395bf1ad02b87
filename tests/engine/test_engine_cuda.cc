// The engine on device cuda (CudaRunner over GpuModel) against the engine on the CPU, with
// the same random weights: greedy tokens agree wherever the CPU's top-1 margin leaves room
// for fp32 rounding differences, and in batch-invariant mode a request's logits on the GPU
// are bitwise the same alone or inside a batch. Device sampling (kSample rows, steps chained
// through sample references) gives the tokens of host sampling of the same logits, and so
// do grammar-constrained rows masked on the device. Label cuda: needs a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>

#include "constrained_test_util.h"
#include "engine_test_util.h"
#include "model/weights.h"
#include "runtime/cuda_runner.h"

namespace deepinfer::testing {
namespace {

constexpr float kMargin = 1e-2f;

std::unique_ptr<ModelRunner> cuda_runner(bool batch_invariant) {
  auto source = random_weights(small_config(), kEngineTestSeed);
  const ModelWeights weights = load_model_weights(small_config(), *source);
  CudaRunnerOptions o;
  o.max_sequences = 32;
  o.max_context = 256;
  o.max_batch_tokens = 64;
  o.numerics = Numerics::kReference;
  o.batch_invariant = batch_invariant;
  return std::make_unique<CudaRunner>(small_config(), weights, o);
}

// Top-1 minus top-2 of a logits row.
float margin(std::span<const float> row) {
  std::vector<float> v(row.begin(), row.end());
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return v[0] - v[1];
}

TEST(EngineCuda, GreedyTokensMatchTheCpuEngine) {
  auto jobs = random_jobs(24, 40, 16, 5, 0.0f);
  EngineArgs args = tiny_pool_args(true);
  args.state_budget_bytes = 64 << 20;
  // CPU engine (reference numerics), recording each request's margin per output index.
  std::map<std::string, std::map<int64_t, float>> margins;
  EngineArgs cpu_args = args;
  cpu_args.on_logits = [&](const std::string& id, int64_t i, std::span<const float> row) {
    margins[id][i] = margin(row);
  };
  Engine cpu(cpu_args, small_model(false, Numerics::kReference), nullptr);
  for (const Job& j : jobs) cpu.add_request(to_request(j));
  const auto cpu_out = drain(cpu);

  Engine gpu(args, cuda_runner(false), nullptr);
  EXPECT_EQ(gpu.runner().name().rfind("cuda", 0), 0u);
  for (const Job& j : jobs) gpu.add_request(to_request(j));
  const auto gpu_out = drain(gpu);

  int64_t n_compared = 0;
  for (const Job& j : jobs) {
    SCOPED_TRACE(j.id);
    ASSERT_TRUE(cpu_out.count(j.id) && gpu_out.count(j.id));
    const auto want = all_tokens(cpu_out.at(j.id)), got = all_tokens(gpu_out.at(j.id));
    const size_t n = std::min(want.size(), got.size());
    size_t i = 0;
    for (; i < n && want[i] == got[i]; ++i) ++n_compared;
    if (i < n) {
      // They may part only where the CPU's choice was nearly a tie; after that the
      // contexts differ and nothing more is compared.
      EXPECT_LE(margins[j.id][int64_t(i)], kMargin) << "token " << i << ": cpu " << want[i] << " gpu " << got[i];
    } else {
      EXPECT_EQ(want.size(), got.size()) << "same tokens but different lengths";
    }
  }
  EXPECT_GT(n_compared, 100);
  EXPECT_TRUE(gpu.state_cache().all_free());
}

// Logits of one request alone, then inside a batch of mixed prefill and decode chunks.
TEST(EngineCuda, BatchInvariantLogitsAreBitwiseEqualAloneAndBatched) {
  const auto probe_prompt = random_tokens(23, small_config().vocab_size, 1234);
  auto run = [&](bool batched) {
    std::vector<std::vector<float>> rows;
    EngineArgs args = tiny_pool_args(true);
    args.state_budget_bytes = 64 << 20;
    args.on_logits = [&](const std::string& id, int64_t, std::span<const float> row) {
      if (id == "probe") rows.emplace_back(row.begin(), row.end());
    };
    Engine engine(args, cuda_runner(true), nullptr);
    // The probe comes first, so its whole prompt is one chunk in both runs (FCFS, 64-token
    // budget): the runs differ only in what else shares each forward.
    EngineRequest probe;
    probe.id = "probe";
    probe.prompt = probe_prompt;
    probe.params.temperature = 0.0f;
    probe.params.max_tokens = 10;
    probe.params.ignore_eos = true;
    engine.add_request(probe);
    if (batched) {
      for (const Job& j : random_jobs(12, 40, 12, 77, 0.0f)) engine.add_request(to_request(j));
    }
    drain(engine);
    EXPECT_EQ(engine.stats().n_preemptions, 0);
    if (batched) {
      EXPECT_GE(engine.stats().max_running, 4);
    }
    return rows;
  };
  const auto alone = run(false), batched = run(true);
  ASSERT_EQ(alone.size(), 10u);
  ASSERT_EQ(batched.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    EXPECT_TRUE(std::equal(alone[i].begin(), alone[i].end(), batched[i].begin())) << "output " << i;
  }
}

// Rows sampled on the device (and, with overlap, step t+1 launched with its inputs read from
// step t's device samples) against the same engine with every row on the host path (the
// on_logits hook forces it): the same tokens for greedy and seeded temperature > 0 requests,
// overlap on and off. The mixed jobs add host rows (penalties) to device rows (plain, and
// ignore_eos: EOS masked on the device); while such a request runs no step is chained, so
// the plain jobs (penalties dropped) check the chained path. Batch-invariant kernels, so the
// logits of the two runs are bitwise equal.
void expect_device_sampling_equals_host(const std::function<std::unique_ptr<ModelRunner>()>& make_runner) {
  for (const float temperature : {0.0f, 0.8f}) {
    for (const bool mixed : {true, false}) {
      auto jobs = random_jobs(24, 40, 16, 5, temperature);
      if (!mixed) {
        for (Job& j : jobs) {
          j.params.repetition_penalty = 1.0f;
          j.params.presence_penalty = 0.0f;
          j.params.frequency_penalty = 0.0f;
        }
      }
      for (const bool overlap : {true, false}) {
        SCOPED_TRACE(std::string("temperature ") + std::to_string(temperature) + (mixed ? ", mixed" : ", plain") +
                     (overlap ? ", overlap" : ", sequential"));
        EngineArgs args = tiny_pool_args(overlap);
        args.state_budget_bytes = 64 << 20;
        auto counting = std::make_unique<CountingRunner>(make_runner());
        auto n_chained = counting->n_chained_, n_device = counting->n_device_rows_;
        Engine device(args, std::move(counting), nullptr);
        for (const Job& j : jobs) device.add_request(to_request(j));
        const auto device_out = drain(device);
        EXPECT_GT(*n_device, 100);
        if (overlap && !mixed) {
          EXPECT_GT(*n_chained, 10);  // 21 of 22 steps on the CPU backend
        }
        EXPECT_TRUE(device.state_cache().all_free());

        EngineArgs host_args = args;
        host_args.on_logits = [](const std::string&, int64_t, std::span<const float>) {};
        Engine host(host_args, make_runner(), nullptr);
        for (const Job& j : jobs) host.add_request(to_request(j));
        const auto host_out = drain(host);
        for (const Job& j : jobs) {
          ASSERT_TRUE(device_out.count(j.id) && host_out.count(j.id)) << j.id;
          EXPECT_EQ(all_tokens(device_out.at(j.id)), all_tokens(host_out.at(j.id))) << j.id;
        }
      }
    }
  }
}

TEST(EngineCuda, DeviceSamplingEqualsHostSampling) {
  expect_device_sampling_equals_host([] { return cuda_runner(true); });
}

// The same with FP8 dummy weights and decode steps replayed as CUDA graphs (the sample
// references are resolved on the device before the graph's first kernel reads the tokens).
TEST(EngineCuda, DeviceSamplingEqualsHostSamplingWithCudaGraphs) {
  ModelConfig cfg = small_config();
  cfg.hash_layers.assign(size_t(cfg.num_layers), false);  // device dummy weights: score routing
  expect_device_sampling_equals_host([cfg] {
    CudaRunnerOptions o;
    o.max_sequences = 32;
    o.max_context = 256;
    o.max_batch_tokens = 64;
    o.numerics = Numerics::kReference;
    o.fp8_weights = true;
    o.cuda_graphs = true;
    o.batch_invariant = true;
    return std::unique_ptr<ModelRunner>(std::make_unique<CudaRunner>(cfg, uint64_t(11), o));
  });
}

// Grammar-constrained rows (regex and json_schema) masked on the device (RowRequest::bitmask:
// staged, uploaded once per step, apply_token_bitmask_cuda before the EOS fill and the
// sampler) against the same engine with every row on the host path (on_logits hook: mask and
// sample on the CPU): the same tokens and finish reasons, greedy and seeded temperature > 0,
// with and without host rows beside them, overlap on and off. Batch-invariant kernels, so
// the logits of the two runs are bitwise equal. The runner counts the masked rows.
TEST(EngineCuda, GrammarMasksOnTheDeviceEqualTheHostPath) {
  for (const float temperature : {0.0f, 0.8f}) {
    for (const bool with_host_rows : {false, true}) {
      const auto requests = constrained_requests(12, temperature, with_host_rows, 5);
      for (const bool overlap : {true, false}) {
        SCOPED_TRACE(std::string("temperature ") + std::to_string(temperature) +
                     (with_host_rows ? ", host rows" : "") + (overlap ? ", overlap" : ", sequential"));
        EngineArgs args = tiny_pool_args(overlap);
        args.state_budget_bytes = 64 << 20;
        auto counting = std::make_unique<CountingRunner>(cuda_runner(true));
        auto n_masked = counting->n_masked_rows_, n_chained = counting->n_chained_;
        Engine device(args, std::move(counting), constrained_test_tokenizer());
        const auto got = run_constrained(device, requests);
        EXPECT_GT(*n_masked, 100) << "constrained rows were not masked on the device";
        EXPECT_EQ(*n_chained, 0) << "a step with constrained rows was chained";
        EXPECT_TRUE(device.state_cache().all_free());

        EngineArgs host_args = args;
        host_args.on_logits = [](const std::string&, int64_t, std::span<const float>) {};
        Engine host(host_args, cuda_runner(true), constrained_test_tokenizer());
        const auto want = run_constrained(host, requests);
        int n_stop = 0;
        for (const EngineRequest& r : requests) {
          ASSERT_TRUE(got.count(r.id) && want.count(r.id)) << r.id;
          EXPECT_EQ(got.at(r.id).tokens, want.at(r.id).tokens) << r.id << " " << r.constraint_kind;
          EXPECT_EQ(got.at(r.id).finish_reason, want.at(r.id).finish_reason) << r.id;
          n_stop += got.at(r.id).finish_reason == "stop";
        }
        EXPECT_GT(n_stop, 0) << "no constrained output finished";
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::testing
