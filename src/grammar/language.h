// Analyses of a built Grammar's language, run once per compilation (compile.h).
//
// language_is_empty: no complete byte string matches the grammar. A least fixpoint over the IR
// itself (not over the front ends' special cases): a kDfa element is productive when its
// automaton has a path from its start state to an accepting state, an alternative when all its
// elements are, a rule when one of its alternatives is; the language is empty iff the root is
// not productive. This covers every way a constraint can be unsatisfiable once lowered:
// contradictory bounds and keywords (empty automata), rule cycles without a base case
// (`{"$ref": "#"}`, `root ::= a` / `a ::= root`), empty classes.
//
// grammar_bytes: the bytes some live transition of one of the grammar's automata reads. With
// GrammarBuilder's invariants (every alternative productive, automata trimmed) a matcher that
// has accepted a prefix can always extend it to a complete match byte by byte; if every byte of
// grammar_bytes is also a single-byte token of the vocabulary, the same holds token by token
// (the matcher never reaches a state where neither a token nor a stop token is allowed).
#pragma once

#include <array>
#include <string>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

bool language_is_empty(const Grammar& g);
// Throws kInvalidInput naming `what` when language_is_empty(g).
void check_language_nonempty(const Grammar& g, const std::string& what);

std::array<bool, 256> grammar_bytes(const Grammar& g);

}  // namespace deepinfer::grammar
