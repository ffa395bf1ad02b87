// Automatic prefix caching on the CUDA backend (engine/prefix_cache_state.h over CudaRunner's
// device prefix states, runtime/gpu_prefix_state.cc), the engine-level counterpart of
// test_prefix_cache.cc: a request served from the cache gives bitwise the logits of a cold
// run (batch-invariant) for hits ending at block boundaries, ratio-4 / ratio-128 (V4) and
// ratio-2 (V4.1) group boundaries and mid-window, in FP8 and bf16 KV, fp32 and FP8 weights,
// eager and with decode steps replayed as CUDA graphs;
// a re-sent prompt hits every full block; eviction under a small cache budget and preemption
// under a small state pool never change an output. Label cuda: needs a GPU.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "model/weights.h"
#include "runtime/cuda_runner.h"

namespace deepinfer {
namespace {

using testing::cache_args;
using testing::greedy;
using testing::LogitsLog;

using testing::all_tokens;
using testing::drain;
using testing::kEngineTestSeed;

struct GpuSetup {
  bool v41 = false;
  Numerics numerics = Numerics::kOfficial;
  bool fp8_weights = false;
  std::string kv = "auto";  // official: fp8, reference: bf16
  bool graphs = false;       // decode steps replay CUDA graphs
  std::string name() const {
    return std::string(v41 ? "v41 " : "v4 ") + numerics_name(numerics) + (fp8_weights ? " fp8 weights" : "") +
           " kv " + kv + (graphs ? " cuda graphs" : "");
  }
};

std::unique_ptr<ModelRunner> cuda_runner(const GpuSetup& s, int64_t max_sequences = 16) {
  const ModelConfig cfg = s.v41 ? testing::small_v41_config() : testing::small_config();
  auto source = random_weights(cfg, kEngineTestSeed);
  const ModelWeights weights = load_model_weights(cfg, *source);
  CudaRunnerOptions o;
  o.max_sequences = max_sequences;
  o.max_context = 1024;
  o.max_batch_tokens = 64;
  o.numerics = s.numerics;
  o.fp8_weights = s.fp8_weights;
  o.kv_cache_dtype = s.kv;
  o.batch_invariant = true;
  o.cuda_graphs = s.graphs;
  return std::make_unique<CudaRunner>(cfg, weights, o);
}

std::vector<std::vector<float>> cold(const GpuSetup& s, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  LogitsLog log;
  EngineArgs a = cache_args(false, 1);
  log.attach(a);
  Engine e(a, cuda_runner(s), nullptr);
  e.generate({greedy("c", prompt, max_tokens)});
  return log.rows["c"];
}

// A prompt, the same prompt again (hit on its full blocks), then prompt + outputs + more
// (hit on blocks cached while decoding), each bitwise against a cold run of the cache-off
// engine on the same device.
void check_exact(const GpuSetup& s, int64_t block_tokens, int64_t prompt_len, bool overlap) {
  SCOPED_TRACE(s.name() + " block=" + std::to_string(block_tokens) + " prompt=" + std::to_string(prompt_len) +
               " overlap=" + std::to_string(overlap));
  const ModelConfig cfg = s.v41 ? testing::small_v41_config() : testing::small_config();
  const std::vector<int32_t> prompt = testing::random_tokens(prompt_len, cfg.vocab_size, 11);
  const int64_t n_out = 2 * block_tokens + 3;
  LogitsLog log;
  EngineArgs a = cache_args(true, block_tokens, overlap);
  log.attach(a);
  Engine e(a, cuda_runner(s), nullptr);
  ASSERT_EQ(e.stats().prefix_cache_block_tokens, block_tokens) << "prefix caching is off on " << e.runner().name();
  const RequestOutput first = e.generate({greedy("first", prompt, n_out)})[0];
  EXPECT_EQ(first.n_cached_tokens, 0);
  const auto reference = cold(s, prompt, n_out);
  EXPECT_EQ(log.rows["first"], reference) << "block-aligned chunks changed a cold run";

  const RequestOutput again = e.generate({greedy("again", prompt, n_out)})[0];
  const int64_t ideal = (prompt_len - 1) / block_tokens * block_tokens;
  EXPECT_EQ(again.n_cached_tokens, ideal);
  EXPECT_EQ(again.new_tokens, first.new_tokens);
  EXPECT_EQ(log.rows["again"], reference) << "hit at " << ideal;

  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), first.new_tokens.begin(), first.new_tokens.end());
  const std::vector<int32_t> extra = testing::random_tokens(5, cfg.vocab_size, 12);
  longer.insert(longer.end(), extra.begin(), extra.end());
  const RequestOutput next = e.generate({greedy("next", longer, 4)})[0];
  const int64_t last_start = prompt_len + n_out - 2;
  EXPECT_EQ(next.n_cached_tokens, last_start / block_tokens * block_tokens);
  EXPECT_EQ(log.rows["next"], cold(s, longer, 4)) << "hit at " << next.n_cached_tokens;
  EXPECT_TRUE(e.state_cache().all_free());
}

// V4 small model (window 8, ratios 4 with indexer and 128): hits at 256 (ratio-128 and
// ratio-4 boundary), 296 (ratio-4 boundary, mid ratio-128 group), 294 (mid both), 133 (mid
// everything).
TEST(EngineCudaPrefix, V4HitsAreExactAtEveryAlignment) {
  const GpuSetup fp8_kv{false, Numerics::kOfficial, false, "auto"};
  check_exact(fp8_kv, 128, 300, true);
  check_exact(fp8_kv, 8, 300, true);
  check_exact(fp8_kv, 6, 300, false);
  check_exact(fp8_kv, 7, 140, true);
  check_exact({false, Numerics::kOfficial, true, "auto"}, 8, 300, true);   // FP8 weights
  check_exact({false, Numerics::kReference, false, "auto"}, 6, 300, true);  // bf16 KV
  check_exact({false, Numerics::kOfficial, false, "bf16"}, 7, 140, false);
  check_exact({false, Numerics::kOfficial, false, "auto", true}, 8, 300, true);  // CUDA graphs
}

// V4.1 small model (fp32 weights, bf16 paged KV): ratio-2 and ratio-1 sources, reuse layers.
TEST(EngineCudaPrefix, V41HitsAreExactAtEveryAlignment) {
  check_exact({true, Numerics::kReference, false, "auto"}, 4, 150, true);
  check_exact({true, Numerics::kOfficial, false, "bf16"}, 3, 150, false);
  check_exact({true, Numerics::kOfficial, false, "bf16"}, 5, 77, true);
}

TEST(EngineCudaPrefix, ResentPromptHitsEveryFullBlock) {
  Engine e(cache_args(true, 16), cuda_runner({}), nullptr);
  const std::vector<int32_t> prompt = testing::random_tokens(300, testing::small_config().vocab_size, 3);
  e.generate({greedy("a", prompt, 1)});
  const EngineStats s1 = e.stats();
  EXPECT_EQ(s1.prefix_cache_hits, 0);
  EXPECT_GE(s1.prefix_cache_blocks, 1);
  EXPECT_GT(s1.prefix_cache_bytes, 0);
  e.generate({greedy("b", prompt, 1)});
  const EngineStats s2 = e.stats();
  EXPECT_EQ(s2.prefix_cache_hits, 1);
  EXPECT_EQ(s2.prefix_cache_hit_tokens, 288);  // (300 - 1) / 16 full blocks: the ideal
  EXPECT_EQ(s2.n_scheduled_tokens - s1.n_scheduled_tokens, 300 - 288);
  EXPECT_TRUE(e.state_cache().all_free());
}

// Many concurrent requests sharing prefixes, a small state pool (preemption) and a cache
// budget of a few pieces (eviction while hits are pinned): outputs equal the cache-off
// engine's, greedy and sampled on the device.
TEST(EngineCudaPrefix, EvictionAndPreemptionNeverChangeOutputs) {
  const int64_t V = testing::small_config().vocab_size;
  const std::vector<int32_t> shared = testing::random_tokens(90, V, 5);
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> p(shared.begin(), shared.begin() + 20 + 6 * i);
    const auto tail = testing::random_tokens(1 + i % 5, V, 100 + uint32_t(i));
    p.insert(p.end(), tail.begin(), tail.end());
    EngineRequest r = greedy("r" + std::to_string(i), p, 3 + i % 4);
    r.params.temperature = i % 2 ? 0.8f : 0.0f;
    r.params.seed = uint64_t(i);
    reqs.push_back(r);
  }
  int64_t piece_bytes = 0;
  {  // the device bytes of one piece of this model, to size the budget at about three
    Engine probe(cache_args(true, 8), cuda_runner({}), nullptr);
    probe.generate({greedy("p", std::vector<int32_t>(shared.begin(), shared.begin() + 9), 1)});
    piece_bytes = probe.stats().prefix_cache_bytes;
    ASSERT_GT(piece_bytes, 0);
  }
  auto run = [&](bool enable, bool overlap) {
    EngineArgs a = testing::tiny_pool_args(overlap);
    a.enable_prefix_caching = enable;
    a.prefix_cache_block_tokens = 8;
    a.prefix_cache_bytes = 3 * piece_bytes + piece_bytes / 2;
    Engine e(a, cuda_runner({}, 6), nullptr);  // 6 sequences: preemption
    std::map<std::string, std::vector<int32_t>> tokens;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (i == reqs.size() / 3) {
        for (int s = 0; s < 12; ++s) {
          for (const RequestOutput& o : e.step()) {
            tokens[o.id].insert(tokens[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
          }
        }
      }
      e.add_request(reqs[i]);
    }
    for (auto& [id, outs] : drain(e)) {
      const std::vector<int32_t> t = all_tokens(outs);
      tokens[id].insert(tokens[id].end(), t.begin(), t.end());
    }
    EXPECT_TRUE(e.state_cache().all_free());
    return std::make_pair(tokens, e.stats());
  };
  const auto [off, s_off] = run(false, true);
  for (bool overlap : {true, false}) {
    const auto [on, s_on] = run(true, overlap);
    EXPECT_EQ(on, off) << "overlap " << overlap;
    EXPECT_GT(s_on.prefix_cache_hits, 0);
    EXPECT_GT(s_on.prefix_cache_evictions, 0);
    EXPECT_LE(s_on.prefix_cache_bytes, 3 * piece_bytes + piece_bytes / 2);
  }
}

}  // namespace
}  // namespace deepinfer
