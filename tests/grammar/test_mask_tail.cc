// The mask-tail machinery stays exact (issue 17): the single-top trie walk equals the plain walk
// for every state, bounded-future equivalence equals its definition on small automata, and along
// long generations of length-counter strings (where entries are shared between equivalent
// states and decided by slice verdicts) the cached mask equals the plain uncached walk at every
// step and a brute-force per-token check (accept_token + rollback for every token) at some.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "grammar/compile.h"
#include "grammar/dfa_future.h"
#include "grammar/regex_parser.h"
#include "grammar/token_walk.h"
#include "hf_vocab.h"

namespace deepinfer::grammar {
namespace {

std::shared_ptr<const Vocabulary> vocab() {
  static auto v = testing::load_hf_vocab(testing::kDeepSeekTokenizer, testing::kDeepSeekVocabSize);
  return v;
}

bool bit(const std::vector<uint32_t>& m, int32_t t) { return (m[t >> 5] >> (t & 31)) & 1u; }

// The schemas of the mask tail in bench/results/grammar-2026-12-02-a21da79.md, with smaller limits
// so that a short generation reaches the states near them.
const std::vector<std::string>& tail_schemas() {
  static const std::vector<std::string> s = {
      R"({"type":"string","maxLength":200,"pattern":"^https?://.+$"})",
      R"({"type":"object","patternProperties":{"^.{1,150}$":{}}})",
      R"({"type":"object","properties":{"a":{"type":"string","minLength":1,"maxLength":100},"e":{"type":"string","minLength":1,"pattern":"^(?:\\S+\\s+){0,9}\\S+$"}},"required":["a","e"],"additionalProperties":false})",
      R"({"type":"object","properties":{"f":{"type":"string","minLength":1,"maxLength":160,"pattern":"^[\\w /-]+\\.[0-9a-zA-Z]+$"},"b":{"type":"string","minLength":3,"maxLength":63,"pattern":"^[0-9a-zA-Z\\.\\-_]+$"}},"required":["f","b"]})",
  };
  return s;
}

TEST(MaskTail, SingleTopWalkEqualsPlainWalk) {
  const Vocabulary& v = *vocab();
  for (const auto& text : tail_schemas()) {
    auto g = compile_grammar({"json_schema", text}, vocab());
    const Grammar& gr = g->grammar();
    for (int32_t pos = 0; pos < static_cast<int32_t>(gr.elements.size()); ++pos) {
      if (gr.elements[pos].kind != ElementKind::kDfa) continue;
      const Dfa& d = gr.dfas[gr.elements[pos].arg];
      const int32_t step = std::max<int32_t>(1, d.n_states() / 25);
      for (int32_t s = 0; s < d.n_states(); s += step) {
        for (int mode = 0; mode < 2; ++mode) {
          // mode 1: with a slice skip (ASCII-only slice tokens of <= 6 characters avoiding ',').
          SliceSkip skip{&v, 6, {}, true};
          skip.excluded[0] |= (uint64_t{1} << Vocabulary::kNonAscii) | (uint64_t{1} << ',');
          std::vector<uint32_t> fast(v.n_mask_words()), plain(v.n_mask_words());
          std::vector<int32_t> uf, up;
          StackPool pool;
          walk_token_trie(gr, v.full_trie(), pool, {{pos, s, kUnknownParent}}, fast.data(), &uf, mode ? &skip : nullptr);
          walk_token_trie_plain(gr, v.full_trie(), pool, {{pos, s, kUnknownParent}}, plain.data(), &up, mode ? &skip : nullptr);
          std::sort(uf.begin(), uf.end());
          std::sort(up.begin(), up.end());
          ASSERT_EQ(fast, plain) << text << " pos " << pos << " state " << s << " mode " << mode;
          ASSERT_EQ(uf, up) << text << " pos " << pos << " state " << s << " mode " << mode;
        }
      }
    }
  }
}

// Brute force: a and b agree on every string over `alphabet` of at most `depth` bytes.
bool same_future_brute(const Dfa& d, int32_t a, int32_t b, const std::string& alphabet, int depth) {
  auto kind = [&](int32_t s) { return s == kDead ? 0 : 1 + d.accept[s] + 2 * d.has_out[s]; };
  std::function<bool(int32_t, int32_t, int)> rec = [&](int32_t x, int32_t y, int left) {
    if (kind(x) != kind(y)) return false;
    if (left == 0 || x == kDead) return true;
    for (char c : alphabet)
      if (!rec(d.at(x, static_cast<uint8_t>(c)), d.at(y, static_cast<uint8_t>(c)), left - 1)) return false;
    return true;
  };
  return rec(a, b, depth);
}

TEST(MaskTail, BoundedFutureMatchesItsDefinition) {
  // Counters and a word-count pattern; the alphabet holds every byte class these automata use.
  for (const char* re : {"a{0,20}b", "(ab|c){2,9}", "([a-c]+ ){0,5}[a-c]+", "x{3,12}(y|zz)?"}) {
    Dfa d = build_dfa(*parse_regex(re, RegexMode::kFullMatch), re);
    int n_same = 0;
    for (int depth : {1, 3, 6}) {
      for (int32_t a = 0; a < d.n_states(); ++a)
        for (int32_t b = 0; b < d.n_states(); ++b) {
          const bool want = same_future_brute(d, a, b, "abcxyz ", depth);
          EXPECT_EQ(same_bounded_future(d, a, b, depth, 1 << 20), want) << re << " " << a << " " << b << " depth " << depth;
          if (want) {
            if (depth >= 2) EXPECT_EQ(future_signature(d, a), future_signature(d, b)) << re << " depth " << depth;
            n_same += a != b;
          }
        }
    }
    EXPECT_GT(n_same, 0) << re;  // the check is not vacuous
  }
}

// A generation that prefers long tokens without '"' (so strings run up to their limits).
void check_long_generation(const std::string& text, uint64_t seed, int steps, int brute_every) {
  SCOPED_TRACE(text);
  const Vocabulary& v = *vocab();
  auto g = compile_grammar({"json_schema", text}, vocab());
  GrammarMatcher m(g);
  if (text.find("\"object\"") != std::string::npos) ASSERT_TRUE(m.accept_bytes("{\""));  // into a key
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> cached(v.n_mask_words()), oracle(v.n_mask_words());
  int n_brute = 0;
  for (int i = 0; i < steps && !m.is_terminated(); ++i) {
    m.fill_next_token_bitmask(cached.data());
    m.fill_next_token_bitmask_uncached(oracle.data());
    ASSERT_EQ(cached, oracle) << text << " step " << i;
    if (i % brute_every == brute_every - 1) {
      ++n_brute;
      for (int32_t t = 0; t < v.size(); ++t) {
        const bool ok = m.accept_token(t);
        if (ok) m.rollback(1);
        ASSERT_EQ(ok, bit(cached, t)) << text << " step " << i << " token " << t << " '" << v.token_bytes(t) << "'";
      }
    }
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < v.size(); ++t)
      if (bit(cached, t)) allowed.push_back(t);
    ASSERT_FALSE(allowed.empty()) << text << " stuck at step " << i;
    // The longest of 8 random allowed tokens without '"' (none: any allowed token).
    int32_t tok = -1;
    for (int k = 0; k < 8; ++k) {
      const int32_t c = allowed[rng() % allowed.size()];
      const std::string& b = v.token_bytes(c);
      if (!v.is_stop(c) && b.find('"') == std::string::npos && (tok < 0 || b.size() > v.token_bytes(tok).size())) tok = c;
    }
    if (tok < 0) tok = allowed[rng() % allowed.size()];
    ASSERT_TRUE(m.accept_token(tok));
  }
  EXPECT_GE(n_brute, 2) << text;
}

TEST(MaskTail, LongCounterStringsEqualOracleAndBruteForce) {
  uint64_t seed = 17;
  for (const auto& text : tail_schemas()) check_long_generation(text, seed++, 60, 15);
}

TEST(MaskTail, EquivalentStatesShareEntries) {
  // Far from the limit every count of `.+` has the same entry: a generation of many characters
  // computes few entries (the sharing is what keeps the tail short; exactness is checked above;
  // the long tokens are walked per state).
  auto g = compile_grammar({"json_schema", R"({"type":"string","maxLength":2000,"pattern":"^https?://.+$"})"}, vocab());
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept_bytes("\"https://a"));
  std::vector<uint32_t> mask(vocab()->n_mask_words());
  const Top top0 = m.current_tops().at(0);
  // `.` kills a few code points (U+2028, U+2029): the ASCII-only verdict cannot decide the slice,
  // the verdict over the vocabulary's characters can (the brute-force test above checks its masks).
  EXPECT_FALSE(classify_slice(g->grammar(), top0).closed);
  const SliceVerdict by_chars = classify_slice_chars(g->grammar(), top0, slice_alphabet(g->grammar().dfas[g->grammar().elements[top0.pos].arg], *vocab()));
  EXPECT_TRUE(by_chars.closed);
  EXPECT_EQ(by_chars.max_chars, Vocabulary::kSliceMaxChars);
  for (int i = 0; i < 40; ++i) {
    m.fill_next_token_bitmask(mask.data());
    ASSERT_TRUE(m.accept_bytes("abc/"));
  }
  const Top top1 = m.current_tops().at(0);
  ASSERT_EQ(top0.pos, top1.pos);
  EXPECT_NE(top0.state, top1.state);  // a counter: each character is a new state
  EXPECT_EQ(g->mask_entry(top0.pos, top0.state)->accepted, g->mask_entry(top1.pos, top1.state)->accepted);
  EXPECT_GE(g->n_cached_entries(), 40u);
  EXPECT_LE(g->n_computed_entries(), 4u);  // 40 counts of the same pattern state, few walks
}

TEST(MaskTail, SliceMaskWithoutDeadCharactersMatchesItsDefinition) {
  const Vocabulary& v = *vocab();
  const auto& chars = v.slice_nonascii_chars();
  ASSERT_GT(chars.size(), 1000u);
  for (size_t n_dead : {size_t{3}, size_t{400}}) {  // both ways of building the mask
    std::vector<int32_t> dead;
    for (size_t i = 0; i < n_dead; ++i) dead.push_back(static_cast<int32_t>(i * 7 % chars.size()));
    std::sort(dead.begin(), dead.end());
    dead.erase(std::unique(dead.begin(), dead.end()), dead.end());
    Vocabulary::AsciiSet excluded{};
    excluded[0] |= uint64_t{1} << ',';
    const int k = 5;
    const auto& got = *v.slice_mask_without(excluded, k, dead);
    const auto& slice_k = v.slice_mask_up_to(k);
    int n_kept = 0, n_dropped = 0;
    for (int32_t t = 0; t < v.size(); ++t) {
      const std::string& b = v.token_bytes(t);
      bool want = bit(slice_k, t) && b.find(',') == std::string::npos;
      bool has_dead = false;
      for (int32_t c : dead) has_dead = has_dead || b.find(chars[c]) != std::string::npos;
      if (want && has_dead) ++n_dropped;
      want = want && !has_dead;
      n_kept += want;
      ASSERT_EQ(bit(got, t), want) << "token " << t << " '" << b << "' dead " << n_dead;
    }
    EXPECT_GT(n_kept, 1000);
    EXPECT_GT(n_dropped, 0);
  }
}

}  // namespace
}  // namespace deepinfer::grammar
