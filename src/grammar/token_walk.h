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
// `skip_chars` / `skip_k`: when given, subtrees whose skip_chars value is <= skip_k are not walked
// (the caller has already accepted them; see Vocabulary::subtree_slice_chars()).
int64_t walk_token_trie(const Grammar& g, const TokenTrie& trie, StackPool& pool,
                        const std::vector<Top>& init, uint32_t* accepted,
                        std::vector<int32_t>* uncertain,
                        const std::vector<uint8_t>* skip_chars = nullptr, int skip_k = 0);

// The largest k <= Vocabulary::kSliceMaxChars such that, from `top` (whose parent is irrelevant),
// the top's DFA stays alive on every sequence of at most k plain-slice characters: then every
// slice token of at most k characters is accepted. Returns -1 if no plain character can start
// (then no slice token is accepted through this top).
int slice_survival_chars(const Grammar& g, const Top& top);

}  // namespace deepinfer::grammar
