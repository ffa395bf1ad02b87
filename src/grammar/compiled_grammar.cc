#include "grammar/compiled_grammar.h"

#include "base/error.h"
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

std::shared_ptr<const MaskEntry> CompiledGrammar::compute_entry(int32_t pos, int32_t state) const {
  auto entry = std::make_shared<MaskEntry>();
  entry->accepted.assign(vocab_->n_mask_words(), 0);
  StackPool pool;
  std::vector<Top> init{{pos, state, kUnknownParent}};
  const SliceVerdict verdict = classify_slice(grammar_, init[0]);
  if (verdict.closed) {  // the slice is decided without walking it; only the other tokens are walked
    entry->accepted = *vocab_->slice_mask_without(verdict.excluded, verdict.max_chars);
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
  const int k_without = (excluded[0] | excluded[1]) != 0 ? slice_survival_chars(grammar_, init[0], &excluded) : 0;
  if (k_without > k) {
    walk_token_trie(grammar_, vocab_->full_trie(), pool, init, entry->accepted.data(), &entry->uncertain,
                    vocab_->subtree_slice_chars_without(excluded).get(), k_without, /*accept_skipped=*/true);
  } else if (k < 0) {
    walk_token_trie(grammar_, vocab_->rest_trie(), pool, init, entry->accepted.data(), &entry->uncertain);
  } else if (k == Vocabulary::kSliceMaxChars) {
    entry->accepted = vocab_->slice_mask();
    walk_token_trie(grammar_, vocab_->rest_trie(), pool, init, entry->accepted.data(), &entry->uncertain);
  } else if (k > 0) {
    entry->accepted = vocab_->slice_mask_up_to(k);
    walk_token_trie(grammar_, vocab_->full_trie(), pool, init, entry->accepted.data(), &entry->uncertain,
                    &vocab_->subtree_slice_chars(), k);
  } else {
    walk_token_trie(grammar_, vocab_->full_trie(), pool, init, entry->accepted.data(), &entry->uncertain);
  }
  for (uint32_t w : entry->accepted) entry->n_accepted += __builtin_popcount(w);
  return entry;
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
  if (!entry) {
    entry = compute_entry(pos, state);
    if (shareable) {
      std::lock_guard<std::mutex> lock(g_shared_mu);
      if (g_shared.size() < kMaxSharedEntries) g_shared.emplace(skey, entry);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, fresh] = cache_.emplace(key, entry);
  return it->second;
}

}  // namespace deepinfer::grammar
