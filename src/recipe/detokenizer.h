// StreamDetokenizer: incremental decode() for generation. Feed ids one at a time; each
// push returns only text that is final: complete UTF-8 characters. Bytes of a character
// split across tokens are held back until it completes; bytes that can no longer form
// a valid character are emitted as U+FFFD. The concatenation of all push() results and
// flush() equals Tokenizer::decode(all ids, skip_special_tokens) exactly.
//
// Thread-safety: one StreamDetokenizer per stream (not shareable); the Tokenizer it
// reads must outlive it and may be shared by many detokenizers.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "recipe/tokenizer.h"

namespace deepinfer::recipe {

class StreamDetokenizer {
 public:
  explicit StreamDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  // Appends id's text that became final to the returned string (often empty).
  std::string push(int32_t id);
  // Like push() for each id, results concatenated.
  std::string push(std::span<const int32_t> ids);
  // Ends the stream: returns held-back bytes (as U+FFFD). The detokenizer is reset.
  std::string flush();

  // Bytes held back (an incomplete character), 0..3.
  size_t n_pending_bytes() const { return pending_.size(); }

 private:
  void push_into(int32_t id, std::string& out);

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
};

}  // namespace deepinfer::recipe
