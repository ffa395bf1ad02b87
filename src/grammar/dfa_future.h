// Bounded future equivalence of DFA states: which states a token-mask computation cannot tell apart.
//
// A mask-cache entry for a stack top (DFA element, state) reads the DFA from that state along
// the bytes of each token (token_walk.h: the trie walk, the slice verdicts); after an accepting
// state it continues with the elements that follow, which do not depend on the state. So two
// states a, b of one DFA have the same entry for the tokens of at most `depth` bytes when no byte
// string w of at most `depth` bytes tells them apart, i.e. after every such w both are dead, or
// both are live with equal accept and has_out bits. Counter automata (maxLength 1024, `{0,99}`
// words, key `^.{1,255}$`) have hundreds of states that differ only near their limit: every
// state farther than `depth` characters from it shares those tokens' entry (CompiledGrammar uses
// depth Vocabulary::kShortTokenBytes and walks the few longer tokens per state), so a
// generation walks the trie a few times per automaton instead of once per character count.
#pragma once

#include <cstdint>

#include "grammar/dfa.h"

namespace deepinfer::grammar {

// A hash of what a state does on strings of at most 2 bytes: equal for states that agree on
// them, in particular for every pair same_bounded_future() accepts with depth >= 2.
uint64_t future_signature(const Dfa& d, int32_t s);

// True if no byte string of at most `depth` bytes tells states a and b of d apart (see above).
// Breadth-first over the pairs of states the strings reach (a pair first met at the smallest
// depth needs the most remaining bytes checked, so each pair is expanded once); gives up and
// returns false after `max_pairs` distinct pairs (false only costs a recomputation).
bool same_bounded_future(const Dfa& d, int32_t a, int32_t b, int depth, int64_t max_pairs);

}  // namespace deepinfer::grammar
