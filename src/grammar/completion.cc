#include "grammar/completion.h"

#include <algorithm>

namespace deepinfer::grammar {

namespace {

// Bytes tried first when several continue a shortest path: printable ASCII, then the rest.
std::vector<uint8_t> byte_preference() {
  std::vector<uint8_t> order;
  for (int b = 0x20; b < 0x7F; ++b) order.push_back(static_cast<uint8_t>(b));
  for (int b = 0; b < 256; ++b)
    if (b < 0x20 || b >= 0x7F) order.push_back(static_cast<uint8_t>(b));
  return order;
}

void dfa_distances(const Dfa& d, std::vector<int64_t>& dist, std::vector<uint8_t>& next_byte) {
  const int32_t n = d.n_states(), nc = d.n_classes;
  dist.assign(n, kNoPath);
  next_byte.assign(n, 0);
  // Reverse edges over classes, then BFS from the accepting states.
  std::vector<std::vector<int32_t>> rev(n);
  for (int32_t s = 0; s < n; ++s)
    for (int32_t k = 0; k < nc; ++k) {
      const int32_t t = d.next[static_cast<size_t>(s) * nc + k];
      if (t != kDead) rev[t].push_back(s);
    }
  std::vector<int32_t> queue;
  for (int32_t s = 0; s < n; ++s)
    if (d.accept[s]) { dist[s] = 0; queue.push_back(s); }
  for (size_t i = 0; i < queue.size(); ++i)
    for (int32_t p : rev[queue[i]])
      if (dist[p] == kNoPath) { dist[p] = dist[queue[i]] + 1; queue.push_back(p); }
  static const std::vector<uint8_t> order = byte_preference();
  for (int32_t s = 0; s < n; ++s) {
    if (dist[s] == 0 || dist[s] == kNoPath) continue;
    for (uint8_t b : order) {
      const int32_t t = d.at(s, b);
      if (t != kDead && dist[t] == dist[s] - 1) { next_byte[s] = b; break; }
    }
  }
}

}  // namespace

CompletionTables completion_tables(const Grammar& g) {
  CompletionTables t;
  t.dist.resize(g.dfas.size());
  t.next_byte.resize(g.dfas.size());
  for (size_t i = 0; i < g.dfas.size(); ++i) dfa_distances(g.dfas[i], t.dist[i], t.next_byte[i]);
  const int32_t n_rules = g.n_rules();
  t.min_len.assign(n_rules, kNoPath);
  t.suffix.assign(g.elements.size(), kNoPath);
  auto element_len = [&](const Element& e) {
    return e.kind == ElementKind::kDfa ? t.dist[e.arg][g.dfas[e.arg].start] : t.min_len[e.arg];
  };
  // Bellman-Ford style relaxation: lengths only fall, and every rule of a built grammar is
  // productive, so this settles within (rules + 1) rounds.
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < n_rules; ++r)
      for (int32_t a : g.rule_alts[r]) {
        int32_t end = a;
        while (g.elements[end].kind != ElementKind::kEnd) ++end;
        int64_t len = 0;
        t.suffix[end] = 0;
        for (int32_t p = end - 1; p >= a; --p) {
          len = std::min(kNoPath, len + element_len(g.elements[p]));
          t.suffix[p] = len;
        }
        if (len < t.min_len[r]) { t.min_len[r] = len; changed = true; }
      }
  }
  return t;
}

}  // namespace deepinfer::grammar
