// The grammar-derived closing bias: GrammarMatcher::shortest_completion against a brute-force
// breadth-first search over byte strings, and closing_tokens against the mask.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "grammar/compile.h"
#include "hf_vocab.h"

namespace deepinfer::grammar {
namespace {

std::shared_ptr<const Vocabulary> vocab() {
  static auto v = testing::load_hf_vocab(testing::kDeepSeekTokenizer, testing::kDeepSeekVocabSize);
  return v;
}

// Length of the shortest byte string over `alphabet` that completes the matcher's input, by
// breadth-first search over strings (up to max_len); -1 if none that short.
int brute_force_distance(GrammarMatcher& m, const std::string& alphabet, int max_len) {
  if (m.can_terminate()) return 0;
  std::vector<std::string> level{""};
  for (int len = 1; len <= max_len; ++len) {
    std::vector<std::string> next;
    for (const auto& s : level)
      for (char c : alphabet) {
        const std::string t = s + c;
        if (!m.accept_bytes(t)) continue;
        const bool done = m.can_terminate();
        m.rollback(1);
        if (done) return len;
        next.push_back(t);
      }
    level.swap(next);
  }
  return -1;
}

TEST(Completion, ShortestCompletionIsShortestAndCompletes) {
  struct Case { std::string kind, text, alphabet; };
  const std::vector<Case> cases = {
      {"regex", "(ab|c)+d{2,3}", "abcd"},
      {"regex", "a(b|cc(d|ee)){1,3}f?", "abcdef"},
      {"ebnf", "root ::= \"(\" root \")\" | \"x\" root | \"y\"", "()xy"},
      {"json_schema", R"({"type":"array","items":{"enum":[1,22]},"minItems":2})", "[],12"},
  };
  int checked = 0;
  for (const auto& c : cases) {
    auto g = compile_grammar({c.kind, c.text}, vocab());
    for (uint64_t seed = 0; seed < 20; ++seed) {
      GrammarMatcher m(g);
      std::mt19937_64 rng(seed);
      // A random prefix of the language: random allowed bytes of the alphabet.
      for (int i = 0, n = static_cast<int>(rng() % 8); i < n; ++i) {
        std::string ok;
        for (char a : c.alphabet)
          if (m.accept_bytes(std::string(1, a))) { ok += a; m.rollback(1); }
        if (ok.empty()) break;
        ASSERT_TRUE(m.accept_bytes(std::string(1, ok[rng() % ok.size()])));
      }
      const std::string s = m.shortest_completion(64);
      const int want = brute_force_distance(m, c.alphabet, 8);
      if (want < 0) continue;
      ASSERT_EQ(static_cast<int>(s.size()), want) << c.text << " seed " << seed << " completion '" << s << "'";
      if (!s.empty()) {
        ASSERT_TRUE(m.accept_bytes(s)) << c.text << " '" << s << "'";
        EXPECT_TRUE(m.can_terminate()) << c.text << " '" << s << "'";
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
}

TEST(Completion, ClosingTokensAreAllowedAndEndTheOutput) {
  const char* schema = R"({"type":"object","properties":{"name":{"type":"string","minLength":2},
      "tags":{"type":"array","items":{"type":"string"},"minItems":1},"n":{"type":"integer","minimum":10}},
      "required":["name","tags","n"]})";
  auto g = compile_grammar({"json_schema", schema}, vocab());
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 5; ++trial) {
    GrammarMatcher m(g);
    // Random allowed tokens for a while, then only closing tokens: the output must end soon.
    int steps = 0;
    for (; steps < 400 && !m.is_terminated(); ++steps) {
      const std::vector<uint32_t> mask = m.next_token_bitmask();
      std::vector<int32_t> pick;
      if (steps >= 10) {
        pick = m.closing_tokens();
        ASSERT_FALSE(pick.empty()) << "no closing token at step " << steps;
        for (int32_t t : pick) ASSERT_TRUE((mask[t >> 5] >> (t & 31)) & 1) << "closing token " << t << " not allowed";
      } else {
        for (int32_t t = 0; t < vocab()->size(); ++t)
          if ((mask[t >> 5] >> (t & 31)) & 1) pick.push_back(t);
      }
      ASSERT_TRUE(m.accept_token(pick[rng() % pick.size()]));
    }
    EXPECT_TRUE(m.is_terminated()) << "trial " << trial;
    EXPECT_LT(steps, 200) << "trial " << trial;
  }
}

}  // namespace
}  // namespace deepinfer::grammar
