// MODEL_SPEC §E.16, third part (guards §D.1): with a trained DSpark drafter, moving its target
// feature taps by one layer must lower the greedy acceptance. Needs a trained drafter, so it runs
// on models/trained-v41 once that checkpoint carries one (tools/train_drafter.py), or on the
// checkpoint named by DEEPINFER_TRAINED_DRAFTER, and is skipped otherwise (random weights only
// show that the taps change the drafts: tests/model/test_dspark.cc).
// Text: the target's own greedy continuation of a short prompt (what a drafter trained to
// imitate it should predict); 4 prompts x 48 tokens, k = the block size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "io/config_parser.h"
#include "model/model.h"
#include "model/weight_source.h"
#include "spec/greedy_speculative.h"
#include "../tools/tool_util.h"

namespace deepinfer {
namespace {

double acceptance(const Model& model, const std::vector<std::vector<int32_t>>& prompts, int64_t n_new) {
  int64_t steps = 0, committed = 0;
  for (const auto& prompt : prompts) {
    auto state = model.new_state();
    const GreedyOutput out =
        greedy_speculative(model, *state, prompt, n_new, model.draft_length(), model_drafter(model));
    steps += out.stats.steps;
    committed += out.stats.accepted + out.stats.steps;
  }
  return static_cast<double>(committed) / static_cast<double>(steps);
}

TEST(TapMoved, LowersTheAcceptanceOfATrainedDrafter) {
  const char* env = std::getenv("DEEPINFER_TRAINED_DRAFTER");
  const std::string dir = env != nullptr ? env : "models/trained-v41";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no checkpoint at " << dir;
  ModelConfig cfg = load_model_config(dir);
  if (cfg.dspark.block_size == 0) GTEST_SKIP() << dir << " has no DSpark drafter (not trained yet)";
  const ModelOptions options{Numerics::kOfficial, /*batch_invariant=*/true};
  auto model = Model::load(dir, options);
  ASSERT_EQ(model->drafter_kind(), DrafterKind::kDspark);
  // Prompts: the held-out prompts the drafter's acceptance was recorded on
  // (DIR/drafter_prompts.txt, one comma-separated id list per line, tools/train_drafter.py
  // --record); without them a few tokens and the target's own greedy continuation.
  const std::string prompts_file = dir + "/drafter_prompts.txt";
  std::vector<std::vector<int32_t>> prompts;
  if (std::filesystem::exists(prompts_file)) prompts = tools::read_token_lists(prompts_file);
  for (int32_t seed : {11, 12, 13, 14}) {
    if (!prompts.empty()) break;
    const int32_t V = static_cast<int32_t>(cfg.vocab_size);
    std::vector<int32_t> prompt = {static_cast<int32_t>(cfg.bos_token_id), seed * 97 % V, seed * 131 % V};
    auto state = model->new_state();
    const GreedyOutput g = greedy_plain(*model, *state, prompt, 16);
    prompt.insert(prompt.end(), g.tokens.begin(), g.tokens.end());
    prompts.push_back(prompt);
  }
  const double right = acceptance(*model, prompts, 48);
  ModelConfig moved = cfg;
  // One layer earlier (one later if a tap is at layer 0).
  std::vector<int64_t>& taps = moved.dspark.target_layer_ids;
  const int64_t shift = *std::min_element(taps.begin(), taps.end()) > 0 ? -1 : 1;
  for (int64_t& l : taps) l += shift;
  auto source = open_checkpoint_weights(dir, moved);
  auto wrong = Model::from_source(moved, *source, options);
  const double shifted = acceptance(*wrong, prompts, 48);
  std::printf("mean acceptance length: taps %s %.3f, moved by one layer %.3f\n", dir.c_str(), right, shifted);
  EXPECT_LT(shifted, right);
}

}  // namespace
}  // namespace deepinfer
