#include "engine/structured_output.h"

#include <algorithm>

#include "base/error.h"
#include "recipe/tokenizer.h"

namespace deepinfer {

StructuredOutput::StructuredOutput(const recipe::Tokenizer& tokenizer, int64_t vocab_size,
                                   std::vector<int32_t> stop_token_ids, size_t capacity,
                                   grammar::CompileLimits limits)
    : capacity_(std::max<size_t>(capacity, 1)), limits_(limits) {
  // Every model id gets its decoded bytes; special (control) tokens are not text and can
  // never be produced inside a constrained output, so they get no bytes.
  std::vector<std::string> bytes(static_cast<size_t>(vocab_size));
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (id < tokenizer.vocab_size() && tokenizer.has_token(id) && !tokenizer.is_special(id)) {
      bytes[static_cast<size_t>(id)] = std::string(tokenizer.token_bytes(id));
    }
  }
  vocab_ = std::make_shared<const grammar::Vocabulary>(std::move(bytes), std::move(stop_token_ids));
}

std::shared_ptr<const grammar::CompiledGrammar> StructuredOutput::compile(const std::string& kind,
                                                                          const std::string& text) {
  auto key = std::make_pair(kind, text);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      uses_.splice(uses_.begin(), uses_, it->second.use);
      it->second.use = uses_.begin();
      return it->second.grammar;
    }
  }
  grammar::GrammarSpec spec{kind, text};
  spec.limits = limits_;
  std::shared_ptr<const grammar::CompiledGrammar> compiled =
      grammar::compile_grammar(spec, vocab_);  // throws before any change; outside the lock
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second.grammar;  // compiled meanwhile by another thread
  if (cache_.size() >= capacity_) {
    cache_.erase(cache_.find(*uses_.back()));
    uses_.pop_back();
  }
  it = cache_.emplace(std::move(key), Entry{compiled, {}}).first;
  uses_.push_front(&it->first);
  it->second.use = uses_.begin();
  return compiled;
}

std::unique_ptr<grammar::GrammarMatcher> StructuredOutput::make_matcher(const std::string& kind,
                                                                        const std::string& text) {
  return std::make_unique<grammar::GrammarMatcher>(compile(kind, text));
}

size_t StructuredOutput::n_cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cache_.size();
}

}  // namespace deepinfer
