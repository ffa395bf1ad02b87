// A grammar bound to a vocabulary, with the per-grammar adaptive token-mask cache.
//
// For a stack top (element position, DFA state) the cache holds the tokens accepted whatever the
// rest of the stack is, and the "uncertain" tokens that leave the current rule before their last
// byte and must be checked against the real stack (the XGrammar context-independent idea).
// Entries are computed lazily on first use and shared by every matcher of this grammar; entries
// of DFA elements that end their rule depend only on the DFA and are shared across grammars too
// (a process-wide cache keyed by the automaton). States that no string of at most
// Vocabulary::kShortTokenBytes bytes tells apart (dfa_future.h: a length counter far from its
// limit) share the entry's part for the short tokens; only the few longer tokens are walked.
// Thread-safety: all const methods may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "grammar/completion.h"
#include "grammar/grammar.h"
#include "grammar/token_walk.h"
#include "grammar/vocabulary.h"

namespace deepinfer::grammar {

struct MaskEntry {
  std::vector<uint32_t> accepted;  // [vocab.n_mask_words()]
  std::vector<int32_t> uncertain;  // token ids, each to be checked against the real stack
  int32_t n_accepted = 0;
};

class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocab);

  const Grammar& grammar() const { return grammar_; }
  const Vocabulary& vocab() const { return *vocab_; }
  const std::shared_ptr<const Vocabulary>& vocab_ptr() const { return vocab_; }
  // True if the grammar matches nothing (e.g. an unsatisfiable schema): no token is ever allowed.
  bool empty_language() const { return grammar_.rule_alts[grammar_.root].empty(); }

  // The cache entry for a stack top at DFA element `pos` in DFA state `state`.
  std::shared_ptr<const MaskEntry> mask_entry(int32_t pos, int32_t state) const;
  // Number of entries computed so far (for benchmarks and tests).
  size_t n_cached_entries() const;
  // Entries computed from scratch (the others were shared from an equivalent state).
  size_t n_computed_entries() const { return n_computed_.load(); }
  // Distances to acceptance (completion.h), computed on first use.
  const CompletionTables& completion() const;

 private:
  Grammar grammar_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::vector<uint64_t> dfa_fingerprints_;
  mutable std::mutex mu_;
  mutable std::atomic<size_t> n_computed_{0};
  mutable std::unordered_map<uint64_t, std::shared_ptr<const MaskEntry>> cache_;
  // States whose entries were computed, by (element position, future_signature): the candidates
  // an uncached state of the same element may share its entry with.
  mutable std::map<std::pair<int32_t, uint64_t>, std::vector<int32_t>> representatives_;
  mutable std::once_flag completion_once_;
  mutable std::unique_ptr<const CompletionTables> completion_;

  // Per DFA: the slice's non-ASCII characters grouped by its byte classes (token_walk.h), on first use.
  mutable std::vector<std::shared_ptr<const SliceAlphabet>> alphabets_;
  const SliceAlphabet& alphabet(int32_t dfa) const;

  std::shared_ptr<const MaskEntry> compute_entry(int32_t pos, int32_t state) const;
  // The entry of a computed state with the same bounded future, or null.
  std::shared_ptr<const MaskEntry> equivalent_entry(int32_t pos, int32_t state, uint64_t signature) const;
};

}  // namespace deepinfer::grammar
