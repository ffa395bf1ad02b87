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
#include <string>
#include <vector>

#include "grammar/parse_stack.h"
#include "grammar/vocabulary.h"

namespace deepinfer::grammar {

// Subtrees of Vocabulary::full_trie() a walk need not visit: those whose tokens are all slice
// tokens of at most k characters avoiding `excluded` (Vocabulary::subtree_slice_chars(),
// subtree_ascii()). With `accept` the walk accepts their tokens itself (a subtree's tokens are
// contiguous); else the caller already has.
struct SliceSkip {
  const Vocabulary* vocab = nullptr;
  int k = 0;
  Vocabulary::AsciiSet excluded{};
  bool accept = false;
  bool skips(int32_t node) const {
    const Vocabulary::AsciiSet& a = vocab->subtree_ascii()[node];
    return vocab->subtree_slice_chars()[node] <= k && (a[0] & excluded[0]) == 0 && (a[1] & excluded[1]) == 0;
  }
};

// `accepted` has vocab.n_mask_words() words and is OR-ed into (not cleared).
// Returns the number of trie nodes visited. `skip` (full trie only): subtrees left out, see above.
// With one DFA top (every mask-cache entry) the walk runs a single-automaton loop while the
// bytes stay inside that DFA's live, non-accepting states, and the plain walk below from the
// first accepting state on; walk_token_trie_plain is that plain walk everywhere (the path the
// fast one must equal; the uncached oracle of GrammarMatcher uses it).
int64_t walk_token_trie(const Grammar& g, const TokenTrie& trie, StackPool& pool,
                        const std::vector<Top>& init, uint32_t* accepted,
                        std::vector<int32_t>* uncertain, const SliceSkip* skip = nullptr);
int64_t walk_token_trie_plain(const Grammar& g, const TokenTrie& trie, StackPool& pool,
                              const std::vector<Top>& init, uint32_t* accepted,
                              std::vector<int32_t>* uncertain, const SliceSkip* skip = nullptr);

// The largest k <= Vocabulary::kSliceMaxChars such that, from `top` (whose parent is irrelevant),
// the top's DFA stays alive on every sequence of at most k plain-slice characters: then every
// slice token of at most k characters is accepted. Returns -1 if no plain character can start
// (then no slice token is accepted through this top).
// With `excluded`, the plain characters of that ASCII set are left out of the sequences (they
// may die; Vocabulary::slice_without() holds the slice tokens avoiding them).
int slice_survival_chars(const Grammar& g, const Top& top, const Vocabulary::AsciiSet* excluded = nullptr);
// When the slice needs no walk from `top`: `closed` means the slice tokens it accepts are exactly
// those of at most `max_chars` characters avoiding `excluded` (the ASCII characters dead at once,
// dead at every position within reach), and no slice token can leave the DFA (no accepting
// state within reach, so none is uncertain). Typical: string bodies with a length limit or a
// class pattern, where every counter state would otherwise walk the whole trie.
struct SliceVerdict {
  bool closed = false;
  int max_chars = 0;
  Vocabulary::AsciiSet excluded{};
  std::vector<int32_t> dead_chars;  // non-ASCII characters excluded too (slice_verdict_by_chars)
};
SliceVerdict classify_slice(const Grammar& g, const Top& top);

// The non-ASCII characters of the vocabulary's slice tokens (Vocabulary::slice_nonascii_chars())
// grouped by the byte classes of one DFA: characters of a group behave alike from every state.
struct SliceAlphabet {
  std::vector<std::string> reps;            // one character per group
  std::vector<std::vector<int32_t>> chars;  // the character ids of each group (sorted)
};
SliceAlphabet slice_alphabet(const Dfa& d, const Vocabulary& vocab);
// classify_slice over the characters slice tokens actually use, non-ASCII ones included: closed
// when the slice tokens the top accepts are exactly those of at most max_chars characters
// avoiding the ASCII set `excluded` and the characters `dead_chars`, each of which is dead at
// every position within reach (the `.` of a pattern: U+2028 / U+2029; `\S`: Unicode spaces).
// Decides string states near a length limit that the ASCII-only verdict leaves to a walk.
SliceVerdict classify_slice_chars(const Grammar& g, const Top& top, const SliceAlphabet& alphabet);
// The plain ASCII characters on which the top's DFA dies at once (candidates for `excluded`).
Vocabulary::AsciiSet dead_plain_ascii(const Grammar& g, const Top& top);

}  // namespace deepinfer::grammar
