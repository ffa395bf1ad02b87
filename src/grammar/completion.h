// Distances to acceptance over the grammar IR, for a closing bias derived from the grammar: the
// engine can prefer the tokens that spell the start of a shortest completion of the output
// (GrammarMatcher::closing_tokens), instead of a hand-picked list of "closing" characters.
//
//   dist[d][s]   bytes from state s of DFA d to an accepting state (kNoPath if none; trimmed
//                automata always have a path);
//   next_byte[d][s]  a byte on such a shortest path (printable ASCII preferred), for dist > 0;
//   suffix[pos]  fewest bytes that the elements from position `pos` to the end of its
//                alternative can match (0 at kEnd);
//   min_len[r]   fewest bytes rule r can match.
// A stack's completion length is dist of its top + suffix after it + suffix after each return
// position of its parents; the grammar may end when it is 0. Computed once per grammar (linear
// in its automata), on first use.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

inline constexpr int64_t kNoPath = int64_t{1} << 40;

struct CompletionTables {
  std::vector<std::vector<int64_t>> dist;
  std::vector<std::vector<uint8_t>> next_byte;
  std::vector<int64_t> suffix;
  std::vector<int64_t> min_len;
};

CompletionTables completion_tables(const Grammar& g);

}  // namespace deepinfer::grammar
