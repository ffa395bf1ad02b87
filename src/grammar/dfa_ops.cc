// Operations on built automata, all in byte-class space: tables are n_states x n_classes, never
// 256 wide (a 6,657-state string-length automaton has 14 classes: 0.4 MB instead of 6.8 MB, and
// every pass over it is that much shorter). Class compression, trimming, minimisation, products
// (intersection, difference, union), deterministic concatenation, counted repetition of a
// prefix-free unit.
#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "base/error.h"
#include "grammar/budget.h"
#include "grammar/dfa.h"

namespace deepinfer::grammar {

namespace {

const int32_t* row_of(const Dfa& d, int32_t s) { return &d.next[static_cast<size_t>(s) * d.n_classes]; }

// Joint byte classes of two automata: one class per distinct (class in a, class in b) pair.
// Fills `d.byte_class` / `d.n_classes` and returns one representative byte per joint class.
std::vector<uint8_t> joint_classes(const Dfa& a, const Dfa& b, Dfa& d) {
  std::vector<uint8_t> reps;
  std::vector<int32_t> pair_class(256 * 256, -1);
  for (int c = 0; c < 256; ++c) {
    int32_t& k = pair_class[a.byte_class[c] * 256 + b.byte_class[c]];
    if (k < 0) {
      k = static_cast<int32_t>(reps.size());
      reps.push_back(static_cast<uint8_t>(c));
    }
    d.byte_class[c] = static_cast<uint8_t>(k);
  }
  d.n_classes = static_cast<int32_t>(reps.size());
  return reps;
}

enum class ProductKind { kIntersect, kSubtract, kUnion };

bool has_incoming_to_start(const Dfa& d) {
  for (int32_t t : d.next)
    if (t == d.start) return true;
  return false;
}

// A ∪ B when no byte leaves both starts and neither start is re-entered: one merged start, then
// disjoint copies of both (the product would reach exactly these pairs: (x, dead), (dead, y)).
std::optional<Dfa> disjoint_union(const Dfa& a, const Dfa& b) {
  if (has_incoming_to_start(a) || has_incoming_to_start(b)) return std::nullopt;
  Dfa d;
  const std::vector<uint8_t> reps = joint_classes(a, b, d);
  const int32_t nc = d.n_classes, na = a.n_states(), nb = b.n_states();
  for (uint8_t c : reps)
    if (a.at(a.start, c) != kDead && b.at(b.start, c) != kDead) return std::nullopt;
  // States: 0 the merged start, then a's states (a.start unused), then b's.
  budget_states(na + nb + 1);
  ScopedBytes work(static_cast<int64_t>(na + nb + 1) * nc * static_cast<int64_t>(sizeof(int32_t)));
  d.start = 0;
  d.next.assign(static_cast<size_t>(na + nb + 1) * nc, kDead);
  d.accept.assign(na + nb + 1, 0);
  d.accept[0] = a.accept[a.start] || b.accept[b.start];
  for (int32_t k = 0; k < nc; ++k) {
    const int32_t t = a.at(a.start, reps[k]), u = b.at(b.start, reps[k]);
    d.next[k] = t != kDead ? 1 + t : u != kDead ? 1 + na + u : kDead;
  }
  for (int32_t s = 0; s < na; ++s) {
    d.accept[1 + s] = a.accept[s];
    for (int32_t k = 0; k < nc; ++k) {
      const int32_t t = a.at(s, reps[k]);
      if (t != kDead) d.next[static_cast<size_t>(1 + s) * nc + k] = 1 + t;
    }
  }
  for (int32_t s = 0; s < nb; ++s) {
    d.accept[1 + na + s] = b.accept[s];
    for (int32_t k = 0; k < nc; ++k) {
      const int32_t t = b.at(s, reps[k]);
      if (t != kDead) d.next[static_cast<size_t>(1 + na + s) * nc + k] = 1 + na + t;
    }
  }
  return minimize_dfa(trim_dfa(d));  // trim drops the two unused start copies
}

Dfa product(const Dfa& a, const Dfa& b, ProductKind kind, const std::string& what) {
  if (a.empty()) return kind == ProductKind::kUnion ? b : Dfa{};
  if (b.empty()) return kind == ProductKind::kIntersect ? Dfa{} : a;
  if (kind == ProductKind::kUnion)
    if (std::optional<Dfa> d = disjoint_union(a, b)) return std::move(*d);
  // A component may be kDead: subtracting (b has rejected, a alone decides) or uniting.
  std::unordered_map<uint64_t, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> pairs{{a.start, b.start}};
  auto key = [](int32_t x, int32_t y) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(x)) << 32) | static_cast<uint32_t>(y);
  };
  ids[key(a.start, b.start)] = 0;
  Dfa d;
  const std::vector<uint8_t> reps = joint_classes(a, b, d);
  const int32_t nc = d.n_classes;
  ScopedBytes work;
  for (size_t i = 0; i < pairs.size(); ++i) {
    budget_states(1);
    work.grow(static_cast<int64_t>(nc * sizeof(int32_t) + 3 * sizeof(uint64_t) + 1));
    auto [x, y] = pairs[i];
    d.next.resize((i + 1) * nc, kDead);
    const bool acc_a = x != kDead && a.accept[x], acc_b = y != kDead && b.accept[y];
    d.accept.push_back(kind == ProductKind::kIntersect ? acc_a && acc_b
                       : kind == ProductKind::kSubtract ? acc_a && !acc_b
                                                        : acc_a || acc_b);
    for (int32_t k = 0; k < nc; ++k) {
      const uint8_t c = reps[k];
      const int32_t x2 = x == kDead ? kDead : a.at(x, c);
      const int32_t y2 = y == kDead ? kDead : b.at(y, c);
      if (kind == ProductKind::kUnion ? (x2 == kDead && y2 == kDead)
                                      : (x2 == kDead || (y2 == kDead && kind == ProductKind::kIntersect)))
        continue;
      auto [it, fresh] = ids.emplace(key(x2, y2), static_cast<int32_t>(pairs.size()));
      if (fresh) {
        CHECK_KIND(kUnsupported, static_cast<int32_t>(pairs.size()) < kMaxDfaStates)
            << what << " is too complex (more than " << kMaxDfaStates << " automaton states)";
        pairs.push_back({x2, y2});
      }
      d.next[i * nc + k] = it->second;
    }
  }
  return minimize_dfa(trim_dfa(d));
}

}  // namespace

Dfa finish_dfa(Dfa d) {
  const int32_t n = d.n_states(), nc = d.n_classes;
  if (n > 0 && nc > 1) {
    // Column hashes row by row (cache-friendly), then an exact comparison of equal hashes.
    // (Only a filter: equal hashes are compared exactly, so a cheap multiply-add hash will do.)
    std::vector<uint32_t> h(nc, 0x9E3779B9u);
    for (int32_t s = 0; s < n; ++s) {
      const int32_t* row = row_of(d, s);
      for (int32_t k = 0; k < nc; ++k) h[k] = h[k] * 0x01000193u + static_cast<uint32_t>(row[k]);
    }
    auto same_column = [&](int32_t p, int32_t q) {
      for (int32_t s = 0; s < n; ++s)
        if (row_of(d, s)[p] != row_of(d, s)[q]) return false;
      return true;
    };
    std::vector<int32_t> merged(nc), reps;
    for (int32_t k = 0; k < nc; ++k) {
      int32_t found = -1;
      for (size_t r = 0; r < reps.size() && found < 0; ++r)
        if (h[reps[r]] == h[k] && same_column(reps[r], k)) found = static_cast<int32_t>(r);
      if (found < 0) {
        found = static_cast<int32_t>(reps.size());
        reps.push_back(k);
      }
      merged[k] = found;
    }
    const int32_t nr = static_cast<int32_t>(reps.size());
    if (nr < nc) {
      std::vector<int32_t> next(static_cast<size_t>(n) * nr);
      for (int32_t s = 0; s < n; ++s)
        for (int32_t r = 0; r < nr; ++r) next[static_cast<size_t>(s) * nr + r] = row_of(d, s)[reps[r]];
      d.next.swap(next);
      for (auto& c : d.byte_class) c = static_cast<uint8_t>(merged[c]);
      d.n_classes = nr;
    }
  }
  d.has_out.assign(n, 0);
  for (int32_t s = 0; s < n; ++s)
    for (int32_t k = 0; k < d.n_classes; ++k)
      if (row_of(d, s)[k] != kDead) { d.has_out[s] = 1; break; }
  return d;
}

Dfa trim_dfa(const Dfa& d) {
  const int32_t n = d.n_states(), nc = d.n_classes;
  if (n == 0) return Dfa{};
  // Reverse reachability from accepting states, over the reversed edges in one flat (CSR) array.
  std::vector<int32_t> first(static_cast<size_t>(n) + 1, 0);
  for (int32_t t : d.next)
    if (t != kDead) ++first[t + 1];
  for (int32_t s = 0; s < n; ++s) first[s + 1] += first[s];
  std::vector<int32_t> rev(first[n]);
  {
    std::vector<int32_t> fill(first.begin(), first.end() - 1);
    for (int32_t s = 0; s < n; ++s) {
      const int32_t* r = row_of(d, s);
      for (int32_t k = 0; k < nc; ++k)
        if (r[k] != kDead) rev[fill[r[k]]++] = s;
    }
  }
  std::vector<uint8_t> live(n, 0);
  std::vector<int32_t> work;
  for (int32_t s = 0; s < n; ++s)
    if (d.accept[s]) { live[s] = 1; work.push_back(s); }
  while (!work.empty()) {
    int32_t s = work.back();
    work.pop_back();
    for (int32_t i = first[s]; i < first[s + 1]; ++i)
      if (!live[rev[i]]) { live[rev[i]] = 1; work.push_back(rev[i]); }
  }
  if (!live[d.start]) return Dfa{};
  // Forward reachability over live states, renumbering from the start.
  std::vector<int32_t> id(n, -1);
  std::vector<int32_t> order{d.start};
  id[d.start] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t* r = row_of(d, order[i]);
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
    const int32_t* r = row_of(d, order[i]);
    for (int32_t k = 0; k < nc; ++k) {
      int32_t t = r[k];
      out.next[i * nc + k] = (t != kDead && live[t]) ? id[t] : kDead;
    }
  }
  return finish_dfa(std::move(out));
}

Dfa minimize_dfa(const Dfa& d) {
  const int32_t n = d.n_states(), nc = d.n_classes;
  if (n <= 1 || n > 3000) return d;
  std::vector<int32_t> cls(n);
  for (int32_t s = 0; s < n; ++s) cls[s] = d.accept[s];
  int32_t n_cls = 0;
  ScopedBytes work(static_cast<int64_t>(n) * static_cast<int64_t>(4 * nc + 64));
  // Moore rounds: a state's signature is (its class, its successors' classes); new classes are
  // numbered in order of their first state. Signatures live in one flat array, found through an
  // open-addressing table of state indices (no allocation per state or round).
  const int32_t w = nc + 1;
  std::vector<int32_t> sig(static_cast<size_t>(n) * w);
  std::vector<uint64_t> hash(n);
  size_t cap = 16;
  while (cap < 2 * static_cast<size_t>(n)) cap *= 2;
  std::vector<int32_t> table(cap);
  std::vector<int32_t> next_cls(n);
  for (int round = 0; round < 32; ++round) {
    budget_tick();
    for (int32_t s = 0; s < n; ++s) {
      int32_t* g = &sig[static_cast<size_t>(s) * w];
      const int32_t* r = row_of(d, s);
      g[0] = cls[s];
      uint64_t h = 0x9E3779B97F4A7C15ull ^ static_cast<uint32_t>(cls[s]);
      for (int32_t k = 0; k < nc; ++k) {
        const int32_t c = r[k] == kDead ? -1 : cls[r[k]];
        g[k + 1] = c;
        h = (h ^ static_cast<uint32_t>(c)) * 0x100000001B3ull;
      }
      hash[s] = h ^ (h >> 29);
    }
    std::fill(table.begin(), table.end(), -1);
    int32_t count = 0;
    for (int32_t s = 0; s < n; ++s) {
      const int32_t* g = &sig[static_cast<size_t>(s) * w];
      size_t slot = hash[s] & (cap - 1);
      for (;; slot = (slot + 1) & (cap - 1)) {
        const int32_t rep = table[slot];
        if (rep < 0) {
          table[slot] = s;
          next_cls[s] = count++;
          break;
        }
        if (hash[rep] == hash[s] &&
            std::equal(g, g + w, &sig[static_cast<size_t>(rep) * w])) {
          next_cls[s] = next_cls[rep];
          break;
        }
      }
    }
    cls.swap(next_cls);
    if (count == n_cls) break;
    n_cls = count;
    if (round == 31) return d;  // not converged: keep the unminimised (still correct) automaton
  }
  if (n_cls == n) return d;
  Dfa out;
  out.byte_class = d.byte_class;
  out.n_classes = nc;
  out.next.assign(static_cast<size_t>(n_cls) * nc, kDead);
  out.accept.assign(n_cls, 0);
  for (int32_t s = 0; s < n; ++s) {
    const int32_t c = cls[s];
    out.accept[c] = d.accept[s];
    const int32_t* r = row_of(d, s);
    for (int32_t k = 0; k < nc; ++k) out.next[static_cast<size_t>(c) * nc + k] = r[k] == kDead ? kDead : cls[r[k]];
  }
  out.start = cls[d.start];
  return trim_dfa(out);
}

std::optional<Dfa> concat_dfa(const Dfa& a, const Dfa& b) {
  if (a.empty() || b.empty()) return Dfa{};
  Dfa d;
  const std::vector<uint8_t> reps = joint_classes(a, b, d);
  const int32_t nc = d.n_classes, na = a.n_states(), nb = b.n_states();
  for (int32_t s = 0; s < na; ++s) {
    if (!a.accept[s]) continue;
    for (uint8_t c : reps)
      if (a.at(s, c) != kDead && b.at(b.start, c) != kDead) return std::nullopt;
  }
  budget_states(na + nb);
  ScopedBytes work(static_cast<int64_t>(na + nb) * nc * static_cast<int64_t>(sizeof(int32_t)));
  d.start = a.start;
  d.next.assign(static_cast<size_t>(na + nb) * nc, kDead);
  d.accept.assign(na + nb, 0);
  // Each joint class's column in a and in b (no byte_class lookup per cell).
  std::vector<int32_t> ka(nc), kb(nc), b_start(nc);
  for (int32_t k = 0; k < nc; ++k) {
    ka[k] = a.byte_class[reps[k]];
    kb[k] = b.byte_class[reps[k]];
    b_start[k] = row_of(b, b.start)[kb[k]];
  }
  for (int32_t s = 0; s < na; ++s) {
    d.accept[s] = a.accept[s] && b.accept[b.start];
    const int32_t* r = row_of(a, s);
    int32_t* out = &d.next[static_cast<size_t>(s) * nc];
    for (int32_t k = 0; k < nc; ++k) {
      const int32_t t = r[ka[k]], u = b_start[k];
      if (t != kDead) out[k] = t;
      else if (a.accept[s] && u != kDead) out[k] = na + u;
    }
  }
  for (int32_t s = 0; s < nb; ++s) {
    d.accept[na + s] = b.accept[s];
    const int32_t* r = row_of(b, s);
    int32_t* out = &d.next[static_cast<size_t>(na + s) * nc];
    for (int32_t k = 0; k < nc; ++k) {
      const int32_t t = r[kb[k]];
      if (t != kDead) out[k] = na + t;
    }
  }
  // Both parts are trimmed and B is non-empty, so every state still reaches acceptance (B's
  // start copy may be unreachable, which is harmless).
  return finish_dfa(std::move(d));
}

Dfa concat_run_dfa(const std::vector<Dfa>& parts, size_t& used) {
  ICHECK(!parts.empty());
  used = 1;
  if (parts.size() == 1) return parts[0];
  // Joint byte classes of all parts (numbered by first byte), so no step re-expands the table.
  std::array<uint8_t, 256> cls{};
  int32_t nc = 1;
  std::vector<int16_t> pair_id(256 * 256, -1);
  for (const Dfa& p : parts) {
    int32_t count = 0;
    std::array<uint8_t, 256> refined{};
    for (int c = 0; c < 256; ++c) {
      int16_t& k = pair_id[cls[c] * 256 + p.byte_class[c]];
      if (k < 0) k = static_cast<int16_t>(count++);
      refined[c] = static_cast<uint8_t>(k);
    }
    for (int c = 0; c < 256; ++c) pair_id[cls[c] * 256 + p.byte_class[c]] = -1;
    cls = refined;
    nc = count;
  }
  std::vector<uint8_t> rep(nc);  // one byte per joint class
  for (int c = 255; c >= 0; --c) rep[cls[c]] = static_cast<uint8_t>(c);
  // Part 0 copied in, then each further part appended as concat_dfa(acc, part) would.
  const Dfa& first = parts[0];
  if (first.empty()) {
    used = parts.size();
    return Dfa{};
  }
  Dfa d;
  d.byte_class = cls;
  d.n_classes = nc;
  d.start = first.start;
  int64_t total = 0;
  for (const Dfa& p : parts) total += p.n_states();
  ScopedBytes work(total * nc * static_cast<int64_t>(sizeof(int32_t)) + total);
  d.next.reserve(static_cast<size_t>(total) * nc);
  d.accept.reserve(total);
  auto append = [&](const Dfa& p, int32_t offset) {
    for (int32_t s = 0; s < p.n_states(); ++s) {
      const int32_t* r = row_of(p, s);
      for (int32_t k = 0; k < nc; ++k) {
        const int32_t t = r[p.byte_class[rep[k]]];
        d.next.push_back(t == kDead ? kDead : offset + t);
      }
      d.accept.push_back(p.accept[s]);
    }
  };
  append(first, 0);
  for (; used < parts.size(); ++used) {
    const Dfa& b = parts[used];
    if (b.empty()) {  // concat_dfa: an empty operand empties the rest of the fold
      used = parts.size();
      return Dfa{};
    }
    const int32_t na = d.n_states();
    std::vector<int32_t> b_start(nc);
    for (int32_t k = 0; k < nc; ++k) b_start[k] = row_of(b, b.start)[b.byte_class[rep[k]]];
    bool conflict = false;
    for (int32_t s = 0; s < na && !conflict; ++s) {
      if (!d.accept[s]) continue;
      const int32_t* r = &d.next[static_cast<size_t>(s) * nc];
      for (int32_t k = 0; k < nc; ++k)
        if (r[k] != kDead && b_start[k] != kDead) { conflict = true; break; }
    }
    if (conflict) break;
    budget_states(na + b.n_states());  // what concat_dfa charges for this step
    const bool b_nullable = b.accept[b.start];
    for (int32_t s = 0; s < na; ++s) {
      if (!d.accept[s]) continue;
      int32_t* r = &d.next[static_cast<size_t>(s) * nc];
      for (int32_t k = 0; k < nc; ++k)
        if (r[k] == kDead && b_start[k] != kDead) r[k] = na + b_start[k];
      d.accept[s] = b_nullable;
    }
    append(b, na);
  }
  if (used == 1) return parts[0];  // the first step conflicts: the fold has not touched parts[0]
  return finish_dfa(std::move(d));
}

namespace {

// Length counters of the same unit and bounds recur across schemas (maxLength 255 / 1024):
// process-wide, a few entries, each checked against the exact unit.
struct RepeatMemo {
  Dfa unit;
  int32_t min, max;
  std::shared_ptr<const Dfa> result;
};
constexpr size_t kMaxRepeatMemo = 64;
std::mutex g_repeat_mu;
std::vector<RepeatMemo> g_repeat_memo;

bool same_dfa(const Dfa& a, const Dfa& b) {
  return a.start == b.start && a.n_classes == b.n_classes && a.byte_class == b.byte_class && a.accept == b.accept &&
         a.next == b.next;
}

}  // namespace

Dfa repeat_prefix_free_dfa(const Dfa& unit, int32_t min, int32_t max, const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(g_repeat_mu);
    for (const RepeatMemo& m : g_repeat_memo)
      if (m.min == min && m.max == max && same_dfa(m.unit, unit)) {
        budget_states(m.result->n_states());
        return *m.result;
      }
  }
  Dfa d = repeat_prefix_free_dfa_uncached(unit, min, max, what);
  std::lock_guard<std::mutex> lock(g_repeat_mu);
  if (g_repeat_memo.size() < kMaxRepeatMemo && d.n_states() < 4 * kMaxDfaStates)
    g_repeat_memo.push_back({unit, min, max, std::make_shared<const Dfa>(d)});
  return d;
}

Dfa repeat_prefix_free_dfa_uncached(const Dfa& unit, int32_t min, int32_t max, const std::string& what) {
  ICHECK(!unit.empty());
  for (int32_t s = 0; s < unit.n_states(); ++s)
    ICHECK(!(unit.accept[s] && unit.has_out[s])) << "repeat_prefix_free_dfa: unit is not prefix-free";
  ICHECK(!unit.accept[unit.start]) << "repeat_prefix_free_dfa: unit accepts the empty string";
  // Counter c in [0, top]: completed units, saturating at `top` when unbounded.
  const int32_t top = max == kUnbounded ? min : max;
  const int32_t n_unit = unit.n_states(), nc = unit.n_classes;
  // States (c, u) for u != accepting units; finishing a unit moves to (c + 1, start).
  // Charged before anything is allocated: the counter is the user's number.
  const int64_t n_cells = (static_cast<int64_t>(top) + 1) * n_unit;
  budget_states(n_cells);
  ScopedBytes work(n_cells * static_cast<int64_t>(sizeof(int32_t) + nc * sizeof(int32_t) + 1));
  std::vector<int32_t> id(static_cast<size_t>(n_cells), -1);
  Dfa d;
  d.byte_class = unit.byte_class;
  d.n_classes = nc;
  int32_t n = 0;
  for (int32_t c = 0; c <= top; ++c)
    for (int32_t u = 0; u < n_unit; ++u)
      if (!unit.accept[u]) id[static_cast<size_t>(c) * n_unit + u] = n++;
  CHECK_KIND(kUnsupported, n < 4 * kMaxDfaStates) << what << " is too complex (" << n << " automaton states)";
  d.next.assign(static_cast<size_t>(n) * nc, kDead);
  d.accept.assign(n, 0);
  for (int32_t c = 0; c <= top; ++c)
    for (int32_t u = 0; u < n_unit; ++u) {
      const int32_t me = id[static_cast<size_t>(c) * n_unit + u];
      if (me < 0) continue;
      if (u == unit.start) d.accept[me] = c >= min;
      const int32_t* r = row_of(unit, u);
      for (int32_t k = 0; k < nc; ++k) {
        const int32_t v = r[k];
        if (v == kDead) continue;
        int32_t& out = d.next[static_cast<size_t>(me) * nc + k];
        if (unit.accept[v]) {
          int32_t c2 = c + 1;
          if (c2 > top) {
            if (max != kUnbounded) continue;
            c2 = top;
          }
          out = id[static_cast<size_t>(c2) * n_unit + unit.start];
        } else {
          out = id[static_cast<size_t>(c) * n_unit + v];
        }
      }
    }
  d.start = id[unit.start];
  // Starting a unit at the maximum count leads nowhere: trim removes those states.
  return trim_dfa(finish_dfa(std::move(d)));
}

Dfa intersect_dfa(const Dfa& a, const Dfa& b, const std::string& what) {
  return product(a, b, ProductKind::kIntersect, what);
}

Dfa subtract_dfa(const Dfa& a, const Dfa& b, const std::string& what) {
  return product(a, b, ProductKind::kSubtract, what);
}

Dfa union_dfa(const Dfa& a, const Dfa& b, const std::string& what) {
  return product(a, b, ProductKind::kUnion, what);
}

}  // namespace deepinfer::grammar
