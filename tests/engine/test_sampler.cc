// Sampling parameters: logit_bias (OpenAI's semantics: added to the raw logit; +100 forces a
// token, -100 bans it), its validation, its order with the penalties (vLLM: bias first), and
// its path through the engine and the single-sequence loop, where reported logprobs stay
// those of the raw logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "engine/sampler.h"
#include "engine_test_util.h"

namespace deepinfer::testing {
namespace {

std::vector<float> normal_logits(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

int32_t argmax(std::span<const float> v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(SamplerLogitBias, PlusHundredForcesMinusHundredBans) {
  const std::vector<float> raw = normal_logits(1000, 3);
  const int32_t worst = int32_t(std::min_element(raw.begin(), raw.end()) - raw.begin());
  const int32_t best = argmax(raw);
  // Second best, by a full sort (ids ascending among ties, as the sampler orders them).
  std::vector<int32_t> order(raw.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return raw[a] > raw[b]; });
  ASSERT_EQ(order[0], best);

  for (float temperature : {0.0f, 0.7f, 1.0f, 2.0f}) {
    SamplingParams force;
    force.temperature = temperature;
    force.logit_bias = {{worst, 100.0f}};
    SamplingParams ban;
    ban.temperature = temperature;
    ban.logit_bias = {{best, -100.0f}};
    int n_second = 0;
    for (uint64_t seed = 0; seed < 200; ++seed) {
      force.seed = ban.seed = seed;
      std::vector<float> a = raw;
      apply_penalties(a, force, {});
      EXPECT_EQ(sample_token(a, force, int64_t(seed % 7)), worst) << "T=" << temperature << " seed " << seed;
      std::vector<float> b = raw;
      apply_penalties(b, ban, {});
      const int32_t t = sample_token(b, ban, int64_t(seed % 7));
      EXPECT_NE(t, best) << "T=" << temperature << " seed " << seed;
      n_second += t == order[1];
    }
    if (temperature == 0.0f) EXPECT_EQ(n_second, 200);  // greedy moves to the runner-up
  }
}

TEST(SamplerLogitBias, AddedToRawLogitsBeforePenalties) {
  const std::vector<float> raw = normal_logits(50, 5);
  SamplingParams p;
  p.logit_bias = {{5, 2.5f}, {7, -1.0f}, {5, 0.5f}};  // a repeated id gets both
  std::vector<float> l = raw;
  apply_penalties(l, p, {});
  for (int i = 0; i < 50; ++i) {
    const float want = i == 5 ? raw[5] + 2.5f + 0.5f : i == 7 ? raw[7] - 1.0f : raw[i];
    EXPECT_FLOAT_EQ(l[i], want) << i;
  }
  // With a repetition penalty the biased logit is what gets penalised (vLLM's order): a
  // negative raw logit made positive by the bias is divided, not multiplied.
  std::vector<float> neg = raw;
  neg[9] = -1.0f;
  SamplingParams q;
  q.repetition_penalty = 2.0f;
  q.presence_penalty = 0.25f;
  q.logit_bias = {{9, 3.0f}};
  const int32_t history[] = {9, 9, 11};
  apply_penalties(neg, q, history);
  EXPECT_FLOAT_EQ(neg[9], (-1.0f + 3.0f) / 2.0f - 0.25f);
  EXPECT_FLOAT_EQ(neg[11], (raw[11] > 0 ? raw[11] / 2.0f : raw[11] * 2.0f) - 0.25f);
  // Ids beyond the row are skipped (the engine refuses them before sampling).
  std::vector<float> small(4, 0.0f);
  SamplingParams r;
  r.logit_bias = {{4, 50.0f}};
  apply_penalties(small, r, {});
  EXPECT_EQ(small, std::vector<float>(4, 0.0f));
}

TEST(SamplerLogitBias, Validation) {
  auto with = [](int32_t id, float bias) {
    SamplingParams p;
    p.logit_bias = {{id, bias}};
    return p;
  };
  EXPECT_NO_THROW(with(0, 100.0f).validate());
  EXPECT_NO_THROW(with(12, -100.0f).validate());
  EXPECT_THROW(with(0, 100.5f).validate(), Error);
  EXPECT_THROW(with(0, -101.0f).validate(), Error);
  EXPECT_THROW(with(0, NAN).validate(), Error);
  EXPECT_THROW(with(0, INFINITY).validate(), Error);
  EXPECT_THROW(with(-1, 1.0f).validate(), Error);
}

// The engine applies the bias per request; logprobs are those of the raw logits.
TEST(SamplerLogitBias, EngineForcesBansAndReportsRawLogprobs) {
  EngineArgs args = tiny_pool_args(true);
  std::map<std::string, std::vector<std::vector<float>>> rows;  // id -> raw row per position
  args.on_logits = [&](const std::string& id, int64_t pos, std::span<const float> l) {
    auto& v = rows[id];
    if (int64_t(v.size()) <= pos) v.resize(size_t(pos + 1));
    v[size_t(pos)].assign(l.begin(), l.end());
  };
  Engine engine(args, small_model(), nullptr);
  const int64_t V = small_config().vocab_size;
  const auto prompt = random_tokens(12, V, 91);

  auto request = [&](const std::string& id, float temperature) {
    EngineRequest r;
    r.id = id;
    r.prompt = prompt;
    r.params.temperature = temperature;
    r.params.seed = 17;
    r.params.max_tokens = 6;
    r.params.ignore_eos = true;
    r.n_logprobs = 2;
    return r;
  };
  const RequestOutput plain = engine.generate({request("plain", 0.0f)})[0];
  ASSERT_EQ(plain.new_tokens.size(), 6u);
  const int32_t first = plain.new_tokens[0];
  const int32_t forced = (first + 101) % int32_t(V);

  EngineRequest ban = request("ban", 0.0f);
  ban.params.logit_bias = {{first, -100.0f}};
  EngineRequest force = request("force", 1.0f);
  force.params.logit_bias = {{forced, 100.0f}};
  const auto outs = engine.generate({ban, force});
  ASSERT_EQ(outs.size(), 2u);
  const RequestOutput& b = outs[0].id == "ban" ? outs[0] : outs[1];
  const RequestOutput& f = outs[0].id == "force" ? outs[0] : outs[1];

  // Banned: the first token is the runner-up of the raw row, never the banned id.
  std::vector<float> row = rows["ban"][0];
  row[size_t(first)] = -INFINITY;
  EXPECT_EQ(b.new_tokens[0], argmax(row));
  for (int32_t t : b.new_tokens) EXPECT_NE(t, first);
  // Forced: every token (at temperature 1) is the biased id.
  EXPECT_EQ(f.new_tokens, std::vector<int32_t>(6, forced));
  ASSERT_EQ(f.logprobs.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const std::vector<float>& raw = rows["force"][i];
    double mx = *std::max_element(raw.begin(), raw.end()), sum = 0.0;
    for (float x : raw) sum += std::exp(double(x) - mx);
    const double raw_logprob = double(raw[size_t(forced)]) - mx - std::log(sum);
    EXPECT_NEAR(f.logprobs[i].logprob, raw_logprob, 1e-4) << i;
    EXPECT_LT(f.logprobs[i].logprob, -0.5f);  // not the biased distribution's ~0
  }

  // Ids outside the model's vocabulary are refused before the request exists.
  EngineRequest bad = request("bad", 0.0f);
  bad.params.logit_bias = {{int32_t(V), 1.0f}};
  EXPECT_THROW(engine.add_request(bad), Error);
  bad.params.logit_bias = {{0, 150.0f}};
  EXPECT_THROW(engine.add_request(bad), Error);
  EXPECT_FALSE(engine.has_unfinished());
}

// The single-sequence loop (deepinfer generate) shares the rule.
TEST(SamplerLogitBias, GenerateLoopFollowsTheBias) {
  auto model = small_model();
  const int64_t V = small_config().vocab_size;
  const auto prompt = random_tokens(9, V, 92);
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 3;
  p.max_tokens = 5;
  p.ignore_eos = true;
  p.logit_bias = {{42, 100.0f}};
  EXPECT_EQ(generate_tokens(*model, prompt, p).tokens, std::vector<int32_t>(5, 42));
  SamplingParams g;
  g.temperature = 0.0f;
  g.max_tokens = 5;
  g.ignore_eos = true;
  const std::vector<int32_t> plain = generate_tokens(*model, prompt, g).tokens;
  g.logit_bias = {{plain[0], -100.0f}};
  const std::vector<int32_t> banned = generate_tokens(*model, prompt, g).tokens;
  EXPECT_NE(banned[0], plain[0]);
}

}  // namespace
}  // namespace deepinfer::testing
