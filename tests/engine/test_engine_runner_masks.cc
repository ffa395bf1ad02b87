// Grammar masks applied by the runner (RowRequest::bitmask) on the CPU backend: CpuRunner's
// masked kSample rows against the forward's logits masked with apply_token_bitmask_ref and
// sampled by sample_token; the engine's constrained rows sampled by the runner against the
// same engine with every row on the host path (the on_logits hook forces it): bitwise the
// same tokens and finish reasons, overlap on and off, greedy and seeded temperature > 0,
// beside host rows (penalties). Finished outputs are checked with std::regex and
// nlohmann::json (references we did not write).
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "constrained_test_util.h"
#include "ops/sampling/token_bitmask.h"

namespace deepinfer::testing {
namespace {

std::unique_ptr<CpuRunner> cpu_sampling_runner() {
  auto r = std::make_unique<CpuRunner>(small_model());
  r->set_sampler(sample_row_request);
  return r;
}

// Random masks with about a third of the tokens allowed (EOS included or not at random).
std::vector<uint32_t> random_mask(int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint32_t> m(size_t(token_bitmask_words(vocab)));
  for (uint32_t& w : m) w = gen() & gen();
  m[0] |= 1u << 7;  // at least one token allowed
  return m;
}

TEST(CpuRunnerMasks, MasksRowsLikeTheReference) {
  const int64_t V = small_config().vocab_size;
  auto runner = cpu_sampling_runner();
  auto reference = small_model();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(random_tokens(3 + i, V, 40 + uint32_t(i)));
  std::vector<RunnerChunk> chunks;
  std::vector<std::unique_ptr<SequenceState>> states;
  std::vector<SequenceChunk> ref_chunks;
  for (const auto& p : prompts) {
    chunks.push_back({runner->new_sequence(), p, false});
    states.push_back(reference->new_state());
    ref_chunks.push_back({states.back().get(), p, false});
  }
  std::vector<std::vector<uint32_t>> masks;
  std::vector<RowRequest> rows(prompts.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    masks.push_back(random_mask(V, 5 + uint32_t(i)));
    rows[i].mode = RowMode::kSample;
    rows[i].temperature = i % 2 == 0 ? 0.0f : 0.9f;
    rows[i].seed = 3 + i;
    rows[i].position = int64_t(i);
    rows[i].mask_eos = i == 3;  // EOS masked after the grammar mask
    if (i != 2) rows[i].bitmask = masks[i].data();  // row 2: unmasked beside masked rows
  }
  runner->launch(chunks, rows);
  const StepResult got = runner->collect();
  Tensor logits = reference->forward(ref_chunks);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<float> row(logits.f32() + int64_t(i) * V, logits.f32() + int64_t(i + 1) * V);
    if (rows[i].bitmask != nullptr) apply_token_bitmask_ref(row.data(), masks[i].data(), nullptr, 1, V);
    if (rows[i].mask_eos) {
      for (int64_t eos : small_config().eos_token_ids) row[size_t(eos)] = -INFINITY;
    }
    const int32_t want = sample_row_request(row, rows[i]);
    EXPECT_EQ(got.tokens[i], want) << "row " << i;
    if (rows[i].bitmask != nullptr) {
      EXPECT_TRUE((masks[i][size_t(want / 32)] >> (want % 32)) & 1u) << "row " << i << " token " << want;
    }
  }
}

void check_valid(const EngineRequest& r, const ConstrainedResult& got) {
  if (got.finish_reason != "stop") return;
  if (r.constraint_kind == "regex") {
    EXPECT_TRUE(std::regex_match(got.text, std::regex(kMaskPattern))) << r.id << ": " << got.text;
  } else {
    const auto doc = nlohmann::json::parse(got.text);  // throws if not JSON
    ASSERT_TRUE(doc.is_object()) << got.text;
    EXPECT_TRUE(doc.at("n").is_number_integer()) << got.text;
    EXPECT_TRUE(doc.at("s").is_string()) << got.text;
  }
}

class EngineRunnerMasks : public ::testing::TestWithParam<float> {};

TEST_P(EngineRunnerMasks, MaskedInTheRunnerEqualsTheHostPath) {
  const float temperature = GetParam();
  for (const bool with_host_rows : {false, true}) {
    const auto requests = constrained_requests(10, temperature, with_host_rows, 3);
    for (const bool overlap : {true, false}) {
      SCOPED_TRACE(std::string(overlap ? "overlap" : "sequential") + (with_host_rows ? ", host rows" : ""));
      EngineArgs args = tiny_pool_args(overlap);
      auto counting = std::make_unique<CountingRunner>(std::unique_ptr<ModelRunner>(cpu_sampling_runner()));
      auto n_masked = counting->n_masked_rows_, n_chained = counting->n_chained_;
      Engine runner_masks(args, std::move(counting), constrained_test_tokenizer());
      const auto got = run_constrained(runner_masks, requests);
      EXPECT_GT(*n_masked, 100) << "constrained rows were not masked by the runner";
      EXPECT_EQ(*n_chained, 0) << "a step with constrained rows was chained";
      EXPECT_TRUE(runner_masks.state_cache().all_free());

      EngineArgs host_args = args;
      host_args.on_logits = [](const std::string&, int64_t, std::span<const float>) {};
      Engine host(host_args, small_model(), constrained_test_tokenizer());
      const auto want = run_constrained(host, requests);
      int n_stop = 0;
      for (const EngineRequest& r : requests) {
        ASSERT_TRUE(got.count(r.id) && want.count(r.id)) << r.id;
        EXPECT_EQ(got.at(r.id).tokens, want.at(r.id).tokens) << r.id << " " << r.constraint_kind;
        EXPECT_EQ(got.at(r.id).finish_reason, want.at(r.id).finish_reason) << r.id;
        check_valid(r, got.at(r.id));
        n_stop += got.at(r.id).finish_reason == "stop";
      }
      EXPECT_GT(n_stop, 0) << "no constrained output finished";
      std::printf("temperature %.1f%s, %s: %lld rows masked in the runner, %d of %zu outputs stopped\n",
                  temperature, with_host_rows ? " with host rows" : "", overlap ? "overlap" : "sequential",
                  (long long)*n_masked, n_stop, requests.size());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Temperature, EngineRunnerMasks, ::testing::Values(0.0f, 0.8f),
                         [](const auto& info) { return info.param == 0.0f ? "greedy" : "seeded"; });

}  // namespace
}  // namespace deepinfer::testing
