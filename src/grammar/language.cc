#include "grammar/language.h"

#include <vector>

#include "base/error.h"
#include "grammar/budget.h"

namespace deepinfer::grammar {
namespace {

// Some accepting state is reachable from the start (the automaton's language is not empty).
bool dfa_productive(const Dfa& d) {
  if (d.empty()) return false;
  std::vector<uint8_t> seen(static_cast<size_t>(d.n_states()), 0);
  std::vector<int32_t> work{d.start};
  seen[static_cast<size_t>(d.start)] = 1;
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    if (d.accept[static_cast<size_t>(s)]) return true;
    for (int32_t c = 0; c < d.n_classes; ++c) {
      const int32_t t = d.next[static_cast<size_t>(s) * d.n_classes + c];
      if (t != kDead && !seen[static_cast<size_t>(t)]) {
        seen[static_cast<size_t>(t)] = 1;
        work.push_back(t);
      }
    }
  }
  return false;
}

}  // namespace

bool language_is_empty(const Grammar& g) {
  if (g.root < 0 || g.root >= g.n_rules()) return true;
  std::vector<uint8_t> dfa_ok(g.dfas.size());
  for (size_t i = 0; i < g.dfas.size(); ++i) dfa_ok[i] = dfa_productive(g.dfas[i]);
  std::vector<uint8_t> rule_ok(static_cast<size_t>(g.n_rules()), 0);
  auto alt_ok = [&](int32_t p) {
    for (; g.elements[p].kind != ElementKind::kEnd; ++p) {
      const Element& el = g.elements[p];
      if (el.kind == ElementKind::kDfa ? !dfa_ok[el.arg] : !rule_ok[el.arg]) return false;
    }
    return true;
  };
  for (bool changed = true; changed && !rule_ok[g.root];) {
    changed = false;
    for (int32_t r = 0; r < g.n_rules(); ++r) {
      budget_tick();
      if (rule_ok[r]) continue;
      for (int32_t a : g.rule_alts[r]) {
        if (alt_ok(a)) {
          rule_ok[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  return !rule_ok[g.root];
}

void check_language_nonempty(const Grammar& g, const std::string& what) {
  CHECK(!language_is_empty(g)) << what << " matches no string (its language is empty: the constraint "
                                          "is unsatisfiable), so no output could satisfy it";
}

std::array<bool, 256> grammar_bytes(const Grammar& g) {
  std::array<bool, 256> used{};
  for (const Dfa& d : g.dfas) {
    for (int32_t s = 0; s < d.n_states(); ++s) {
      for (int b = 0; b < 256; ++b) {
        if (d.at(s, static_cast<uint8_t>(b)) != kDead) used[b] = true;
      }
    }
  }
  return used;
}

}  // namespace deepinfer::grammar
