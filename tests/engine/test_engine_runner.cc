// The engine's backends (runtime/model_runner.h) on the CPU: CpuRunner's sequences, an engine
// bounded by a runner smaller than its settings, device selection errors, GPU sizing.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/error.h"
#include "engine_test_util.h"
#include "io/config_parser.h"
#include "model/tiny_model.h"
#include "runtime/gpu_runner_sizing.h"
#include "runtime/runner_factory.h"

namespace deepinfer::testing {
namespace {

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no Error thrown";
  return ErrorKind::kInternal;
}

TEST(CpuRunner, SequencesAreReusedAndBounded) {
  CpuRunnerOptions o;
  o.max_sequences = 2;
  CpuRunner runner(small_model(), o);
  const int64_t a = runner.new_sequence(), b = runner.new_sequence();
  EXPECT_NE(a, b);
  EXPECT_EQ(kind_of([&] { runner.new_sequence(); }), ErrorKind::kResourceExhausted);
  runner.free_sequence(a);
  EXPECT_EQ(kind_of([&] { runner.free_sequence(a); }), ErrorKind::kInvalidInput);
  const int64_t c = runner.new_sequence();
  EXPECT_EQ(c, a);  // the freed id comes back, at position 0
  EXPECT_EQ(runner.n_tokens(c), 0);
  EXPECT_EQ(runner.capacity().max_sequences, 2);
}

TEST(CpuRunner, ForwardEqualsTheModelsOwnLoop) {
  CpuRunner runner(small_model());
  const auto p1 = random_tokens(9, small_config().vocab_size, 5);
  const auto p2 = random_tokens(4, small_config().vocab_size, 6);
  const int64_t s1 = runner.new_sequence(), s2 = runner.new_sequence();
  const std::vector<RunnerChunk> chunks = {{s1, p1, false}, {s2, p2, false}};
  const Tensor logits = runner.forward(chunks);
  EXPECT_EQ(runner.n_tokens(s1), 9);
  EXPECT_EQ(runner.n_tokens(s2), 4);
  EXPECT_GT(runner.busy_seconds(), 0.0);
  const int64_t V = small_config().vocab_size;
  ASSERT_EQ(logits.numel(), 2 * V);
  // The same sequences run alone through the Model (batch-invariant GEMMs: bitwise).
  const std::vector<float> alone1 = run_chunked(runner.model(), p1, 9);
  const std::vector<float> alone2 = run_chunked(runner.model(), p2, 4);
  EXPECT_TRUE(std::equal(alone1.end() - V, alone1.end(), logits.f32()));
  EXPECT_TRUE(std::equal(alone2.end() - V, alone2.end(), logits.f32() + V));
  // A sequence twice in one batch, or an unknown one, is refused before any work.
  const std::vector<RunnerChunk> twice = {{s1, p2, false}, {s1, p2, false}};
  EXPECT_THROW(runner.forward(twice), Error);
  EXPECT_EQ(runner.n_tokens(s1), 9);
  const std::vector<RunnerChunk> unknown = {{77, p2, false}};
  EXPECT_THROW(runner.forward(unknown), Error);
}

// A runner holding fewer sequences than max_num_seqs bounds the scheduler; with overlap on,
// sequences of finished requests are freed only after the step in flight, so the runner
// never sees more than its capacity (it would throw) and every request still gets the
// tokens it gets alone.
TEST(EngineOnRunner, RunnerCapacityBoundsTheScheduler) {
  for (bool overlap : {true, false}) {
    EngineArgs args = tiny_pool_args(overlap);
    args.state_budget_bytes = 64 << 20;  // the runner, not the accounting, is the limit
    CpuRunnerOptions o;
    o.max_sequences = 3;
    Engine engine(args, std::make_unique<CpuRunner>(small_model(), o), nullptr);
    const auto jobs = random_jobs(12, 20, 6, 99, 0.0f);
    for (const Job& j : jobs) engine.add_request(to_request(j));
    const auto outs = drain(engine);
    EXPECT_LE(engine.stats().max_running, 3);
    const auto solo = solo_results(cpu_model(engine), jobs);
    for (const Job& j : jobs) {
      ASSERT_TRUE(outs.count(j.id)) << j.id;
      EXPECT_EQ(all_tokens(outs.at(j.id)), solo.at(j.id).tokens) << j.id << " overlap " << overlap;
    }
    EXPECT_EQ(engine.stats().n_steps_done, engine.stats().n_steps);
    EXPECT_GT(engine.stats().busy_seconds, 0.0);
  }
}

TEST(EngineOnRunner, DeviceSelection) {
  EngineArgs args;
  args.device = "tpu";
  EXPECT_EQ(kind_of([&] { Engine e(args); }), ErrorKind::kInvalidInput);
  args.device = "cpu";
  args.weight_format = "fp8";
  EXPECT_EQ(kind_of([&] { Engine e(args); }), ErrorKind::kUnsupported);
  args.weight_format = "fp32";
  args.kv_cache_dtype = "fp4";
  EXPECT_EQ(kind_of([&] { Engine e(args); }), ErrorKind::kInvalidInput);
  args.kv_cache_dtype = "auto";
  args.cuda_graphs = true;
  EXPECT_EQ(kind_of([&] { Engine e(args); }), ErrorKind::kUnsupported);
  args.cuda_graphs = false;
  if (!cuda_backend_built()) {
    args.device = "cuda";
    args.weight_format = "fp32";
    EXPECT_EQ(kind_of([&] { Engine e(args); }), ErrorKind::kUnsupported);
  }
  args = EngineArgs();
  Engine engine(args);  // the built-in tiny model on the CPU
  EXPECT_EQ(engine.runner().name().rfind("cpu", 0), 0u);
  EXPECT_EQ(engine.max_model_len(), engine.model_config().max_position_embeddings);
}

TEST(GpuSizing, StateAndFit) {
  // One sliding, one CSA (ratio 4, with indexer) and one HCA (ratio 128) layer.
  ModelConfig c = small_config();
  c.compress_ratios = {0, 4, 128};
  c.hash_layers = {false, false, false};
  c.num_layers = 3;
  const int64_t W = c.sliding_window, d = c.head_dim, dI = c.index_head_dim, n = 1024;
  const GpuSizing s = estimate_gpu_sizing(c, n, 64, false);
  // Window rings; ratio-4 compressor rings (overlap: 2m slots of a and z, 2d wide) + n/4
  // entries; its indexer (width dI) likewise; ratio-128 rings (2m slots, d wide) + n/128.
  const int64_t floats = 3 * W * d + (2 * 2 * 4 * 2 * d + n / 4 * d) + (2 * 2 * 4 * 2 * dI + n / 4 * dI) +
                         (2 * 2 * 128 * d + n / 128 * d);
  EXPECT_EQ(s.state_bytes_per_sequence, 4 * floats);
  EXPECT_GT(s.weight_bytes, 0);
  const GpuSizing s8 = estimate_gpu_sizing(c, n, 64, true);
  EXPECT_LT(s8.weight_bytes, s.weight_bytes);
  EXPECT_EQ(s8.state_bytes_per_sequence, s.state_bytes_per_sequence);
  EXPECT_GT(estimate_gpu_sizing(c, 2 * n, 64, false).state_bytes_per_sequence, s.state_bytes_per_sequence);

  GpuSizing t;
  t.weight_bytes = 500;
  t.activation_bytes = 500;  // fixed 1000, plus 2% held back = 1020
  t.state_bytes_per_sequence = 100;
  // 10000 * 0.5 = 5000 allowed, 1000 used by others -> 4000 - 1020 = 2980 -> 29 sequences.
  EXPECT_EQ(gpu_sequences_that_fit(t, 9000, 10000, 0.5, 64), 29);
  EXPECT_EQ(gpu_sequences_that_fit(t, 9000, 10000, 0.5, 8), 8);
  EXPECT_EQ(gpu_sequences_that_fit(t, 5000, 10000, 0.5, 64), 0);  // others use all of the half
  EXPECT_THROW(gpu_sequences_that_fit(t, 9000, 10000, 0.0, 8), Error);
}

// The benchmark's truncated V4-Flash config (bench/configs) has V4-Flash's shapes
// (MODEL_SPEC §0) and its sizing on an H200-size device is sane.
TEST(GpuSizing, BenchV4FlashConfig) {
  const ModelConfig c = load_model_config("bench/configs/v4-flash-4l/config.json");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_heads, 64);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.q_lora_rank, 1024);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.compress_ratios, (std::vector<int64_t>{0, 0, 4, 128}));
  EXPECT_TRUE(c.yarn.enabled);
  EXPECT_EQ(c.yarn.original_max_position, 65536);
  const GpuSizing s = estimate_gpu_sizing(c, 4096, 2048, true);
  // Routed experts dominate: 4 layers x 256 x 3 x 4096 x 2048 FP8 bytes = 25.8 GB.
  const double experts = 4.0 * 256 * 3 * 4096 * 2048;
  EXPECT_GT(double(s.weight_bytes), experts);
  EXPECT_LT(double(s.weight_bytes), 1.2 * experts);
  const int64_t gib = int64_t(1) << 30;
  EXPECT_GE(gpu_sequences_that_fit(s, 139 * gib, 140 * gib, 0.9, 256), 64);
  // W4A8 routed experts (FP4 codes + one UE8M0 byte per 32): 4 x 256 experts x 3 matrices of
  // 4096 x 2048 at 0.5 + 1/32 bytes a weight; everything else as with FP8 experts.
  const GpuSizing w = estimate_gpu_sizing(c, 4096, 2048, true, /*w4a8_experts=*/true);
  const double saved = experts * (1.0 - (0.5 + 1.0 / 32));
  const double fp8_expert_scales = 4.0 * 256 * 3 * (4096.0 / 128) * (2048.0 / 128) * 4;
  EXPECT_NEAR(double(s.weight_bytes - w.weight_bytes), saved + fp8_expert_scales, 1.0);
  EXPECT_EQ(w.state_bytes_per_sequence, s.state_bytes_per_sequence);
}

// V4.1's FP8 weights carry one fp32 scale per 32x32 block (16x V4's 128x128 count), rows of
// blocks padded to a multiple of 4 as GpuModel's grid is.
TEST(GpuSizing, V41BlockScales) {
  ModelConfig c = builtin_model_config("tiny-v4.1");
  const GpuSizing f32 = estimate_gpu_sizing(c, 256, 64, false);
  const GpuSizing f8 = estimate_gpu_sizing(c, 256, 64, true);
  ModelConfig v4 = c;
  v4.model_type = "deepseek_v4";  // the same shapes on V4's 128 grid
  const GpuSizing f8_128 = estimate_gpu_sizing(v4, 256, 64, true);
  EXPECT_LT(f8.weight_bytes, f32.weight_bytes);
  EXPECT_GT(f8.weight_bytes, f8_128.weight_bytes);  // more scales on the 32 grid
}

}  // namespace
}  // namespace deepinfer::testing
