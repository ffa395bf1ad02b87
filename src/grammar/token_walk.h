// Token classification by walking the vocabulary trie from a set of parse stacks.
//
// walk_token_trie() visits the trie depth-first, advancing the stacks one byte per trie edge and
// pruning subtrees where every stack died. A token is
//   accepted  if some stack consumes all its bytes (or the grammar completes exactly at its end);
//   uncertain if only stacks that returned into kUnknownParent before its end could consume it
//             (decided later against the real stack);
//   rejected  otherwise.
// With real parents (no kUnknownParent) nothing is uncertain and `accepted` is the exact mask.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/parse_stack.h"
#include "grammar/vocabulary.h"

namespace deepinfer::grammar {

// `accepted` has vocab.n_mask_words() words and is OR-ed into (not cleared).
// Returns the number of trie nodes visited.
int64_t walk_token_trie(const Grammar& g, const TokenTrie& trie, StackPool& pool,
                        const std::vector<Top>& init, uint32_t* accepted,
                        std::vector<int32_t>* uncertain);

// True if, from `top` (whose parent is irrelevant), the top's DFA stays alive on every sequence of
// at most Vocabulary::kSliceMaxChars plain-slice characters: then every slice token is accepted.
bool slice_survives(const Grammar& g, const Top& top);

}  // namespace deepinfer::grammar
