#include "grammar/grammar_matcher.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "grammar/token_walk.h"

namespace deepinfer::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), stepper_(grammar_->grammar(), pool_) {
  reset();
}

void GrammarMatcher::reset() {
  history_.clear();
  State s;
  if (!grammar_->empty_language()) {
    StepFlags flags;
    stepper_.initial(s.tops, flags);
    s.can_end = flags.can_end;
  }
  history_.push_back(std::move(s));
}

bool GrammarMatcher::check_token_from(const Top& top, const std::string& bytes) {
  scratch_.assign(1, top);
  StepFlags flags;
  return stepper_.advance_bytes(scratch_, flags, bytes);
}

void GrammarMatcher::fill_next_token_bitmask(uint32_t* mask) {
  const Vocabulary& vocab = grammar_->vocab();
  const int32_t n_words = vocab.n_mask_words();
  std::memset(mask, 0, sizeof(uint32_t) * n_words);
  const State& st = history_.back();
  if (st.terminated) return;
  entries_.clear();
  for (const Top& t : st.tops) {
    entries_.push_back(grammar_->mask_entry(t.pos, t.state));
    const uint32_t* acc = entries_.back()->accepted.data();
    for (int32_t w = 0; w < n_words; ++w) mask[w] |= acc[w];
  }
  for (size_t i = 0; i < st.tops.size(); ++i) {
    for (int32_t tok : entries_[i]->uncertain) {
      if (mask[tok >> 5] & (1u << (tok & 31))) continue;
      if (check_token_from(st.tops[i], vocab.token_bytes(tok))) mask[tok >> 5] |= 1u << (tok & 31);
    }
  }
  if (st.can_end)
    for (int32_t tok : vocab.stop_tokens()) mask[tok >> 5] |= 1u << (tok & 31);
}

std::vector<uint32_t> GrammarMatcher::next_token_bitmask() {
  std::vector<uint32_t> mask(grammar_->vocab().n_mask_words());
  fill_next_token_bitmask(mask.data());
  return mask;
}

void GrammarMatcher::fill_next_token_bitmask_uncached(uint32_t* mask) {
  const Vocabulary& vocab = grammar_->vocab();
  std::memset(mask, 0, sizeof(uint32_t) * vocab.n_mask_words());
  const State& st = history_.back();
  if (st.terminated) return;
  walk_token_trie_plain(grammar_->grammar(), vocab.full_trie(), pool_, st.tops, mask, nullptr);
  if (st.can_end)
    for (int32_t tok : vocab.stop_tokens()) mask[tok >> 5] |= 1u << (tok & 31);
}

bool GrammarMatcher::accept_token(int32_t token) {
  const Vocabulary& vocab = grammar_->vocab();
  CHECK(token >= 0 && token < vocab.size()) << "token id " << token << " outside the vocabulary";
  const State& st = history_.back();
  if (st.terminated) return false;
  if (vocab.is_stop(token)) {
    if (!st.can_end) return false;
    State s;
    s.terminated = true;
    history_.push_back(std::move(s));
    return true;
  }
  const std::string& bytes = vocab.token_bytes(token);
  if (bytes.empty()) return false;
  return accept_bytes(bytes);
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  const State& st = history_.back();
  if (st.terminated || bytes.empty()) return false;
  State s;
  s.tops = st.tops;
  StepFlags flags;
  if (!stepper_.advance_bytes(s.tops, flags, bytes)) return false;
  s.can_end = flags.can_end;
  history_.push_back(std::move(s));
  return true;
}

void GrammarMatcher::rollback(int32_t n) {
  CHECK(n >= 0 && n <= n_accepted()) << "rollback(" << n << ") but only " << n_accepted()
                                     << " tokens were accepted";
  history_.resize(history_.size() - n);
}

std::string GrammarMatcher::find_forced_bytes() {
  std::string out;
  std::vector<Top> tops = history_.back().tops;
  bool can_end = history_.back().can_end;
  if (history_.back().terminated) return out;
  std::vector<Top> next;
  const Grammar& g = grammar_->grammar();
  while (!can_end && !tops.empty() && out.size() < 4096) {
    int forced = -1;
    for (const Top& t : tops) {
      const Dfa& d = g.dfas[g.elements[t.pos].arg];
      for (int b = 0; b < 256; ++b) {
        if (d.at(t.state, static_cast<uint8_t>(b)) == kDead) continue;
        if (forced == -1) forced = b;
        else if (forced != b) { forced = -2; break; }
      }
      if (forced == -2) break;
    }
    if (forced < 0) break;
    out += static_cast<char>(forced);
    next.clear();
    StepFlags flags;
    stepper_.advance(tops.data(), tops.size(), static_cast<uint8_t>(forced), next, flags);
    tops.swap(next);
    can_end = flags.can_end;
  }
  return out;
}

std::string GrammarMatcher::shortest_completion(size_t max_bytes) {
  std::string out;
  const State& st = history_.back();
  if (st.terminated || st.can_end) return out;
  const Grammar& g = grammar_->grammar();
  const CompletionTables& ct = grammar_->completion();
  auto cost = [&](const Top& t) {
    int64_t c = ct.dist[g.elements[t.pos].arg][t.state] + ct.suffix[t.pos + 1];
    for (int32_t p = t.parent; p >= 0 && c < kNoPath; p = pool_.node(p).parent) c += ct.suffix[pool_.node(p).ret_pos + 1];
    return c;
  };
  std::vector<Top> tops = st.tops, next;
  // Each round either spells one byte of a shortest path or, at an accepting DFA state, moves on
  // to the elements after it; the cost falls by one per byte, so this ends within the budget.
  for (int rounds = 0; out.size() < max_bytes && rounds < 4 * static_cast<int>(max_bytes) + 64; ++rounds) {
    if (tops.empty()) break;
    const Top* best = &tops[0];
    int64_t best_cost = cost(tops[0]);
    for (const Top& t : tops) {
      const int64_t c = cost(t);
      if (c < best_cost) { best_cost = c; best = &t; }
    }
    if (best_cost <= 0 || best_cost >= kNoPath) break;
    const Top top = *best;
    const int32_t dfa = g.elements[top.pos].arg;
    next.clear();
    StepFlags flags;
    if (ct.dist[dfa][top.state] == 0) {
      stepper_.expand(top.pos + 1, top.parent, next, flags);
      sort_unique_tail(next, 0);
    } else {
      const uint8_t b = ct.next_byte[dfa][top.state];
      out += static_cast<char>(b);
      stepper_.advance(&top, 1, b, next, flags);
    }
    if (flags.can_end) break;
    tops.swap(next);
  }
  return out;
}

std::vector<int32_t> GrammarMatcher::closing_tokens() {
  std::vector<int32_t> out;
  if (is_terminated()) return out;
  const Vocabulary& vocab = grammar_->vocab();
  if (can_terminate()) out = vocab.stop_tokens();
  const std::string path = shortest_completion();
  const auto& trie = vocab.trie();
  const auto& tokens = vocab.trie_tokens();
  int32_t node = 0;
  for (unsigned char c : path) {
    int32_t child = -1;
    for (int32_t k = node + 1; k < trie[node].end; k = trie[k].end)
      if (trie[k].byte == c) { child = k; break; }
    if (child < 0) break;
    node = child;
    for (int32_t k = 0; k < trie[node].n_tokens; ++k) out.push_back(tokens[trie[node].token_begin + k]);
  }
  return out;
}

std::vector<int32_t> GrammarMatcher::find_forced_tokens() {
  const std::string forced = find_forced_bytes();
  const Vocabulary& vocab = grammar_->vocab();
  const auto& trie = vocab.trie();
  std::vector<int32_t> out;
  size_t at = 0;
  while (at < forced.size()) {
    // Longest token spelling a prefix of forced[at:].
    int32_t node = 0, best_tok = -1;
    size_t best_len = 0, d = 0;
    bool reaches_end = false;
    while (true) {
      if (trie[node].n_tokens) { best_tok = vocab.trie_tokens()[trie[node].token_begin]; best_len = d; }
      if (at + d == forced.size()) { reaches_end = trie[node].end > node + 1; break; }
      int32_t child = node + 1, found = -1;
      while (child < trie[node].end) {
        if (trie[child].byte == static_cast<uint8_t>(forced[at + d])) { found = child; break; }
        child = trie[child].end;
      }
      if (found < 0) break;
      node = found;
      ++d;
    }
    if (best_tok < 0 || best_len == 0) break;
    // A longer token continuing past the forced bytes could be a better (model) choice here.
    if (reaches_end) break;
    out.push_back(best_tok);
    at += best_len;
  }
  return out;
}

}  // namespace deepinfer::grammar
