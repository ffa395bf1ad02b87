// Byte-level deterministic automata: the terminals of the grammar IR.
//
// A Dfa reads raw bytes. `at(s, b)` is the successor of state s on byte b, or kDead.
// Every Dfa built here is trimmed: each live state can still reach an accepting state, so a
// matcher that follows a non-dead transition can always complete the string.
// Build from a regular Expr (no kRef) with build_dfa(); combine with intersect_dfa / subtract_dfa.
// Sizes are capped (kMaxDfaStates); larger automata throw kUnsupported naming the cap.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "grammar/expr.h"

namespace deepinfer::grammar {

inline constexpr int32_t kDead = -1;
inline constexpr int32_t kMaxDfaStates = 20000;

struct Dfa {
  int32_t start = 0;
  // Transitions over byte classes: at(s, b) = next[s * n_classes + byte_class[b]]. Builders write
  // tables over their operands' (joint) classes; finish_dfa merges classes with equal columns.
  std::vector<int32_t> next;     // [n_states * n_classes]
  std::vector<uint8_t> accept;   // [n_states]
  std::vector<uint8_t> has_out;  // [n_states]: some byte leads to a live state
  std::array<uint8_t, 256> byte_class = identity_classes();
  int32_t n_classes = 256;

  int32_t at(int32_t s, uint8_t b) const { return next[static_cast<size_t>(s) * n_classes + byte_class[b]]; }
  int32_t& at(int32_t s, uint8_t b) { return next[static_cast<size_t>(s) * n_classes + byte_class[b]]; }
  static std::array<uint8_t, 256> identity_classes() {
    std::array<uint8_t, 256> c{};
    for (int b = 0; b < 256; ++b) c[b] = static_cast<uint8_t>(b);
    return c;
  }
  int32_t n_states() const { return static_cast<int32_t>(accept.size()); }
  bool empty() const { return accept.empty(); }  // the empty language
  bool matches(const std::string& bytes) const;
  uint64_t fingerprint() const;  // structural hash (equal automata -> equal fingerprints)
};

// `what` names the construct in error messages (e.g. "pattern '^a+$'"). Sequences and
// alternatives holding prebuilt automata (kAutomaton) are combined from their parts' automata
// (concat_dfa, union_dfa) instead of being re-determinised; build_dfa_plain is the plain path
// (one NFA, one subset construction) that this must equal, for tests.
Dfa build_dfa(const Expr& e, const std::string& what);
// Appends a structural key of a regular expression (equal keys: equal languages) to `out`; false
// for rule references, and for automata unless `automata_by_address` (a key valid only while
// those automata live: for memos within one compilation).
bool expr_key(const Expr& e, std::string& out, bool automata_by_address);
Dfa build_dfa_plain(const Expr& e, const std::string& what);
// The words of L(e) none of whose proper prefixes is in L(e) (a prefix-free automaton): subset
// construction stops at accepting sets. For search semantics, contains(R) = that of .*R, then
// anything: the states after a first match are never built (an unanchored URI regex, whose
// continuations after "a:" the full construction tracks, ran past the 2 s budget).
Dfa build_shortest_match_dfa(const Expr& e, const std::string& what);
Dfa intersect_dfa(const Dfa& a, const Dfa& b, const std::string& what);
Dfa subtract_dfa(const Dfa& a, const Dfa& b, const std::string& what);  // L(a) \ L(b)
Dfa union_dfa(const Dfa& a, const Dfa& b, const std::string& what);
// A·B without an NFA when deterministic: no accepting state of A has a live byte that B's start
// also uses; std::nullopt on such a conflict.
std::optional<Dfa> concat_dfa(const Dfa& a, const Dfa& b);
// The left fold of concat_dfa over parts[0], parts[1], ... in one table (no copy of the growing
// prefix per step), up to the first part that conflicts: returns the fold's automaton over
// parts[0..used) (used >= 1, parts[0] itself when used == 1), equal to the fold's result
// state for state (test_dfa_ops). An empty part empties the result, as in the fold.
Dfa concat_run_dfa(const std::vector<Dfa>& parts, size_t& used);
// Removes states that cannot reach acceptance and renumbers; an empty language gives an empty Dfa.
Dfa trim_dfa(const Dfa& d);
// `unit` repeated [min, max] times (max == kUnbounded: no bound). `unit` must be prefix-free (no
// accepting state has a live transition), e.g. one JSON-encoded code point; built directly as a
// counter x unit-state product, much faster than NFA expansion for long bounds.
// Memoised process-wide (a few entries); the _uncached form is what it returns.
Dfa repeat_prefix_free_dfa(const Dfa& unit, int32_t min, int32_t max, const std::string& what);
Dfa repeat_prefix_free_dfa_uncached(const Dfa& unit, int32_t min, int32_t max, const std::string& what);
// Merges equivalent states (Moore partition refinement, bounded rounds).
Dfa minimize_dfa(const Dfa& d);
// Merges byte classes whose columns agree in every state and recomputes has_out (builders end
// with it). All operations work on byte classes; no table is 256 wide.
Dfa finish_dfa(Dfa d);

}  // namespace deepinfer::grammar
