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

  void closure(std::vector<int32_t>& set, std::vector<uint8_t>& mark) const {
    std::vector<int32_t> work(set);
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

// Compresses a wide table into byte classes (bytes whose columns agree in every state) and
// computes has_out.
Dfa finish(Dfa d) {
  const int32_t n = d.n_states();
  if (d.n_classes == 256 && n > 0) {
    // Column signatures, row by row (cache-friendly); 64-bit mixed hashes (collisions between
    // 256 columns are astronomically unlikely).
    std::array<uint64_t, 256> h;
    h.fill(0x9E3779B97F4A7C15ull);
    for (int32_t s = 0; s < n; ++s) {
      const int32_t* row = &d.next[static_cast<size_t>(s) * 256];
      for (int b = 0; b < 256; ++b) {
        uint64_t x = h[b] ^ (static_cast<uint64_t>(static_cast<uint32_t>(row[b])) + 0x632BE59BD9B4E019ull * (s + 1));
        x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 29;
        h[b] = x;
      }
    }
    std::array<uint8_t, 256> cls{};
    std::vector<int> reps;
    for (int b = 0; b < 256; ++b) {
      int found = -1;
      for (size_t k = 0; k < reps.size() && found < 0; ++k)
        if (h[reps[k]] == h[b]) found = static_cast<int>(k);
      if (found < 0) { found = static_cast<int>(reps.size()); reps.push_back(b); }
      cls[b] = static_cast<uint8_t>(found);
    }
    const int32_t nc = static_cast<int32_t>(reps.size());
    std::vector<int32_t> next(static_cast<size_t>(n) * nc);
    for (int32_t s = 0; s < n; ++s)
      for (int32_t k = 0; k < nc; ++k) next[static_cast<size_t>(s) * nc + k] = d.next[static_cast<size_t>(s) * 256 + reps[k]];
    d.next.swap(next);
    d.byte_class = cls;
    d.n_classes = nc;
  }
  d.has_out.assign(n, 0);
  for (int32_t s = 0; s < n; ++s)
    for (int32_t k = 0; k < d.n_classes; ++k)
      if (d.next[static_cast<size_t>(s) * d.n_classes + k] != kDead) { d.has_out[s] = 1; break; }
  return d;
}

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
  for (uint8_t c : byte_class) mix(c);
  for (int32_t v : next) mix(static_cast<uint32_t>(v));
  for (uint8_t a : accept) mix(a + 7);
  return h;
}

namespace {

// A·B without an NFA when deterministic: no accepting state of A has a live byte that B's
// start also uses. Returns an empty optional on conflict.
std::optional<Dfa> concat_dfa(const Dfa& a, const Dfa& b) {
  if (a.empty() || b.empty()) return Dfa{};
  const int32_t na = a.n_states();
  for (int32_t s = 0; s < na; ++s) {
    if (!a.accept[s]) continue;
    for (int c = 0; c < 256; ++c)
      if (a.at(s, c) != kDead && b.at(b.start, c) != kDead) return std::nullopt;
  }
  budget_states(na + b.n_states());
  ScopedBytes work(static_cast<int64_t>(na + b.n_states()) * 256 * static_cast<int64_t>(sizeof(int32_t)));
  Dfa d;
  d.start = a.start;
  d.next.assign(static_cast<size_t>(na + b.n_states()) * 256, kDead);
  d.accept.assign(na + b.n_states(), 0);
  for (int32_t s = 0; s < na; ++s) {
    d.accept[s] = a.accept[s] && b.accept[b.start];
    for (int c = 0; c < 256; ++c) {
      int32_t t = a.at(s, c);
      if (t != kDead) d.at(s, c) = t;
      else if (a.accept[s] && b.at(b.start, c) != kDead) d.at(s, c) = na + b.at(b.start, c);
    }
  }
  for (int32_t s = 0; s < b.n_states(); ++s) {
    d.accept[na + s] = b.accept[s];
    for (int c = 0; c < 256; ++c) {
      int32_t t = b.at(s, c);
      if (t != kDead) d.at(na + s, c) = na + t;
    }
  }
  // Both parts are trimmed and B is non-empty, so every state still reaches acceptance (B's
  // start copy may be unreachable, which is harmless).
  return finish(std::move(d));
}

Dfa build_dfa_nfa(const Expr& e, const std::string& what, bool stop_at_accept = false);
Dfa build_dfa_uncached(const Expr& e, const std::string& what);

}  // namespace

namespace {

// Structural key of a regular expression without automata (for the process-wide memo).
bool expr_key(const Expr& e, std::string& out) {
  out += static_cast<char>('A' + static_cast<int>(e.kind));
  switch (e.kind) {
    case ExprKind::kAutomaton: case ExprKind::kRef: return false;
    case ExprKind::kClass:
      for (const auto& r : e.ranges) { out += std::to_string(r.first); out += '-'; out += std::to_string(r.second); out += ','; }
      break;
    case ExprKind::kBytes: out += std::to_string(e.bytes.size()); out += ':'; out += e.bytes; break;
    case ExprKind::kRepeat: out += std::to_string(e.min); out += ','; out += std::to_string(e.max); break;
    default: break;
  }
  out += '(';
  for (const auto& c : e.children)
    if (!expr_key(*c, out)) return false;
  out += ')';
  return true;
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
  const bool memo = e.kind != ExprKind::kBytes && expr_key(e, key) && key.size() < 4096;
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

namespace {
Dfa build_dfa_uncached(const Expr& e, const std::string& what) {
  // Sequences holding prebuilt automata: concatenate piecewise when deterministic (cheap), so a
  // large automaton is not re-determinised.
  if (e.kind == ExprKind::kSeq) {
    bool has_automaton = false;
    for (const auto& c : e.children) has_automaton = has_automaton || c->kind == ExprKind::kAutomaton;
    if (has_automaton) {
      std::optional<Dfa> acc;
      for (const auto& c : e.children) {
        Dfa part = c->kind == ExprKind::kAutomaton ? *c->dfa : build_dfa_nfa(*c, what);
        if (!acc) { acc = std::move(part); continue; }
        acc = concat_dfa(*acc, part);
        if (!acc) return build_dfa_nfa(e, what);
      }
      return *acc;
    }
  }
  if (e.kind == ExprKind::kAutomaton) return *e.dfa;
  return build_dfa_nfa(e, what);
}
}  // namespace

namespace {

Dfa build_dfa_nfa(const Expr& e, const std::string& what, bool stop_at_accept) {
  Nfa nfa;
  nfa.what = &what;
  int32_t s0 = nfa.add();
  int32_t end = nfa.build(e, s0);
  // Byte equivalence classes: boundaries of every edge range.
  std::array<uint8_t, 257> cut{};
  cut[0] = 1;
  for (const auto& es : nfa.edges)
    for (const auto& ed : es) {
      cut[ed.lo] = 1;
      cut[ed.hi + 1] = 1;
    }
  std::vector<int> reps;
  for (int b = 0; b < 256; ++b)
    if (cut[b]) reps.push_back(b);

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
  // The sets (stored twice: as the index key and in `sets`) and the wide table are what grows
  // without bound on nested counted repetition: each is charged before it is kept.
  ScopedBytes work(static_cast<int64_t>(mark.size()));
  Dfa d;
  std::vector<int32_t> init{s0};
  nfa.closure(init, mark);
  ids[init] = 0;
  sets.push_back(init);
  for (size_t i = 0; i < sets.size(); ++i) {
    work.grow(256 * sizeof(int32_t) + 1);
    d.next.resize((i + 1) * 256, kDead);
    d.accept.push_back(std::binary_search(sets[i].begin(), sets[i].end(), end));
    if (stop_at_accept && d.accept[i]) continue;  // build_shortest_match_dfa: no longer words
    for (size_t k = 0; k < reps.size(); ++k) {
      budget_tick();
      int lo = reps[k], hi = (k + 1 < reps.size()) ? reps[k + 1] - 1 : 255;
      std::vector<int32_t> move;
      for (int32_t s : sets[i])
        for (const auto& ed : nfa.edges[s])
          if (ed.lo <= lo && lo <= ed.hi && !mark[ed.to]) {
            mark[ed.to] = 1;
            move.push_back(ed.to);
          }
      for (int32_t s : move) mark[s] = 0;
      if (move.empty()) continue;
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
      for (int b = lo; b <= hi; ++b) d.at(i, b) = id;
    }
  }
  return minimize_dfa(trim_dfa(d));
}

}  // namespace

Dfa build_shortest_match_dfa(const Expr& e, const std::string& what) {
  return build_dfa_nfa(e, what, /*stop_at_accept=*/true);
}

Dfa trim_dfa(const Dfa& d) {
  // Works on byte classes; the result keeps d's classes (wide inputs are compressed by finish()).
  const int32_t n = d.n_states(), nc = d.n_classes;
  if (n == 0) return Dfa{};
  auto row = [&](int32_t s) { return &d.next[static_cast<size_t>(s) * nc]; };
  // Reverse reachability from accepting states.
  std::vector<std::vector<int32_t>> rev(n);
  for (int32_t s = 0; s < n; ++s) {
    const int32_t* r = row(s);
    for (int32_t k = 0; k < nc; ++k) {
      int32_t t = r[k];
      if (t != kDead && (rev[t].empty() || rev[t].back() != s)) rev[t].push_back(s);
    }
  }
  std::vector<uint8_t> live(n, 0);
  std::vector<int32_t> work;
  for (int32_t s = 0; s < n; ++s)
    if (d.accept[s]) { live[s] = 1; work.push_back(s); }
  while (!work.empty()) {
    int32_t s = work.back();
    work.pop_back();
    for (int32_t p : rev[s])
      if (!live[p]) { live[p] = 1; work.push_back(p); }
  }
  if (!live[d.start]) return Dfa{};
  // Forward reachability over live states, renumbering from the start.
  std::vector<int32_t> id(n, -1);
  std::vector<int32_t> order{d.start};
  id[d.start] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t* r = row(order[i]);
    for (int32_t k = 0; k < nc; ++k) {
      int32_t t = r[k];
      if (t != kDead && live[t] && id[t] < 0) {
        id[t] = static_cast<int32_t>(order.size());
        order.push_back(t);
      }
    }
  }
  Dfa out;
  out.start = 0;
  out.byte_class = d.byte_class;
  out.n_classes = nc;
  out.next.assign(order.size() * nc, kDead);
  out.accept.resize(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    out.accept[i] = d.accept[order[i]];
    const int32_t* r = row(order[i]);
    for (int32_t k = 0; k < nc; ++k) {
      int32_t t = r[k];
      out.next[i * nc + k] = (t != kDead && live[t]) ? id[t] : kDead;
    }
  }
  return finish(std::move(out));
}

Dfa minimize_dfa(const Dfa& d) {
  int32_t n = d.n_states();
  if (n <= 1) return d;
  if (n > 3000) return d;
  // Bytes whose columns agree in every state behave alike: sign states over one byte per class.
  std::vector<int> reps;
  for (int b = 0; b < 256; ++b) {
    bool same_as_prev = b > 0;
    for (int32_t s = 0; s < n && same_as_prev; ++s)
      same_as_prev = d.at(s, b) == d.at(s, b - 1);
    if (!same_as_prev) reps.push_back(b);
  }
  std::vector<int32_t> cls(n);
  for (int32_t s = 0; s < n; ++s) cls[s] = d.accept[s];
  int32_t n_cls = 0;
  ScopedBytes work(static_cast<int64_t>(n) * static_cast<int64_t>(4 * reps.size() + 64));
  for (int round = 0; round < 32; ++round) {
    budget_tick();
    std::unordered_map<std::string, int32_t> sig_ids;
    std::vector<int32_t> next_cls(n);
    std::string sig;
    for (int32_t s = 0; s < n; ++s) {
      sig.assign(reinterpret_cast<const char*>(&cls[s]), 4);
      for (int b : reps) {
        int32_t t = d.at(s, b);
        int32_t c = t == kDead ? -1 : cls[t];
        sig.append(reinterpret_cast<const char*>(&c), 4);
      }
      auto [it, fresh] = sig_ids.emplace(sig, static_cast<int32_t>(sig_ids.size()));
      next_cls[s] = it->second;
    }
    int32_t count = static_cast<int32_t>(sig_ids.size());
    cls.swap(next_cls);
    if (count == n_cls) break;
    n_cls = count;
    if (round == 31) return d;  // not converged: keep the unminimised (still correct) automaton
  }
  if (n_cls == n) return d;
  Dfa out;
  out.next.assign(static_cast<size_t>(n_cls) * 256, kDead);
  out.accept.assign(n_cls, 0);
  for (int32_t s = 0; s < n; ++s) {
    int32_t c = cls[s];
    out.accept[c] = d.accept[s];
    for (int b = 0; b < 256; ++b) {
      int32_t t = d.at(s, b);
      out.at(c, b) = t == kDead ? kDead : cls[t];
    }
  }
  out.start = cls[d.start];
  return trim_dfa(out);
}

namespace {

Dfa product(const Dfa& a, const Dfa& b, bool subtract, const std::string& what) {
  if (a.empty()) return Dfa{};
  if (b.empty()) return subtract ? a : Dfa{};
  // State of b may be kDead (only when subtracting: b has rejected, a alone decides).
  std::unordered_map<uint64_t, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> pairs{{a.start, b.start}};
  auto key = [](int32_t x, int32_t y) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(x)) << 32) | static_cast<uint32_t>(y);
  };
  ids[key(a.start, b.start)] = 0;
  // Byte classes of the product: pairs of the operands' classes.
  Dfa d;
  std::vector<int> reps;
  {
    std::unordered_map<int, int> pair_class;
    for (int c = 0; c < 256; ++c) {
      int k = a.byte_class[c] * 256 + b.byte_class[c];
      auto [it, fresh] = pair_class.emplace(k, static_cast<int>(reps.size()));
      if (fresh) reps.push_back(c);
      d.byte_class[c] = static_cast<uint8_t>(it->second);
    }
    d.n_classes = static_cast<int32_t>(reps.size());
  }
  const int32_t nc = d.n_classes;
  ScopedBytes work;
  for (size_t i = 0; i < pairs.size(); ++i) {
    budget_states(1);
    work.grow(static_cast<int64_t>(nc * sizeof(int32_t) + 3 * sizeof(uint64_t) + 1));
    auto [x, y] = pairs[i];
    d.next.resize((i + 1) * nc, kDead);
    bool acc_b = y != kDead && b.accept[y];
    d.accept.push_back(a.accept[x] && (subtract ? !acc_b : acc_b));
    for (int32_t kc = 0; kc < nc; ++kc) {
      const uint8_t c = static_cast<uint8_t>(reps[kc]);
      int32_t x2 = a.at(x, c);
      if (x2 == kDead) continue;
      int32_t y2 = y == kDead ? kDead : b.at(y, c);
      if (y2 == kDead && !subtract) continue;
      auto [it, fresh] = ids.emplace(key(x2, y2), static_cast<int32_t>(pairs.size()));
      if (fresh) {
        CHECK_KIND(kUnsupported, static_cast<int32_t>(pairs.size()) < kMaxDfaStates)
            << what << " is too complex (more than " << kMaxDfaStates << " automaton states)";
        pairs.push_back({x2, y2});
      }
      d.next[i * nc + kc] = it->second;
    }
  }
  return minimize_dfa(trim_dfa(d));
}

}  // namespace

Dfa repeat_prefix_free_dfa(const Dfa& unit, int32_t min, int32_t max, const std::string& what) {
  ICHECK(!unit.empty());
  for (int32_t s = 0; s < unit.n_states(); ++s)
    ICHECK(!(unit.accept[s] && unit.has_out[s])) << "repeat_prefix_free_dfa: unit is not prefix-free";
  ICHECK(!unit.accept[unit.start]) << "repeat_prefix_free_dfa: unit accepts the empty string";
  // Counter c in [0, top]: completed units, saturating at `top` when unbounded.
  const int32_t top = max == kUnbounded ? min : max;
  const int32_t n_unit = unit.n_states();
  // States (c, u) for u != accepting units; finishing a unit moves to (c + 1, start).
  // Charged before anything is allocated: the counter is the user's number.
  const int64_t n_cells = (static_cast<int64_t>(top) + 1) * n_unit;
  budget_states(n_cells);
  ScopedBytes work(n_cells * static_cast<int64_t>(sizeof(int32_t) + 256 * sizeof(int32_t) + 1));
  std::vector<int32_t> id(static_cast<size_t>(n_cells), -1);
  Dfa d;
  int32_t n = 0;
  for (int32_t c = 0; c <= top; ++c)
    for (int32_t u = 0; u < n_unit; ++u)
      if (!unit.accept[u]) id[static_cast<size_t>(c) * n_unit + u] = n++;
  CHECK_KIND(kUnsupported, n < 4 * kMaxDfaStates) << what << " is too complex (" << n << " automaton states)";
  d.next.assign(static_cast<size_t>(n) * 256, kDead);
  d.accept.assign(n, 0);
  for (int32_t c = 0; c <= top; ++c)
    for (int32_t u = 0; u < n_unit; ++u) {
      int32_t me = id[static_cast<size_t>(c) * n_unit + u];
      if (me < 0) continue;
      if (u == unit.start) d.accept[me] = c >= min;
      for (int b = 0; b < 256; ++b) {
        int32_t v = unit.at(u, b);
        if (v == kDead) continue;
        if (unit.accept[v]) {
          int32_t c2 = c + 1;
          if (c2 > top) {
            if (max != kUnbounded) continue;
            c2 = top;
          }
          d.at(me, b) = id[static_cast<size_t>(c2) * n_unit + unit.start];
        } else {
          d.at(me, b) = id[static_cast<size_t>(c) * n_unit + v];
        }
      }
    }
  d.start = id[unit.start];
  // Starting a unit at the maximum count leads nowhere: trim removes those states.
  return trim_dfa(finish(std::move(d)));
}

Dfa intersect_dfa(const Dfa& a, const Dfa& b, const std::string& what) {
  return product(a, b, false, what);
}

Dfa subtract_dfa(const Dfa& a, const Dfa& b, const std::string& what) {
  return product(a, b, true, what);
}

}  // namespace deepinfer::grammar
