// Thompson NFA over bytes -> subset construction -> trim. UTF-8 code point ranges become byte-range
// sequences with the usual split at encoding-length and continuation-byte boundaries.
#include "grammar/dfa.h"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "base/error.h"
#include "grammar/budget.h"

namespace deepinfer::grammar {

namespace {

constexpr int32_t kMaxNfaStates = 400000;

struct ByteRange { uint8_t lo, hi; };

// Splits [lo, hi] into sequences of byte ranges whose concatenations are exactly the UTF-8
// encodings of the code points in [lo, hi] (surrogates excluded).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>& out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800) utf8_sequences(lo, 0xD7FF, out);
    if (hi > 0xDFFF) utf8_sequences(0xE000, hi, out);
    return;
  }
  for (uint32_t m : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= m && hi > m) {
      utf8_sequences(lo, m, out);
      utf8_sequences(m + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(a, lo);
  append_utf8(b, hi);
  std::vector<ByteRange> seq;
  for (size_t i = 0; i < a.size(); ++i)
    seq.push_back({static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])});
  out.push_back(std::move(seq));
}

struct Nfa {
  struct Edge { uint8_t lo, hi; int32_t to; };
  std::vector<std::vector<int32_t>> eps;
  std::vector<std::vector<Edge>> edges;
  const std::string* what;
  // Two vectors per state plus a few edges: counted as the NFA grows (budget.h).
  static constexpr int64_t kStateBytes = 2 * sizeof(std::vector<int32_t>) + 2 * sizeof(Edge);
  ScopedBytes bytes;

  int32_t add() {
    CHECK_KIND(kUnsupported, static_cast<int32_t>(eps.size()) < kMaxNfaStates)
        << *what << " is too large to compile (more than " << kMaxNfaStates << " NFA states)";
    budget_states(1);
    bytes.grow(kStateBytes);
    eps.emplace_back();
    edges.emplace_back();
    return static_cast<int32_t>(eps.size()) - 1;
  }

  // Adds a fragment from `from`; returns its end state.
  int32_t build(const Expr& e, int32_t from) {
    switch (e.kind) {
      case ExprKind::kEpsilon: return from;
      case ExprKind::kNothing: return add();  // unreachable end
      case ExprKind::kBytes: {
        int32_t cur = from;
        for (char c : e.bytes) {
          int32_t n = add();
          edges[cur].push_back({static_cast<uint8_t>(c), static_cast<uint8_t>(c), n});
          cur = n;
        }
        return cur;
      }
      case ExprKind::kClass: {
        int32_t end = add();
        std::vector<std::vector<ByteRange>> seqs;
        for (const auto& r : e.ranges) utf8_sequences(r.first, r.second, seqs);
        for (const auto& s : seqs) {
          int32_t cur = from;
          for (size_t i = 0; i < s.size(); ++i) {
            int32_t n = (i + 1 == s.size()) ? end : add();
            edges[cur].push_back({s[i].lo, s[i].hi, n});
            cur = n;
          }
        }
        return end;
      }
      case ExprKind::kSeq: {
        int32_t cur = from;
        for (const auto& c : e.children) cur = build(*c, cur);
        return cur;
      }
      case ExprKind::kAlt: {
        int32_t end = add();
        for (const auto& c : e.children) {
          int32_t s = add();
          eps[from].push_back(s);
          eps[build(*c, s)].push_back(end);
        }
        return end;
      }
      case ExprKind::kRepeat: {
        const Expr& c = *e.children[0];
        int32_t cur = from;
        for (int32_t i = 0; i < e.min; ++i) cur = build(c, cur);
        if (e.max == kUnbounded) {
          int32_t loop = add();
          eps[cur].push_back(loop);
          int32_t body_end = build(c, loop);
          eps[body_end].push_back(loop);
          return loop;
        }
        int32_t end = add();
        eps[cur].push_back(end);
        for (int32_t i = e.min; i < e.max; ++i) {
          cur = build(c, cur);
          eps[cur].push_back(end);
        }
        return end;
      }
      case ExprKind::kAutomaton: {
        const Dfa& d = *e.dfa;
        int32_t end = add();
        std::vector<int32_t> ids(d.n_states());
        for (int32_t s = 0; s < d.n_states(); ++s) ids[s] = add();
        eps[from].push_back(ids[d.start]);
        for (int32_t s = 0; s < d.n_states(); ++s) {
          if (d.accept[s]) eps[ids[s]].push_back(end);
          for (int b = 0; b < 256;) {
            int32_t t = d.at(s, b);
            int c = b;
            while (c + 1 < 256 && d.at(s, c + 1) == t) ++c;
            if (t != kDead) edges[ids[s]].push_back({static_cast<uint8_t>(b), static_cast<uint8_t>(c), ids[t]});
            b = c + 1;
          }
        }
        return end;
      }
      case ExprKind::kRef:
        THROW(kInternal) << "rule reference inside a regular expression (" << *what << ")";
    }
    return from;
  }

  mutable std::vector<int32_t> work;  // closure's stack, kept between calls

  void closure(std::vector<int32_t>& set, std::vector<uint8_t>& mark) const {
    work.assign(set.begin(), set.end());
    for (int32_t s : set) mark[s] = 1;
    while (!work.empty()) {
      int32_t s = work.back();
      work.pop_back();
      for (int32_t t : eps[s])
        if (!mark[t]) {
          mark[t] = 1;
          set.push_back(t);
          work.push_back(t);
        }
    }
    for (int32_t s : set) mark[s] = 0;
    std::sort(set.begin(), set.end());
  }
};

}  // namespace

bool Dfa::matches(const std::string& bytes) const {
  if (empty()) return false;
  int32_t s = start;
  for (unsigned char c : bytes) {
    s = at(s, c);
    if (s == kDead) return false;
  }
  return accept[s];
}

uint64_t Dfa::fingerprint() const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(static_cast<uint64_t>(start));
  mix(static_cast<uint64_t>(n_classes));
  for (uint8_t c : byte_class) mix(c);
  // The table in four independent FNV lanes (one multiply chain would bound the speed), the
  // lanes and the length folded in at the end.
  uint64_t lane[4] = {h, h ^ 0x9E3779B97F4A7C15ull, h ^ 0xC2B2AE3D27D4EB4Full, h ^ 0x165667B19E3779F9ull};
  const size_t n = next.size(), n4 = n & ~size_t{3};
  for (size_t i = 0; i < n4; i += 4)
    for (int j = 0; j < 4; ++j) lane[j] = (lane[j] ^ static_cast<uint32_t>(next[i + j])) * 1099511628211ull;
  for (size_t i = n4; i < n; ++i) lane[0] = (lane[0] ^ static_cast<uint32_t>(next[i])) * 1099511628211ull;
  for (uint64_t l : lane) mix(l);
  mix(n);
  for (uint8_t a : accept) mix(a + 7);
  return h;
}

namespace {

Dfa build_dfa_nfa(const Expr& e, const std::string& what, bool stop_at_accept = false);
Dfa build_dfa_uncached(const Expr& e, const std::string& what);

}  // namespace

bool expr_key(const Expr& e, std::string& out, bool automata_by_address) {
  out += static_cast<char>('A' + static_cast<int>(e.kind));
  switch (e.kind) {
    case ExprKind::kRef: return false;
    case ExprKind::kAutomaton:
      if (!automata_by_address) return false;
      out += std::to_string(reinterpret_cast<uintptr_t>(e.dfa.get()));
      break;
    case ExprKind::kClass:
      for (const auto& r : e.ranges) { out += std::to_string(r.first); out += '-'; out += std::to_string(r.second); out += ','; }
      break;
    case ExprKind::kBytes: out += std::to_string(e.bytes.size()); out += ':'; out += e.bytes; break;
    case ExprKind::kRepeat: out += std::to_string(e.min); out += ','; out += std::to_string(e.max); break;
    default: break;
  }
  out += '(';
  for (const auto& c : e.children)
    if (!expr_key(*c, out, automata_by_address)) return false;
  out += ')';
  return true;
}

namespace {

bool has_automaton(const Expr& e) {
  if (e.kind == ExprKind::kAutomaton) return true;
  for (const auto& c : e.children)
    if (has_automaton(*c)) return true;
  return false;
}

constexpr size_t kMaxMemoEntries = 50000;
constexpr size_t kMaxMemoBytes = size_t{256} << 20;
size_t g_memo_bytes = 0;
std::mutex g_memo_mu;
std::unordered_map<std::string, std::shared_ptr<const Dfa>> g_memo;

}  // namespace

Dfa build_dfa(const Expr& e, const std::string& what) {
  // Common fragments (numbers, key literals, string bodies) recur within and across grammars:
  // memoise the automata of small regular expressions process-wide.
  std::string key;
  const bool memo = e.kind != ExprKind::kBytes && expr_key(e, key, false) && key.size() < 4096;
  if (memo) {
    std::lock_guard<std::mutex> lock(g_memo_mu);
    auto it = g_memo.find(key);
    if (it != g_memo.end()) return *it->second;
  }
  Dfa d = build_dfa_uncached(e, what);
  if (memo) {
    std::lock_guard<std::mutex> lock(g_memo_mu);
    const size_t bytes = key.size() + d.next.size() * sizeof(int32_t) + 2 * d.accept.size() + 512;
    if (g_memo.size() < kMaxMemoEntries && g_memo_bytes + bytes <= kMaxMemoBytes &&
        g_memo.emplace(std::move(key), std::make_shared<const Dfa>(d)).second)
      g_memo_bytes += bytes;
  }
  return d;
}

Dfa build_dfa_plain(const Expr& e, const std::string& what) { return build_dfa_nfa(e, what); }

namespace {

// Expressions holding prebuilt automata (string bodies, number ranges, patterns) are combined
// from their parts' automata: sequences by deterministic concatenation where no accepting state
// of the left part shares a byte with the right part's start (else the two parts alone go
// through the NFA), alternatives by the union product, whose states are exactly the subsets the
// NFA construction would reach. A 6,657-state string body in `"..."|null` is not re-determinised.
Dfa build_dfa_uncached(const Expr& e, const std::string& what) {
  if (e.kind == ExprKind::kAutomaton) return *e.dfa;
  if ((e.kind != ExprKind::kSeq && e.kind != ExprKind::kAlt) || !has_automaton(e)) return build_dfa_nfa(e, what);
  if (e.kind == ExprKind::kSeq && !e.children.empty()) {
    // The concat_dfa fold of the loop below, in runs over one table (concat_run_dfa); a part
    // that conflicts is joined through the NFA and starts the next run.
    std::vector<Dfa> parts;
    parts.reserve(e.children.size());
    for (const auto& c : e.children) parts.push_back(build_dfa(*c, what));
    while (true) {
      size_t used = 0;
      Dfa acc = concat_run_dfa(parts, used);
      if (used == parts.size()) return acc;
      std::vector<Dfa> rest;
      rest.reserve(parts.size() - used);
      rest.push_back(build_dfa_nfa(*seq({automaton(std::make_shared<const Dfa>(std::move(acc))),
                                         automaton(std::make_shared<const Dfa>(std::move(parts[used])))}),
                                   what));
      for (size_t i = used + 1; i < parts.size(); ++i) rest.push_back(std::move(parts[i]));
      parts = std::move(rest);
    }
  }
  std::optional<Dfa> acc;
  for (const auto& c : e.children) {
    Dfa part = build_dfa(*c, what);
    if (!acc) {
      acc = std::move(part);
    } else if (e.kind == ExprKind::kAlt) {
      acc = union_dfa(*acc, part, what);
    } else if (std::optional<Dfa> joined = concat_dfa(*acc, part)) {
      acc = std::move(*joined);
    } else {
      acc = build_dfa_nfa(*seq({automaton(std::make_shared<const Dfa>(std::move(*acc))),
                                automaton(std::make_shared<const Dfa>(std::move(part)))}), what);
    }
  }
  return acc ? std::move(*acc) : build_dfa_nfa(e, what);
}

// Subset construction over byte classes (the cuts of every NFA edge range): each subset's
// successors are collected in one pass over its members' edges, one bucket per class.
Dfa build_dfa_nfa(const Expr& e, const std::string& what, bool stop_at_accept) {
  Nfa nfa;
  nfa.what = &what;
  int32_t s0 = nfa.add();
  int32_t end = nfa.build(e, s0);
  std::array<uint8_t, 257> cut{};
  cut[0] = 1;
  for (const auto& es : nfa.edges)
    for (const auto& ed : es) {
      cut[ed.lo] = 1;
      cut[ed.hi + 1] = 1;
    }
  Dfa d;
  int32_t nc = 0;
  for (int b = 0; b < 256; ++b) {
    if (cut[b] && b > 0) ++nc;
    d.byte_class[b] = static_cast<uint8_t>(nc);
  }
  d.n_classes = ++nc;

  std::vector<uint8_t> mark(nfa.eps.size(), 0);
  struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const {
      uint64_t h = 1469598103934665603ull;
      for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
      return h;
    }
  };
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> ids;
  std::vector<std::vector<int32_t>> sets;
  // The sets (stored twice: as the index key and in `sets`) and the table are what grows
  // without bound on nested counted repetition: each is charged before it is kept.
  ScopedBytes work(static_cast<int64_t>(mark.size()));
  std::vector<int32_t> init{s0};
  nfa.closure(init, mark);
  ids[init] = 0;
  sets.push_back(init);
  std::vector<std::vector<int32_t>> buckets(nc);
  for (size_t i = 0; i < sets.size(); ++i) {
    work.grow(nc * sizeof(int32_t) + 1);
    d.next.resize((i + 1) * nc, kDead);
    d.accept.push_back(std::binary_search(sets[i].begin(), sets[i].end(), end));
    if (stop_at_accept && d.accept[i]) continue;  // build_shortest_match_dfa: no longer words
    for (auto& b : buckets) b.clear();
    for (int32_t s : sets[i])
      for (const auto& ed : nfa.edges[s])
        for (int32_t k = d.byte_class[ed.lo]; k <= d.byte_class[ed.hi]; ++k) buckets[k].push_back(ed.to);
    for (int32_t k = 0; k < nc; ++k) {
      budget_tick();
      std::vector<int32_t>& b = buckets[k];
      if (b.empty()) continue;
      std::sort(b.begin(), b.end());
      std::vector<int32_t> move(b.begin(), std::unique(b.begin(), b.end()));
      nfa.closure(move, mark);
      auto it = ids.find(move);
      int32_t id;
      if (it == ids.end()) {
        CHECK_KIND(kUnsupported, static_cast<int32_t>(sets.size()) < kMaxDfaStates)
            << what << " is too complex (more than " << kMaxDfaStates << " automaton states)";
        // A subset state costs the NFA states it holds: that is the determinisation's work,
        // quadratic in the NFA on nested counted repetition ((a{1,30}){1,30}){1,30}).
        budget_states(static_cast<int64_t>(move.size()));
        work.grow(static_cast<int64_t>(2 * (move.size() * sizeof(int32_t) + sizeof(move)) + 32));
        id = static_cast<int32_t>(sets.size());
        ids.emplace(move, id);
        sets.push_back(std::move(move));
      } else {
        id = it->second;
      }
      d.next[i * nc + k] = id;
    }
  }
  return minimize_dfa(trim_dfa(d));
}

}  // namespace

Dfa build_shortest_match_dfa(const Expr& e, const std::string& what) {
  return build_dfa_nfa(e, what, /*stop_at_accept=*/true);
}

}  // namespace deepinfer::grammar
