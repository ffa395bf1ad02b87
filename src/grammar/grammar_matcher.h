// Per-request matcher: which tokens may come next, accept / roll back tokens, forced bytes.
//
// Usage by the sampler, once per decode step:
//   matcher.fill_next_token_bitmask(mask);   // mask: vocab.n_mask_words() uint32 words,
//                                             // bit t of word t/32 set <=> token t allowed
//   ... sample a token with disallowed logits set to -inf ...
//   matcher.accept_token(token);              // false (and no state change) if not allowed
// Speculative decoding: accept draft tokens one by one, rollback(n) the rejected suffix.
// Stop tokens (Vocabulary::stop_tokens) are allowed exactly when the grammar can end; accepting
// one terminates the matcher (is_terminated()); afterwards nothing is allowed.
// Thread-safety: one matcher per request, used by one thread at a time; matchers of the same
// CompiledGrammar may run concurrently on different threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/parse_stack.h"

namespace deepinfer::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Writes the allowed-token bitmask (overwrites all n_mask_words() words).
  void fill_next_token_bitmask(uint32_t* mask);
  std::vector<uint32_t> next_token_bitmask();
  // The same mask computed without the cache by walking the whole trie (the oracle for tests).
  void fill_next_token_bitmask_uncached(uint32_t* mask);

  bool accept_token(int32_t token);
  // Accepts raw bytes as if they were one token (not a stop token); false and no change if rejected.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last n accepted tokens (or accept_bytes calls). n <= n_accepted().
  void rollback(int32_t n);
  void reset();

  int32_t n_accepted() const { return static_cast<int32_t>(history_.size()) - 1; }
  bool is_terminated() const { return history_.back().terminated; }
  // The input so far is a complete match: a stop token is allowed now.
  bool can_terminate() const { return !is_terminated() && history_.back().can_end; }

  // Bytes every continuation must start with (stops where there is a choice, or at a point where
  // the grammar could end). Does not change the state.
  std::string find_forced_bytes();
  // Tokens that spell a prefix of the forced bytes, longest match first; the last candidate is
  // dropped when a longer vocabulary token could span the end of the forced bytes, so a caller
  // may append these tokens without changing what the model could have produced.
  std::vector<int32_t> find_forced_tokens();

  // The closing bias derived from the grammar (completion.h): a shortest continuation to a
  // complete match (at most max_bytes of it; empty when the grammar can end now), and the tokens
  // that spell a prefix of it, plus the stop tokens when the grammar can end. Biasing these
  // tokens shortens the distance to acceptance by each token's length. Does not change the state.
  std::string shortest_completion(size_t max_bytes = 32);
  std::vector<int32_t> closing_tokens();

  const CompiledGrammar& compiled() const { return *grammar_; }
  // The stack tops of the current state (profiling tools and tests).
  const std::vector<Top>& current_tops() const { return history_.back().tops; }

 private:
  struct State {
    std::vector<Top> tops;
    bool can_end = false;
    bool terminated = false;
  };
  std::shared_ptr<const CompiledGrammar> grammar_;
  StackPool pool_;
  ByteStepper stepper_;
  std::vector<State> history_;
  std::vector<Top> scratch_;
  std::vector<std::shared_ptr<const MaskEntry>> entries_;

  bool check_token_from(const Top& top, const std::string& bytes);
};

}  // namespace deepinfer::grammar
