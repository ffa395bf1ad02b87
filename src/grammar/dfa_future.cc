// Bounded future equivalence of DFA states (dfa_future.h).
#include "grammar/dfa_future.h"

#include <unordered_set>
#include <utility>
#include <vector>

namespace deepinfer::grammar {

namespace {

// What the walk sees of a state: dead, or live with its accept / has_out bits.
int32_t kind_of(const Dfa& d, int32_t s) { return s == kDead ? 0 : 1 + d.accept[s] + 2 * d.has_out[s]; }

uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001B3ull; }

}  // namespace

uint64_t future_signature(const Dfa& d, int32_t s) {
  uint64_t h = mix(0xCBF29CE484222325ull, static_cast<uint64_t>(kind_of(d, s)));
  if (s == kDead) return h;
  const int32_t nc = d.n_classes;
  for (int32_t c = 0; c < nc; ++c) {
    const int32_t t = d.next[static_cast<size_t>(s) * nc + c];
    h = mix(h, static_cast<uint64_t>(kind_of(d, t)));
    if (t == kDead) continue;
    for (int32_t c2 = 0; c2 < nc; ++c2) h = mix(h, static_cast<uint64_t>(kind_of(d, d.next[static_cast<size_t>(t) * nc + c2])));
  }
  return h;
}

bool same_bounded_future(const Dfa& d, int32_t a, int32_t b, int depth, int64_t max_pairs) {
  if (kind_of(d, a) != kind_of(d, b)) return false;
  if (a == b || a == kDead) return true;
  const int32_t nc = d.n_classes;
  auto key = [](int32_t x, int32_t y) {
    if (x > y) std::swap(x, y);
    return (static_cast<uint64_t>(static_cast<uint32_t>(x)) << 32) | static_cast<uint32_t>(y);
  };
  std::unordered_set<uint64_t> seen{key(a, b)};
  std::vector<std::pair<int32_t, int32_t>> level{{a, b}}, next;
  for (int j = 0; j < depth && !level.empty(); ++j) {
    next.clear();
    for (auto [x, y] : level) {
      const int32_t* rx = d.next.data() + static_cast<size_t>(x) * nc;
      const int32_t* ry = d.next.data() + static_cast<size_t>(y) * nc;
      for (int32_t c = 0; c < nc; ++c) {
        const int32_t u = rx[c], v = ry[c];
        if (u == v) continue;  // the same state (or both dead) from here on
        if (kind_of(d, u) != kind_of(d, v)) return false;
        if (!seen.insert(key(u, v)).second) continue;
        if (static_cast<int64_t>(seen.size()) > max_pairs) return false;
        next.push_back({u, v});
      }
    }
    level.swap(next);
  }
  return true;
}

}  // namespace deepinfer::grammar
