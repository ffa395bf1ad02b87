#include "grammar/grammar.h"

#include <algorithm>
#include <functional>
#include <sstream>

#include "base/error.h"
#include "grammar/budget.h"

namespace deepinfer::grammar {

std::string Grammar::to_string() const {
  std::ostringstream os;
  for (int32_t r = 0; r < n_rules(); ++r) {
    os << rule_names[r] << " ::=";
    if (rule_alts[r].empty()) os << " <nothing>";
    for (size_t a = 0; a < rule_alts[r].size(); ++a) {
      if (a) os << " |";
      int32_t p = rule_alts[r][a];
      if (elements[p].kind == ElementKind::kEnd) os << " ''";
      for (; elements[p].kind != ElementKind::kEnd; ++p) {
        if (elements[p].kind == ElementKind::kRef) os << " " << rule_names[elements[p].arg];
        else os << " dfa" << elements[p].arg << "(" << dfas[elements[p].arg].n_states() << ")";
      }
    }
    os << "\n";
  }
  return os.str();
}

int32_t GrammarBuilder::declare(std::string name) {
  names_.push_back(std::move(name));
  bodies_.push_back(nullptr);
  return static_cast<int32_t>(bodies_.size()) - 1;
}

void GrammarBuilder::define(int32_t rule, ExprPtr body) {
  ICHECK(rule >= 0 && rule < n_rules());
  CHECK(!bodies_[rule]) << what_ << ": rule '" << names_[rule] << "' defined twice";
  bodies_[rule] = std::move(body);
}

int32_t GrammarBuilder::new_rule(std::string name) {
  // Counted repetition of sub-rules becomes one rule per count (aux_rule): a rule is a state.
  budget_states(1);
  ScopedBytes(static_cast<int64_t>(sizeof(std::vector<int32_t>) + name.size() + 64)).keep();
  g_.rule_alts.emplace_back();
  g_.rule_names.push_back(std::move(name));
  return g_.n_rules() - 1;
}

int32_t GrammarBuilder::add_dfa(const ExprPtr& e, bool& empty_language) {
  // The same value expression (a shared string body in `"..."|null`) recurs under many rules:
  // its automaton is built once per compilation (the rule bodies keep every automaton alive).
  std::string key;
  const bool keyed = expr_key(*e, key, /*automata_by_address=*/true);
  if (keyed) {
    auto it = expr_dfa_ids_.find(key);
    if (it != expr_dfa_ids_.end()) {
      if (it->second < 0) empty_language = true;
      return it->second;
    }
  }
  const int32_t id = add_dfa(build_dfa(*e, what_));
  if (id < 0) empty_language = true;
  if (keyed) expr_dfa_ids_.emplace(std::move(key), id);
  return id;
}

int32_t GrammarBuilder::add_dfa(Dfa d) {
  if (d.empty()) return -1;
  uint64_t fp = d.fingerprint();
  for (int32_t id : dfa_ids_[fp])
    if (g_.dfas[id].next == d.next && g_.dfas[id].accept == d.accept && g_.dfas[id].start == d.start &&
        g_.dfas[id].byte_class == d.byte_class)
      return id;
  // The grammar keeps its automata: charged for the rest of the compilation.
  ScopedBytes(static_cast<int64_t>(d.next.size() * sizeof(int32_t) + 2 * d.accept.size() + sizeof(Dfa))).keep();
  g_.dfas.push_back(std::move(d));
  int32_t id = static_cast<int32_t>(g_.dfas.size()) - 1;
  dfa_ids_[fp].push_back(id);
  return id;
}

int32_t GrammarBuilder::aux_rule(const ExprPtr& e) {
  auto it = aux_rules_.find(e.get());
  if (it != aux_rules_.end()) return it->second;
  int32_t r = new_rule("aux" + std::to_string(g_.n_rules()));
  aux_rules_[e.get()] = r;
  std::vector<std::vector<Element>> alts;
  if (e->kind == ExprKind::kRepeat) {
    const ExprPtr& x = e->children[0];
    std::vector<ExprPtr> mandatory(e->min, x);
    ExprPtr tail;
    if (e->max == kUnbounded) {
      // S ::= x S | ''  (tail recursion: stacks do not grow)
      int32_t s = new_rule("star" + std::to_string(g_.n_rules()));
      std::vector<std::vector<Element>> salts;
      bool empty = false;
      auto body = lower_seq(seq({x, ref(-2 - s)}), empty);
      if (!empty) salts.push_back(body);
      salts.push_back({});
      for (auto& a : salts) {
        g_.rule_alts[s].push_back(static_cast<int32_t>(g_.elements.size()));
        g_.elements.insert(g_.elements.end(), a.begin(), a.end());
        g_.elements.push_back({ElementKind::kEnd, 0});
      }
      tail = ref(-2 - s);
    } else {
      // O_k ::= x O_{k-1} | ''
      ExprPtr prev = epsilon();
      for (int32_t k = 1; k <= e->max - e->min; ++k) {
        int32_t o = new_rule("opt" + std::to_string(g_.n_rules()));
        bool empty = false;
        auto body = lower_seq(seq({x, prev}), empty);
        std::vector<std::vector<Element>> oalts;
        if (!empty) oalts.push_back(body);
        oalts.push_back({});
        for (auto& a : oalts) {
          g_.rule_alts[o].push_back(static_cast<int32_t>(g_.elements.size()));
          g_.elements.insert(g_.elements.end(), a.begin(), a.end());
          g_.elements.push_back({ElementKind::kEnd, 0});
        }
        prev = ref(-2 - o);
      }
      tail = prev;
    }
    mandatory.push_back(tail);
    alts = lower_alts(seq(std::move(mandatory)));
  } else {
    alts = lower_alts(e);
  }
  for (auto& a : alts) {
    g_.rule_alts[r].push_back(static_cast<int32_t>(g_.elements.size()));
    g_.elements.insert(g_.elements.end(), a.begin(), a.end());
    g_.elements.push_back({ElementKind::kEnd, 0});
  }
  return r;
}

// Rule references: ids >= 0 are user rules (lowered 1:1 into grammar rules of the same id);
// ids <= -2 are already-lowered internal rules (id = -2 - rule).
std::vector<Element> GrammarBuilder::lower_seq(const ExprPtr& e, bool& empty_language) {
  std::vector<Element> out;
  budget_tick();
  if (e->kind == ExprKind::kNothing) { empty_language = true; return out; }
  if (!has_refs(*e)) {
    if (e->kind == ExprKind::kEpsilon) return out;
    int32_t d = add_dfa(e, empty_language);
    if (d >= 0) out.push_back({ElementKind::kDfa, d});
    return out;
  }
  if (e->kind == ExprKind::kRef) {
    out.push_back({ElementKind::kRef, e->rule >= 0 ? e->rule : -2 - e->rule});
    return out;
  }
  if (e->kind != ExprKind::kSeq) {
    out.push_back({ElementKind::kRef, aux_rule(e)});
    return out;
  }
  std::vector<ExprPtr> pending;
  auto flush = [&]() {
    if (pending.empty()) return;
    ExprPtr s = seq(pending);
    pending.clear();
    if (s->kind == ExprKind::kEpsilon) return;
    int32_t d = add_dfa(s, empty_language);
    if (d >= 0) out.push_back({ElementKind::kDfa, d});
  };
  for (const auto& c : e->children) {
    if (!has_refs(*c)) { pending.push_back(c); continue; }
    flush();
    auto sub = lower_seq(c, empty_language);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  flush();
  return out;
}

std::vector<std::vector<Element>> GrammarBuilder::lower_alts(const ExprPtr& e) {
  std::vector<std::vector<Element>> alts;
  std::vector<ExprPtr> branches;
  if (e->kind == ExprKind::kAlt && has_refs(*e)) branches = e->children;
  else branches = {e};
  for (const auto& b : branches) {
    bool empty = false;
    auto a = lower_seq(b, empty);
    if (!empty) alts.push_back(std::move(a));
  }
  return alts;
}

Grammar GrammarBuilder::build(int32_t root) {
  g_ = Grammar{};
  dfa_ids_.clear();
  expr_dfa_ids_.clear();
  for (int32_t r = 0; r < n_rules(); ++r) new_rule(names_[r]);
  for (int32_t r = 0; r < n_rules(); ++r) {
    CHECK(bodies_[r] != nullptr) << what_ << ": rule '" << names_[r] << "' is used but not defined";
    for (auto& a : lower_alts(bodies_[r])) {
      g_.rule_alts[r].push_back(static_cast<int32_t>(g_.elements.size()));
      g_.elements.insert(g_.elements.end(), a.begin(), a.end());
      g_.elements.push_back({ElementKind::kEnd, 0});
    }
  }
  g_.root = root;
  const int32_t n = g_.n_rules();
  auto for_alt = [&](int32_t start, const std::function<void(int32_t)>& f) {
    for (int32_t p = start; g_.elements[p].kind != ElementKind::kEnd; ++p) f(p);
  };

  // Productive rules; drop alternatives that reference unproductive ones.
  std::vector<uint8_t> productive(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < n; ++r) {
      budget_tick();
      if (productive[r]) continue;
      for (int32_t a : g_.rule_alts[r]) {
        bool ok = true;
        for_alt(a, [&](int32_t p) {
          if (g_.elements[p].kind == ElementKind::kRef && !productive[g_.elements[p].arg]) ok = false;
        });
        if (ok) { productive[r] = 1; changed = true; break; }
      }
    }
  }
  for (int32_t r = 0; r < n; ++r) {
    auto& alts = g_.rule_alts[r];
    alts.erase(std::remove_if(alts.begin(), alts.end(), [&](int32_t a) {
      bool bad = false;
      for_alt(a, [&](int32_t p) {
        if (g_.elements[p].kind == ElementKind::kRef && !productive[g_.elements[p].arg]) bad = true;
      });
      return bad;
    }), alts.end());
  }

  // Nullable rules.
  std::vector<uint8_t> nullable(n, 0);
  auto elem_nullable = [&](const Element& el) {
    return el.kind == ElementKind::kRef ? nullable[el.arg] != 0
                                        : g_.dfas[el.arg].accept[g_.dfas[el.arg].start] != 0;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < n; ++r) {
      budget_tick();
      if (nullable[r]) continue;
      for (int32_t a : g_.rule_alts[r]) {
        bool all = true;
        for_alt(a, [&](int32_t p) { all = all && elem_nullable(g_.elements[p]); });
        if (all) { nullable[r] = 1; changed = true; break; }
      }
    }
  }
  // Left recursion through a non-tail reference would make the matcher's stacks grow without
  // consuming input: find such an edge inside a cycle of the left-corner graph.
  std::vector<std::vector<std::pair<int32_t, bool>>> left(n);  // (callee, grows)
  for (int32_t r = 0; r < n; ++r)
    for (int32_t a : g_.rule_alts[r])
      for (int32_t p = a; g_.elements[p].kind != ElementKind::kEnd; ++p) {
        const Element& el = g_.elements[p];
        if (el.kind == ElementKind::kRef)
          left[r].push_back({el.arg, g_.elements[p + 1].kind != ElementKind::kEnd});
        if (!elem_nullable(el)) break;
      }
  for (int32_t r = 0; r < n; ++r)
    for (auto [callee, grows] : left[r]) {
      if (!grows) continue;
      // Does callee reach r in the left-corner graph?
      std::vector<uint8_t> seen(n, 0);
      std::vector<int32_t> work{callee};
      seen[callee] = 1;
      while (!work.empty()) {
        int32_t x = work.back();
        work.pop_back();
        budget_tick();
        CHECK_KIND(kUnsupported, x != r)
            << what_ << ": left recursion in rule '" << g_.rule_names[r]
            << "' is not supported (rewrite it with repetition)";
        for (auto [y, unused] : left[x])
          if (!seen[y]) { seen[y] = 1; work.push_back(y); }
      }
    }
  return std::move(g_);
}

}  // namespace deepinfer::grammar
