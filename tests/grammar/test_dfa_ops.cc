// The automaton operations (dfa_ops.cc) and the combined construction of expressions holding
// prebuilt automata, against plain references: every string over a small alphabet up to a length
// is checked against the plain NFA construction (build_dfa_plain) and against the boolean
// combination of the operands' answers.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "grammar/dfa.h"
#include "grammar/expr.h"
#include "grammar/json_strings.h"

namespace deepinfer::grammar {
namespace {

// All strings over `alphabet` of length <= n.
std::vector<std::string> all_strings(const std::string& alphabet, int n) {
  std::vector<std::string> out{""};
  for (size_t i = 0; i < out.size(); ++i)
    if (static_cast<int>(out[i].size()) < n)
      for (char c : alphabet) out.push_back(out[i] + c);
  return out;
}

// A random regular expression over {a, b, c, "}; `wrap` turns some sub-expressions into
// prebuilt automata (the fast path's input) and leaves `plain` the same language without them.
struct RandomExpr {
  std::mt19937 rng;
  explicit RandomExpr(uint32_t seed) : rng(seed) {}
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }

  void make(int depth, ExprPtr& plain, ExprPtr& wrapped) {
    const int kind = depth <= 0 ? pick(2) : pick(7);
    if (kind == 0) {
      const char* atoms[] = {"a", "b", "c", "\"", "ab", "ca"};
      plain = wrapped = lit(atoms[pick(6)]);
    } else if (kind == 1) {
      plain = wrapped = pick(2) ? cls({{'a', 'b'}}) : cls({{'b', 'c'}, {'"', '"'}});
    } else if (kind <= 3 || kind == 5) {
      std::vector<ExprPtr> p, w;
      for (int i = 0, n = 2 + pick(2); i < n; ++i) {
        ExprPtr x, y;
        make(depth - 1, x, y);
        p.push_back(x);
        w.push_back(y);
      }
      plain = kind == 5 ? alt(p) : seq(p);
      wrapped = kind == 5 ? alt(w) : seq(w);
    } else {
      ExprPtr x, y;
      make(depth - 1, x, y);
      const int lo = pick(2), hi = pick(3) == 0 ? kUnbounded : lo + pick(3);
      plain = repeat(x, lo, hi);
      wrapped = repeat(y, lo, hi);
    }
    if (pick(3) == 0) wrapped = automaton(std::make_shared<const Dfa>(build_dfa_plain(*plain, "part")));
  }
};

TEST(DfaOps, CombinedConstructionEqualsPlain) {
  const std::vector<std::string> strings = all_strings("abc\"", 6);
  int non_trivial = 0;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    RandomExpr gen(seed);
    ExprPtr plain, wrapped;
    gen.make(3, plain, wrapped);
    const Dfa ref = build_dfa_plain(*plain, "plain");
    const Dfa fast = build_dfa(*wrapped, "wrapped");
    int accepted = 0;
    for (const auto& s : strings) {
      ASSERT_EQ(fast.matches(s), ref.matches(s)) << "seed " << seed << " string '" << s << "'";
      accepted += ref.matches(s);
    }
    non_trivial += accepted > 0 && accepted < static_cast<int>(strings.size());
  }
  EXPECT_GT(non_trivial, 150);  // the generator exercises real languages, not only empty/full ones
}

TEST(DfaOps, ProductsAndConcatenationMatchTheirDefinitions) {
  const std::vector<std::string> strings = all_strings("abc\"", 6);
  int concats = 0, disjoint_unions = 0;
  for (uint32_t seed = 0; seed < 200; ++seed) {
    RandomExpr gen(1000 + seed);
    ExprPtr pa, wa, pb, wb;
    gen.make(2, pa, wa);
    gen.make(2, pb, wb);
    const Dfa a = build_dfa_plain(*pa, "a"), b = build_dfa_plain(*pb, "b");
    const Dfa u = union_dfa(a, b, "u"), i = intersect_dfa(a, b, "i"), d = subtract_dfa(a, b, "d");
    for (const auto& s : strings) {
      const bool ma = a.matches(s), mb = b.matches(s);
      ASSERT_EQ(u.matches(s), ma || mb) << seed << " '" << s << "'";
      ASSERT_EQ(i.matches(s), ma && mb) << seed << " '" << s << "'";
      ASSERT_EQ(d.matches(s), ma && !mb) << seed << " '" << s << "'";
    }
    bool starts_disjoint = !a.empty() && !b.empty();
    for (int c = 0; c < 256 && starts_disjoint; ++c)
      starts_disjoint = a.at(a.start, c) == kDead || b.at(b.start, c) == kDead;
    disjoint_unions += starts_disjoint;
    if (std::optional<Dfa> ab = concat_dfa(a, b)) {
      ++concats;
      const Dfa ref = build_dfa_plain(*seq({pa, pb}), "ab");
      for (const auto& s : strings) ASSERT_EQ(ab->matches(s), ref.matches(s)) << seed << " '" << s << "'";
    }
  }
  EXPECT_GT(concats, 20);
  EXPECT_GT(disjoint_unions, 20);
}

TEST(DfaOps, CountedJsonCharactersEqualThePlainRepetition) {
  const Dfa unit = build_dfa(*json_char(), "char");
  const std::vector<std::string> strings = all_strings("a\\\"n", 5);
  for (auto [lo, hi] : std::vector<std::pair<int, int>>{{0, 3}, {1, 2}, {2, kUnbounded}, {0, 0}, {3, 3}}) {
    const Dfa fast = repeat_prefix_free_dfa(unit, lo, hi, "fast");
    const Dfa again = repeat_prefix_free_dfa(unit, lo, hi, "memo");  // from the memo
    const Dfa ref = build_dfa_plain(*repeat(json_char(), lo, hi), "plain");
    for (const auto& s : strings) {
      ASSERT_EQ(fast.matches(s), ref.matches(s)) << lo << "," << hi << " '" << s << "'";
      ASSERT_EQ(again.matches(s), ref.matches(s)) << lo << "," << hi << " '" << s << "'";
    }
  }
}

TEST(DfaOps, TablesStayInByteClasses) {
  // A 513-count string body: a few classes, not 256 columns per state.
  const Dfa unit = build_dfa(*json_char(), "char");
  const Dfa body = repeat_prefix_free_dfa(unit, 0, 512, "body");
  EXPECT_LT(body.n_classes, 32);
  EXPECT_EQ(body.next.size(), static_cast<size_t>(body.n_states()) * body.n_classes);
  const Dfa quoted = build_dfa(*seq({lit("\""), automaton(std::make_shared<const Dfa>(body)), lit("\"")}), "q");
  const Dfa with_null = build_dfa(*alt({seq({lit("\""), automaton(std::make_shared<const Dfa>(body)), lit("\"")}),
                                         lit("null")}), "n");
  EXPECT_TRUE(quoted.matches("\"" + std::string(512, 'x') + "\""));
  EXPECT_FALSE(quoted.matches("\"" + std::string(513, 'x') + "\""));
  EXPECT_TRUE(with_null.matches("null"));
  EXPECT_TRUE(with_null.matches("\"\\n\\u001f\xc3\xa9\""));  // escapes and raw UTF-8
  EXPECT_FALSE(with_null.matches("nul"));
  EXPECT_LT(with_null.n_classes, 40);
}

}  // namespace
}  // namespace deepinfer::grammar
