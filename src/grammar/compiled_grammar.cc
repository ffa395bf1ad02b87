#include "grammar/compiled_grammar.h"

#include <algorithm>

#include "base/error.h"
#include "grammar/dfa_future.h"
#include "grammar/token_walk.h"

namespace deepinfer::grammar {

namespace {

// Process-wide cache for DFA elements that end their rule: their classification depends only on
// the automaton and its state. Bounded; when full, entries are simply not shared.
struct SharedKey {
  uint64_t vocab;
  uint64_t fingerprint;
  int32_t n_states, state;
  bool operator==(const SharedKey& o) const {
    return vocab == o.vocab && fingerprint == o.fingerprint && n_states == o.n_states && state == o.state;
  }
};
struct SharedKeyHash {
  size_t operator()(const SharedKey& k) const {
    return k.fingerprint ^ (k.vocab * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(k.state) << 20);
  }
};
constexpr size_t kMaxSharedEntries = 4096;
// Bounded-future sharing (dfa_future.h): only automata with more states than this (smaller ones
// have few entries), at most this many candidates per signature, this many state pairs per check.
constexpr int32_t kMinStatesForSharing = 32;
constexpr size_t kMaxRepresentatives = 4;
constexpr int64_t kMaxFuturePairs = 1 << 15;
std::mutex g_shared_mu;
std::unordered_map<SharedKey, std::shared_ptr<const MaskEntry>, SharedKeyHash> g_shared;

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  ICHECK(vocab_ != nullptr);
  for (const auto& d : grammar_.dfas) dfa_fingerprints_.push_back(d.fingerprint());
}

const CompletionTables& CompiledGrammar::completion() const {
  std::call_once(completion_once_, [&] { completion_ = std::make_unique<const CompletionTables>(completion_tables(grammar_)); });
  return *completion_;
}

size_t CompiledGrammar::n_cached_entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

const SliceAlphabet& CompiledGrammar::alphabet(int32_t dfa) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (alphabets_.empty()) alphabets_.resize(grammar_.dfas.size());
    if (alphabets_[dfa]) return *alphabets_[dfa];
  }
  auto a = std::make_shared<const SliceAlphabet>(slice_alphabet(grammar_.dfas[dfa], *vocab_));
  std::lock_guard<std::mutex> lock(mu_);
  if (!alphabets_[dfa]) alphabets_[dfa] = std::move(a);
  return *alphabets_[dfa];
}

std::shared_ptr<const MaskEntry> CompiledGrammar::compute_entry(int32_t pos, int32_t state) const {
  ++n_computed_;
  auto entry = std::make_shared<MaskEntry>();
  entry->accepted.assign(vocab_->n_mask_words(), 0);
  StackPool pool;
  std::vector<Top> init{{pos, state, kUnknownParent}};
  SliceVerdict verdict = classify_slice(grammar_, init[0]);
  // Some non-ASCII character dies (or the ASCII-only verdict could not tell): decide the slice
  // over the characters it uses, grouped by this DFA's byte classes.
  if (!verdict.closed) verdict = classify_slice_chars(grammar_, init[0], alphabet(grammar_.elements[pos].arg));
  if (verdict.closed) {  // the slice is decided without walking it; only the other tokens are walked
    entry->accepted = *vocab_->slice_mask_without(verdict.excluded, verdict.max_chars, verdict.dead_chars);
    walk_token_trie(grammar_, vocab_->rest_trie(), pool, init, entry->accepted.data(), &entry->uncertain);
    for (uint32_t w : entry->accepted) entry->n_accepted += __builtin_popcount(w);
    return entry;
  }
  const int k = slice_survival_chars(grammar_, init[0]);
  // Some plain character dies soon: if only ASCII characters that die at once do ([^,"]+,
  // [A-Za-z0-9 ]{1,32}), the slice tokens avoiding them are accepted wholesale and the walk
  // skips their subtrees (else each state of such a string walks the whole trie: 3-15 ms).
  Vocabulary::AsciiSet excluded{};
  if (k >= 0 && k < Vocabulary::kSliceMaxChars) excluded = dead_plain_ascii(grammar_, init[0]);
  int k_without = (excluded[0] | excluded[1]) != 0 ? slice_survival_chars(grammar_, init[0], &excluded) : 0;
  if (k >= 0 && k < Vocabulary::kSliceMaxChars && k_without < Vocabulary::kSliceMaxChars) {
    // Some non-ASCII characters die (the `.` of a pattern kills U+2028 / U+2029, `\S` the Unicode
    // spaces): the ASCII-only slice tokens may still be decided wholesale; the walk then covers
    // the tokens with non-ASCII characters (a third of the trie instead of all of it).
    Vocabulary::AsciiSet ascii_only = excluded;
    ascii_only[0] |= uint64_t{1} << Vocabulary::kNonAscii;
    const int k_ascii = slice_survival_chars(grammar_, init[0], &ascii_only);
    if (k_ascii > std::max(k, k_without)) {
      excluded = ascii_only;
      k_without = k_ascii;
    }
  }
  if (k_without > k) {
    const SliceSkip skip{vocab_.get(), k_without, excluded, /*accept=*/true};
    walk_token_trie(grammar_, vocab_->full_trie(), pool, init, entry->accepted.data(), &entry->uncertain, &skip);
  } else if (k < 0) {
    walk_token_trie(grammar_, vocab_->rest_trie(), pool, init, entry->accepted.data(), &entry->uncertain);
  } else if (k == Vocabulary::kSliceMaxChars) {
    entry->accepted = vocab_->slice_mask();
    walk_token_trie(grammar_, vocab_->rest_trie(), pool, init, entry->accepted.data(), &entry->uncertain);
  } else if (k > 0) {
    entry->accepted = vocab_->slice_mask_up_to(k);
    const SliceSkip skip{vocab_.get(), k, {}, /*accept=*/false};
    walk_token_trie(grammar_, vocab_->full_trie(), pool, init, entry->accepted.data(), &entry->uncertain, &skip);
  } else {
    walk_token_trie(grammar_, vocab_->full_trie(), pool, init, entry->accepted.data(), &entry->uncertain);
  }
  for (uint32_t w : entry->accepted) entry->n_accepted += __builtin_popcount(w);
  return entry;
}

std::shared_ptr<const MaskEntry> CompiledGrammar::equivalent_entry(int32_t pos, int32_t state, uint64_t signature) const {
  const Dfa& d = grammar_.dfas[grammar_.elements[pos].arg];
  std::vector<int32_t> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = representatives_.find({pos, signature});
    if (it == representatives_.end()) return nullptr;
    candidates = it->second;
  }
  for (int32_t rep : candidates) {
    // Alike for every token: the whole entry is shared.
    const bool all = vocab_->max_token_bytes() <= Vocabulary::kShortTokenBytes;
    if (!same_bounded_future(d, rep, state, Vocabulary::kShortTokenBytes, kMaxFuturePairs)) continue;
    std::shared_ptr<const MaskEntry> base;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find((static_cast<uint64_t>(pos) << 32) | static_cast<uint32_t>(rep));
      if (it != cache_.end()) base = it->second;
    }
    if (!base) continue;
    if (all) return base;
    // Alike for the short tokens: the representative's entry for those, a walk for the long ones.
    auto entry = std::make_shared<MaskEntry>();
    const auto& shorts = vocab_->short_token_mask();
    entry->accepted.resize(base->accepted.size());
    for (size_t w = 0; w < shorts.size(); ++w) entry->accepted[w] = base->accepted[w] & shorts[w];
    for (int32_t t : base->uncertain)
      if (static_cast<int>(vocab_->token_bytes(t).size()) <= Vocabulary::kShortTokenBytes) entry->uncertain.push_back(t);
    StackPool pool;
    walk_token_trie(grammar_, vocab_->long_trie(), pool, {{pos, state, kUnknownParent}}, entry->accepted.data(),
                    &entry->uncertain);
    for (uint32_t w : entry->accepted) entry->n_accepted += __builtin_popcount(w);
    return entry;
  }
  return nullptr;
}

std::shared_ptr<const MaskEntry> CompiledGrammar::mask_entry(int32_t pos, int32_t state) const {
  const uint64_t key = (static_cast<uint64_t>(pos) << 32) | static_cast<uint32_t>(state);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  const Element& el = grammar_.elements[pos];
  ICHECK(el.kind == ElementKind::kDfa);
  const bool shareable = grammar_.elements[pos + 1].kind == ElementKind::kEnd;
  SharedKey skey{vocab_->uid(), dfa_fingerprints_[el.arg], grammar_.dfas[el.arg].n_states(), state};
  std::shared_ptr<const MaskEntry> entry;
  if (shareable) {
    std::lock_guard<std::mutex> lock(g_shared_mu);
    auto it = g_shared.find(skey);
    if (it != g_shared.end()) entry = it->second;
  }
  const bool by_future = grammar_.dfas[el.arg].n_states() > kMinStatesForSharing;
  const uint64_t signature = by_future ? future_signature(grammar_.dfas[el.arg], state) : 0;
  bool borrowed = false;  // the entry of an equivalent state (not a representative itself)
  if (!entry && by_future) borrowed = (entry = equivalent_entry(pos, state, signature)) != nullptr;
  if (!entry) {
    entry = compute_entry(pos, state);
    if (shareable) {
      std::lock_guard<std::mutex> lock(g_shared_mu);
      if (g_shared.size() < kMaxSharedEntries) g_shared.emplace(skey, entry);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, fresh] = cache_.emplace(key, entry);
  if (by_future && !borrowed && fresh) {
    auto& reps = representatives_[{pos, signature}];
    if (reps.size() < kMaxRepresentatives) reps.push_back(state);
  }
  return it->second;
}

}  // namespace deepinfer::grammar
