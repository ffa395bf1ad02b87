// Structured output for the engine: builds the grammar vocabulary from the tokenizer once,
// compiles constraints (json_schema, json_object, regex, ebnf) with a cache keyed by
// (kind, text) that keeps the `capacity` most recently used grammars (each holds its mask
// cache; a long-running server sees unboundedly many schemas), and hands out one
// GrammarMatcher per request. Matchers share their grammar, so eviction never affects them.
// The sampler masks the logits with the matcher's bitmask and accepts the sampled token.
// Thread-safety: compile() and make_matcher() may be called from any thread (the cache is
// behind a mutex; a compilation itself runs outside it), so a server can compile a request's
// constraint on its own threads and the engine thread only wraps the result in a matcher.
#pragma once

#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "grammar/compile.h"

namespace deepinfer {

namespace recipe {
class Tokenizer;
}

class StructuredOutput {
 public:
  // `stop_token_ids`: the tokens that end a constrained output (the model's EOS ids).
  // `limits`: the budgets of each compilation (grammar/budget.h).
  StructuredOutput(const recipe::Tokenizer& tokenizer, int64_t vocab_size,
                   std::vector<int32_t> stop_token_ids, size_t capacity = 256,
                   grammar::CompileLimits limits = {});

  // Compiles (or reuses) the constraint; throws Error naming an unsupported feature or a
  // malformed schema / pattern / grammar, or kResourceExhausted naming the budget it exceeds
  // (a compilation stops within about limits.timeout_ms; refusals are not cached).
  std::unique_ptr<grammar::GrammarMatcher> make_matcher(const std::string& kind,
                                                        const std::string& text);
  // The compiled constraint (cached); same errors as make_matcher().
  std::shared_ptr<const grammar::CompiledGrammar> compile(const std::string& kind,
                                                          const std::string& text);

  int32_t n_mask_words() const { return vocab_->n_mask_words(); }
  size_t n_cached() const;

 private:
  using Key = std::pair<std::string, std::string>;
  struct Entry {
    std::shared_ptr<const grammar::CompiledGrammar> grammar;
    std::list<const Key*>::iterator use;  // position in uses_ (front: most recent)
  };
  std::shared_ptr<const grammar::Vocabulary> vocab_;
  size_t capacity_;
  grammar::CompileLimits limits_;
  mutable std::mutex mutex_;  // guards cache_ and uses_
  std::map<Key, Entry> cache_;
  std::list<const Key*> uses_;
};

}  // namespace deepinfer
