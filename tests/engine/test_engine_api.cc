// Engine API behaviour: stop strings on detokenized text, logprobs, errors that leave the
// engine unchanged, abort, streaming text, --dummy-weights.
#include <gtest/gtest.h>

#include <cmath>

#include "engine_test_util.h"
#include "io/config_parser.h"
#include "recipe/tokenizer.h"

namespace deepinfer::testing {
namespace {

std::shared_ptr<const recipe::Tokenizer> tiny_tokenizer() {
  static auto tok = std::make_shared<const recipe::Tokenizer>(
      recipe::Tokenizer::from_file("models/tiny/tokenizer.json"));
  return tok;
}

TEST(EngineApi, StopStringCutsTextAndFinishes) {
  EngineArgs args = tiny_pool_args(true);
  Engine engine(args, small_model(), tiny_tokenizer());
  const recipe::Tokenizer& tok = *tiny_tokenizer();
  const auto prompt = random_tokens(20, small_config().vocab_size, 41);
  const RequestOutput full = engine.generate({greedy("full", prompt, 48)})[0];
  ASSERT_EQ(full.new_tokens.size(), 48u);
  EXPECT_EQ(full.new_text, tok.decode(full.new_tokens, /*skip_special_tokens=*/true));
  // A stop string taken from the middle of the full text (starting at a character boundary).
  size_t start = full.new_text.size() / 2;
  while (start > 0 && (static_cast<unsigned char>(full.new_text[start]) & 0xC0) == 0x80) --start;
  const std::string stop = full.new_text.substr(start, 3);
  ASSERT_EQ(stop.size(), 3u);
  const size_t at = full.new_text.find(stop);

  // Streamed with step(): the pieces never contain any part of the stop string.
  EngineRequest req = greedy("cut", prompt, 48);
  req.stop = {"never-appears-here", stop};
  engine.add_request(req);
  std::string streamed;
  std::vector<int32_t> tokens;
  RequestOutput last;
  while (engine.has_unfinished()) {
    for (RequestOutput& o : engine.step()) {
      streamed += o.new_text;
      tokens.insert(tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      last = o;
    }
  }
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(last.finish_reason, "stop");
  EXPECT_EQ(last.stop_reason, stop);
  EXPECT_EQ(streamed, full.new_text.substr(0, at));
  // Tokens end with the one that completed the stop string.
  ASSERT_LE(tokens.size(), full.new_tokens.size());
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), full.new_tokens.begin()));
  EXPECT_NE(tok.decode(tokens, true).find(stop), std::string::npos);
  EXPECT_EQ(tok.decode(std::vector<int32_t>(tokens.begin(), tokens.end() - 1), true).find(stop),
            std::string::npos);
  EXPECT_TRUE(engine.state_cache().all_free());
}

TEST(EngineApi, LogprobsAreLogSoftmaxOfTheLogits) {
  std::map<int64_t, std::vector<float>> rows;
  EngineArgs args = tiny_pool_args(false);
  args.on_logits = [&](const std::string&, int64_t i, std::span<const float> l) {
    rows[i].assign(l.begin(), l.end());
  };
  auto engine = small_engine(args);
  EngineRequest req = greedy("lp", random_tokens(9, small_config().vocab_size, 3), 5);
  req.n_logprobs = 4;
  req.params.temperature = 0.7f;
  req.params.seed = 5;
  const RequestOutput o = engine->generate({req})[0];
  ASSERT_EQ(o.logprobs.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const auto& row = rows.at(int64_t(i));
    double m = -INFINITY, z = 0.0;
    for (float x : row) m = std::max(m, double(x));
    for (float x : row) z += std::exp(double(x) - m);
    const auto lsm = [&](int32_t t) { return double(row[size_t(t)]) - m - std::log(z); };
    const TokenLogprob& lp = o.logprobs[i];
    EXPECT_EQ(lp.token, o.new_tokens[i]);
    EXPECT_NEAR(lp.logprob, lsm(lp.token), 1e-5);
    ASSERT_EQ(lp.top.size(), 4u);
    const int32_t argmax = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
    EXPECT_EQ(lp.top[0].first, argmax);
    for (size_t k = 0; k < 4; ++k) {
      EXPECT_NEAR(lp.top[k].second, lsm(lp.top[k].first), 1e-5);
      if (k) {
        EXPECT_GE(lp.top[k - 1].second, lp.top[k].second);
      }
    }
  }
}

TEST(EngineApi, BadRequestsThrowAndLeaveTheEngineUnchanged) {
  auto engine = small_engine(tiny_pool_args(false));
  const auto prompt = random_tokens(5, small_config().vocab_size, 1);
  engine->add_request(greedy("a", prompt, 4));
  EXPECT_THROW(engine->add_request(greedy("a", prompt, 4)), Error);           // duplicate id
  EXPECT_THROW(engine->add_request(greedy("b", {}, 4)), Error);               // empty prompt
  EXPECT_THROW(engine->add_request(greedy("b", {1, 300}, 4)), Error);         // outside vocab
  EXPECT_THROW(engine->add_request(greedy("b", prompt, 0)), Error);           // max_tokens
  EXPECT_THROW(engine->add_request(greedy("b", random_tokens(150, 300, 2), 20)), Error);  // > max_model_len
  EngineRequest bad = greedy("b", prompt, 4);
  bad.params.top_p = 1.5f;
  EXPECT_THROW(engine->add_request(bad), Error);
  EngineRequest stop = greedy("b", prompt, 4);
  stop.stop = {"x"};  // no tokenizer
  EXPECT_THROW(engine->add_request(stop), Error);
  EXPECT_THROW(engine->generate({greedy("c", prompt, 4), greedy("d", {}, 4)}), Error);
  EXPECT_FALSE(engine->abort("b"));
  EXPECT_FALSE(engine->abort("c"));  // generate() withdrew it
  const auto outs = drain(*engine);
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(all_tokens(outs.at("a")), generate_tokens(cpu_model(*engine), prompt, greedy("a", prompt, 4).params).tokens);
  EXPECT_TRUE(engine->state_cache().all_free());
}

TEST(EngineApi, AbortFreesStateAndReportsOnce) {
  for (bool overlap : {false, true}) {
    auto engine = small_engine(tiny_pool_args(overlap));
    engine->add_request(greedy("x", random_tokens(150, 300, 8), 10));
    engine->add_request(greedy("y", random_tokens(12, 300, 9), 3));
    std::map<std::string, std::vector<RequestOutput>> outs;
    for (int i = 0; i < 2; ++i) {
      for (RequestOutput& o : engine->step()) outs[o.id].push_back(o);
    }
    ASSERT_FALSE(outs.count("x"));  // still in prefill (two chunks of 64 tokens)
    EXPECT_FALSE(engine->state_cache().all_free());
    EXPECT_TRUE(engine->abort("x"));
    EXPECT_FALSE(engine->abort("x"));
    for (auto& [id, v] : drain(*engine)) outs[id].insert(outs[id].end(), v.begin(), v.end());
    ASSERT_EQ(outs.at("x").size(), 1u);
    EXPECT_TRUE(outs.at("x")[0].finished);
    EXPECT_EQ(outs.at("x")[0].finish_reason, "abort");
    EXPECT_EQ(outs.at("y").back().finish_reason, "length");
    EXPECT_TRUE(engine->state_cache().all_free());
    // The id can be reused once finished.
    const auto again = engine->generate({greedy("x", random_tokens(4, 300, 8), 2)});
    EXPECT_EQ(again[0].new_tokens.size(), 2u);
  }
}

TEST(EngineApi, DummyWeightsInstantiateAConfigWithRandomWeights) {
  const std::string dir = "tests/data/golden/csa/hf";
  EngineArgs args;
  args.model_dir = dir;
  args.dummy_weights = true;
  args.dummy_seed = 3;
  args.max_model_len = 256;
  args.overlap = false;
  Engine engine(args);
  const ModelConfig cfg = load_model_config(dir + "/config.json");
  EXPECT_EQ(engine.model_config(), cfg);
  auto source = random_weights(cfg, 3);
  auto reference = Model::from_source(cfg, *source, {});
  const auto prompt = random_tokens(7, cfg.vocab_size, 4);
  const auto params = greedy("d", prompt, 6).params;
  EXPECT_EQ(engine.generate({greedy("d", prompt, 6)})[0].new_tokens,
            generate_tokens(*reference, prompt, params).tokens);
}

}  // namespace
}  // namespace deepinfer::testing
