// The internal representation every front end compiles to: a context-free grammar whose terminals
// are byte-level DFAs.
//
// Each rule has alternatives; an alternative is a run of elements in `elements`, ended by kEnd.
// A position is an index into `elements`. kDfa elements match one string of dfas[arg]; kRef
// elements match rule `arg`. A rule with no alternatives matches nothing.
// Invariants after GrammarBuilder::build(): every alternative is productive (can derive a byte
// string), no rule is left-recursive through a non-tail reference (the matcher's stacks stay finite).
// Immutable after build; safe to share across threads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/dfa.h"
#include "grammar/expr.h"

namespace deepinfer::grammar {

enum class ElementKind : uint8_t { kEnd, kRef, kDfa };

struct Element {
  ElementKind kind;
  int32_t arg;  // rule (kRef) or dfa (kDfa)
};

struct Grammar {
  std::vector<Element> elements;
  std::vector<std::vector<int32_t>> rule_alts;  // rule -> start positions of its alternatives
  std::vector<std::string> rule_names;
  std::vector<Dfa> dfas;
  int32_t root = 0;

  int32_t n_rules() const { return static_cast<int32_t>(rule_alts.size()); }
  // Readable listing (rule names, DFA sizes) for debugging and error messages.
  std::string to_string() const;
};

// Collects rules as expressions and lowers them. Not thread-safe; one per compilation.
class GrammarBuilder {
 public:
  explicit GrammarBuilder(std::string what) : what_(std::move(what)) {}
  int32_t declare(std::string name);
  void define(int32_t rule, ExprPtr body);
  bool is_defined(int32_t rule) const { return bodies_[rule] != nullptr; }
  int32_t n_rules() const { return static_cast<int32_t>(bodies_.size()); }
  const std::string& name(int32_t rule) const { return names_[rule]; }
  // Lowers all rules; throws kInvalidInput for undefined rules, kUnsupported for left recursion.
  Grammar build(int32_t root);

 private:
  std::string what_;
  std::vector<std::string> names_;
  std::vector<ExprPtr> bodies_;
  Grammar g_;
  std::map<uint64_t, std::vector<int32_t>> dfa_ids_;  // fingerprint -> candidate ids
  std::map<const Expr*, int32_t> aux_rules_;
  std::unordered_map<std::string, int32_t> expr_dfa_ids_;  // expr_key (automata by address) -> dfa id

  std::vector<std::vector<Element>> lower_alts(const ExprPtr& e);
  std::vector<Element> lower_seq(const ExprPtr& e, bool& empty_language);
  int32_t aux_rule(const ExprPtr& e);
  int32_t add_dfa(const ExprPtr& e, bool& empty_language);
  int32_t add_dfa(Dfa d);  // -1 for the empty language; equal automata share one id
  int32_t new_rule(std::string name);
};

}  // namespace deepinfer::grammar
