// The automaton operations (dfa_ops.cc) and the combined construction of expressions holding
// prebuilt automata, against plain references: every string over a small alphabet up to a length
// is checked against the plain NFA construction (build_dfa_plain) and against the boolean
// combination of the operands' answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
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


// ---- minimize_dfa / trim_dfa / finish_dfa against plain references (the library's versions use
// flat tables, CSR reverse edges and a hash filter; these are the straightforward forms).
namespace plain {

Dfa finish(Dfa d) {
  const int32_t n = d.n_states(), nc = d.n_classes;
  auto col_eq = [&](int32_t p, int32_t q) {
    for (int32_t s = 0; s < n; ++s)
      if (d.next[s * nc + p] != d.next[s * nc + q]) return false;
    return true;
  };
  std::vector<int32_t> reps, merged(nc);
  for (int32_t k = 0; k < nc; ++k) {
    int32_t f = -1;
    for (size_t r = 0; r < reps.size() && f < 0; ++r)
      if (col_eq(reps[r], k)) f = static_cast<int32_t>(r);
    if (f < 0) { f = static_cast<int32_t>(reps.size()); reps.push_back(k); }
    merged[k] = f;
  }
  if (n > 0 && reps.size() < static_cast<size_t>(nc)) {
    std::vector<int32_t> next;
    for (int32_t s = 0; s < n; ++s)
      for (int32_t r : reps) next.push_back(d.next[s * nc + r]);
    d.next = next;
    for (auto& c : d.byte_class) c = static_cast<uint8_t>(merged[c]);
    d.n_classes = static_cast<int32_t>(reps.size());
  }
  d.has_out.assign(n, 0);
  for (int32_t s = 0; s < n; ++s)
    for (int32_t k = 0; k < d.n_classes; ++k)
      if (d.next[s * d.n_classes + k] != kDead) d.has_out[s] = 1;
  return d;
}

Dfa trim(const Dfa& d) {
  const int32_t n = d.n_states(), nc = d.n_classes;
  if (n == 0) return Dfa{};
  std::vector<uint8_t> live(d.accept.begin(), d.accept.end());
  for (bool grew = true; grew;) {  // fixpoint: live if some successor is live
    grew = false;
    for (int32_t s = 0; s < n; ++s)
      for (int32_t k = 0; k < nc && !live[s]; ++k)
        if (d.next[s * nc + k] != kDead && live[d.next[s * nc + k]]) live[s] = grew = true;
  }
  if (!live[d.start]) return Dfa{};
  std::vector<int32_t> id(n, -1), order{d.start};
  id[d.start] = 0;
  for (size_t i = 0; i < order.size(); ++i)
    for (int32_t k = 0; k < nc; ++k) {
      int32_t t = d.next[order[i] * nc + k];
      if (t != kDead && live[t] && id[t] < 0) { id[t] = static_cast<int32_t>(order.size()); order.push_back(t); }
    }
  Dfa out;
  out.byte_class = d.byte_class;
  out.n_classes = nc;
  for (int32_t s : order) {
    out.accept.push_back(d.accept[s]);
    for (int32_t k = 0; k < nc; ++k) {
      int32_t t = d.next[s * nc + k];
      out.next.push_back(t != kDead && live[t] ? id[t] : kDead);
    }
  }
  return finish(out);
}

// Moore rounds with string signatures, at most 32 (as the library), then the quotient, trimmed.
Dfa minimize(const Dfa& d) {
  const int32_t n = d.n_states(), nc = d.n_classes;
  if (n <= 1 || n > 3000) return d;
  std::vector<int32_t> cls(d.accept.begin(), d.accept.end());
  int32_t n_cls = 0;
  for (int round = 0; round < 32; ++round) {
    std::map<std::string, int32_t> ids;
    std::vector<int32_t> next_cls(n);
    for (int32_t s = 0; s < n; ++s) {
      std::string sig = std::to_string(cls[s]);
      for (int32_t k = 0; k < nc; ++k) sig += "," + std::to_string(d.next[s * nc + k] == kDead ? -1 : cls[d.next[s * nc + k]]);
      next_cls[s] = ids.emplace(sig, static_cast<int32_t>(ids.size())).first->second;
    }
    cls = next_cls;
    const int32_t count = static_cast<int32_t>(ids.size());
    if (count == n_cls) break;
    n_cls = count;
    if (round == 31) return d;
  }
  if (n_cls == n) return d;
  Dfa out;
  out.byte_class = d.byte_class;
  out.n_classes = nc;
  out.next.assign(static_cast<size_t>(n_cls) * nc, kDead);
  out.accept.assign(n_cls, 0);
  for (int32_t s = 0; s < n; ++s) {
    out.accept[cls[s]] = d.accept[s];
    for (int32_t k = 0; k < nc; ++k)
      out.next[cls[s] * nc + k] = d.next[s * nc + k] == kDead ? kDead : cls[d.next[s * nc + k]];
  }
  out.start = cls[d.start];
  return trim(out);
}

}  // namespace plain

void expect_same(const Dfa& x, const Dfa& y, const std::string& what) {
  EXPECT_EQ(x.start, y.start) << what;
  EXPECT_EQ(x.n_classes, y.n_classes) << what;
  EXPECT_EQ(x.byte_class, y.byte_class) << what;
  EXPECT_EQ(x.next, y.next) << what;
  EXPECT_EQ(x.accept, y.accept) << what;
  EXPECT_EQ(x.has_out, y.has_out) << what;
}

// Random automata with many equivalent and dead states: a random base automaton in 1-3 copies
// whose transitions go to a random copy of the base target (copies are equivalent), columns
// drawn from few values (so classes merge), sparse accepting states.
TEST(DfaOpsPlain, MinimizeTrimFinishEqualPlainOnRandomAutomata) {
  std::mt19937 rng(1234);
  int merged = 0;  // automata that minimisation shrinks (the test must exercise merging)
  for (int iter = 0; iter < 300; ++iter) {
    const int32_t m = 1 + static_cast<int32_t>(rng() % 60), nc = 1 + static_cast<int32_t>(rng() % 12);
    const int32_t copies = 1 + static_cast<int32_t>(rng() % 3), n = m * copies;
    Dfa d;
    d.n_classes = nc;
    for (int b = 0; b < 256; ++b) d.byte_class[b] = static_cast<uint8_t>(rng() % nc);
    std::vector<int32_t> base(static_cast<size_t>(m) * nc);
    std::vector<uint8_t> base_accept(m);
    for (int32_t s = 0; s < m; ++s) {
      base_accept[s] = rng() % 4 == 0;
      for (int32_t k = 0; k < nc; ++k) base[s * nc + k] = rng() % 3 == 0 ? kDead : static_cast<int32_t>(rng() % m);
    }
    for (int32_t s = 0; s < n; ++s) {
      d.accept.push_back(base_accept[s % m]);
      for (int32_t k = 0; k < nc; ++k) {
        const int32_t t = base[(s % m) * nc + k];
        d.next.push_back(t == kDead ? kDead : t + m * static_cast<int32_t>(rng() % copies));
      }
    }
    d.start = static_cast<int32_t>(rng() % n);
    d = plain::finish(d);
    const std::string what = "iter " + std::to_string(iter);
    expect_same(finish_dfa(d), plain::finish(d), what + " finish");
    expect_same(trim_dfa(d), plain::trim(d), what + " trim");
    const Dfa t = trim_dfa(d);
    expect_same(minimize_dfa(t), plain::minimize(t), what + " minimize");
    expect_same(minimize_dfa(d), plain::minimize(d), what + " minimize untrimmed");
    merged += plain::minimize(t).n_states() < t.n_states();
  }
  EXPECT_GT(merged, 30);
}


// concat_run_dfa (build_dfa's sequences) against the left fold of concat_dfa it replaces: the
// same automaton, state for state, and the same stopping point at the first conflicting part.
TEST(DfaOpsPlain, ConcatRunEqualsTheConcatFold) {
  int long_runs = 0, conflicts = 0, empties = 0;
  for (uint32_t seed = 0; seed < 400; ++seed) {
    RandomExpr gen(5000 + seed);
    std::vector<Dfa> parts;
    for (int i = 0, n = 1 + gen.pick(5); i < n; ++i) {
      ExprPtr p, w;
      gen.make(gen.pick(3), p, w);
      parts.push_back(gen.pick(25) == 0 ? Dfa{} : build_dfa_plain(*p, "part"));
    }
    size_t used = 0;
    const Dfa run = concat_run_dfa(parts, used);
    Dfa acc = parts[0];
    size_t ref_used = 1;
    for (; ref_used < parts.size(); ++ref_used) {
      std::optional<Dfa> joined = concat_dfa(acc, parts[ref_used]);
      if (!joined) break;
      acc = std::move(*joined);
    }
    if (acc.empty()) ref_used = parts.size();  // an empty fold never stops
    const std::string what = "seed " + std::to_string(seed);
    EXPECT_EQ(used, ref_used) << what;
    expect_same(run, acc, what);
    long_runs += used >= 3;
    conflicts += used < parts.size();
    empties += run.empty();
  }
  EXPECT_GT(long_runs, 40);
  EXPECT_GT(conflicts, 40);
  EXPECT_GT(empties, 10);
}

}  // namespace
}  // namespace deepinfer::grammar
