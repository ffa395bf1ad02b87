// GrammarMatcher over the DeepSeek-V3 vocabulary (129,280 ids): cached masks equal the uncached
// trie walk (the oracle) along random constrained generations; accept/rollback/termination and
// forced bytes behave as documented.
#include <gtest/gtest.h>

#include <random>

#include "grammar/compile.h"
#include "hf_vocab.h"

namespace deepinfer::grammar {
namespace {

std::shared_ptr<const Vocabulary> vocab() {
  static auto v = testing::load_hf_vocab(testing::kDeepSeekTokenizer, testing::kDeepSeekVocabSize);
  return v;
}

std::vector<int32_t> allowed(const std::vector<uint32_t>& mask) {
  std::vector<int32_t> out;
  for (size_t w = 0; w < mask.size(); ++w)
    for (uint32_t x = mask[w]; x; x &= x - 1) out.push_back(static_cast<int32_t>(w * 32 + __builtin_ctz(x)));
  return out;
}

TEST(GrammarMatcher, VocabularyLoaded) {
  auto v = vocab();
  EXPECT_EQ(v->size(), 129280);
  ASSERT_EQ(v->stop_tokens().size(), 1u);
  EXPECT_EQ(v->stop_tokens()[0], 1);
  EXPECT_TRUE(v->token_bytes(0).empty());  // BOS is special
}

void check_cached_equals_uncached(const GrammarSpec& spec, uint64_t seed, int steps) {
  auto g = compile_grammar(spec, vocab());
  GrammarMatcher m(g);
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> cached(vocab()->n_mask_words()), oracle(vocab()->n_mask_words());
  std::vector<std::vector<uint32_t>> history;
  for (int i = 0; i < steps && !m.is_terminated(); ++i) {
    m.fill_next_token_bitmask(cached.data());
    m.fill_next_token_bitmask_uncached(oracle.data());
    ASSERT_EQ(cached, oracle) << spec.text << " step " << i;
    history.push_back(cached);
    auto ok = allowed(cached);
    ASSERT_FALSE(ok.empty()) << spec.text << " stuck at step " << i;
    // Every allowed token is accepted; a disallowed one is refused without changing state.
    int32_t bad = -1;
    for (int32_t t = 2; t < 129000 && bad < 0; t += 997)
      if (!((cached[t >> 5] >> (t & 31)) & 1) && !vocab()->token_bytes(t).empty()) bad = t;
    if (bad >= 0) EXPECT_FALSE(m.accept_token(bad));
    int32_t tok = (i > steps / 2 && m.can_terminate()) ? vocab()->stop_tokens()[0]
                                                       : ok[rng() % ok.size()];
    ASSERT_TRUE(m.accept_token(tok));
  }
  EXPECT_GE(history.size(), 5u) << spec.text;
  // Rolling back restores the earlier masks.
  int32_t n = m.n_accepted();
  for (int32_t back : {1, 3, 2}) {
    if (back > m.n_accepted()) break;
    m.rollback(back);
    n -= back;
    m.fill_next_token_bitmask(cached.data());
    ASSERT_EQ(cached, history[n]) << "after rollback to " << n;
  }
}

TEST(GrammarMatcher, CachedMaskEqualsOracle) {
  check_cached_equals_uncached({"json_schema", R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0},"tags":{"type":"array","items":{"enum":["a","b"]}}},"required":["name","age"]})"}, 1, 40);
  check_cached_equals_uncached({"json_schema", R"({"anyOf":[{"type":"number","maximum":10.5},{"type":"object","additionalProperties":{"type":"boolean"}}]})"}, 2, 30);
  check_cached_equals_uncached({"regex", "(ab|[0-9]{2,3}|\\s)+x?"}, 3, 30);
  check_cached_equals_uncached({"ebnf", "root ::= \"(\" root \")\" root | \"[\" [a-z]* \"]\" root | \"\""}, 4, 30);
  check_cached_equals_uncached({"json_object", ""}, 5, 30);
}

TEST(GrammarMatcher, SliceWithoutExcludedCharactersEqualsOracle) {
  // Strings whose automaton kills a few ASCII characters at every position: the slice tokens
  // avoiding them are accepted wholesale (Vocabulary::slice_without), the rest walked.
  check_cached_equals_uncached({"json_schema", R"({"type":"object","properties":{"familyname":{"type":"string","pattern":"^[^,\"]+$","maxLength":255},"n":{"type":"integer"}},"required":["familyname","n"]})"}, 6, 40);
  check_cached_equals_uncached({"json_schema", R"({"type":"array","items":{"type":"string","pattern":"^[A-Za-z0-9 &'()*,-./@]{1,32}$"}})"}, 7, 40);
  check_cached_equals_uncached({"regex", "([^,x ]{2,40},)+[a-z]{3,40}"}, 8, 40);
}

TEST(GrammarMatcher, TerminationAndStopTokens) {
  auto g = compile_grammar({"regex", "ab"}, vocab());
  GrammarMatcher m(g);
  const int32_t eos = vocab()->stop_tokens()[0];
  EXPECT_FALSE(m.can_terminate());
  EXPECT_FALSE(m.accept_token(eos));
  EXPECT_TRUE(m.accept_bytes("ab"));
  EXPECT_TRUE(m.can_terminate());
  auto mask = m.next_token_bitmask();
  EXPECT_EQ(allowed(mask), std::vector<int32_t>{eos});
  EXPECT_TRUE(m.accept_token(eos));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_TRUE(allowed(m.next_token_bitmask()).empty());
  m.rollback(1);
  EXPECT_FALSE(m.is_terminated());
  EXPECT_THROW(m.rollback(5), Error);
}

TEST(GrammarMatcher, ForcedBytesAndTokens) {
  auto g = compile_grammar({"json_schema", R"({"type":"object","properties":{"temperature":{"type":"number"}},"required":["temperature"],"additionalProperties":false})"}, vocab());
  GrammarMatcher m(g);
  EXPECT_EQ(m.find_forced_bytes(), "{\"temperature\":");
  auto toks = m.find_forced_tokens();
  ASSERT_FALSE(toks.empty());
  std::string spelled;
  for (int32_t t : toks) {
    spelled += vocab()->token_bytes(t);
    EXPECT_TRUE(m.accept_token(t));
  }
  EXPECT_EQ(std::string("{\"temperature\":").rfind(spelled, 0), 0u);
  GrammarMatcher m2(g);
  EXPECT_TRUE(m2.accept_bytes("{\"temperature\":1"));
  EXPECT_EQ(m2.find_forced_bytes(), "");  // more digits, '.', 'e' or '}'
}

// JSON mode (response_format json_object) is a JSON object, not any JSON value.
TEST(GrammarMatcher, JsonObjectKindIsAnObject) {
  auto g = compile_grammar({"json_object", ""}, vocab());
  for (const char* text : {"{}", "{\"a\":[1,{\"b\":null}],\"c\":\"x\"}"}) {
    GrammarMatcher m(g);
    EXPECT_TRUE(m.accept_bytes(text) && m.can_terminate()) << text;
  }
  for (const char* text : {"[1]", "1", "\"s\"", "null"}) {
    GrammarMatcher m(g);
    EXPECT_FALSE(m.accept_bytes(text) && m.can_terminate()) << text;
  }
}

TEST(GrammarMatcher, EmptyLanguageAllowsNothing) {
  GrammarSpec spec{"json_schema", R"({"type":"object","properties":{"a":false},"required":["a"]})"};
  spec.allow_empty_language = true;
  auto g = compile_grammar(spec, vocab());
  EXPECT_TRUE(g->empty_language());
  GrammarMatcher m(g);
  EXPECT_TRUE(allowed(m.next_token_bitmask()).empty());
}

}  // namespace
}  // namespace deepinfer::grammar
