// TextStream: one request's output text, built token by token with a StreamDetokenizer,
// and the search for its stop strings. Text that could still be the beginning of a stop
// string is held back until it cannot (or the request ends), so a caller that streams
// take() never sees any part of the stop string that ends the request.
//
// Thread-safety: one TextStream per request, used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "recipe/detokenizer.h"
#include "recipe/tokenizer.h"

namespace deepinfer {

class TextStream {
 public:
  // `tokenizer` may be null: then the text stays empty and `stop` must be empty.
  TextStream(const recipe::Tokenizer* tokenizer, bool skip_special_tokens,
             std::vector<std::string> stop);

  // Appends one output token's text. Returns true when a stop string is complete: the text
  // is cut just before it and the stream is done (later pushes are ignored).
  bool push(int32_t token);
  // Ends the stream without a stop string: flushes held-back bytes (as U+FFFD), releases
  // text held back for stop strings.
  void finish();
  bool done() const { return done_; }
  // Text that became final since the last take() (complete UTF-8).
  std::string take();
  const std::string& text() const { return text_; }
  const std::string& stop_reason() const { return stop_reason_; }

 private:
  // Bytes at the end of text_ that are a proper prefix of some stop string.
  size_t held_back() const;

  std::unique_ptr<recipe::StreamDetokenizer> detok_;
  std::vector<std::string> stop_;
  size_t max_stop_ = 0;
  std::string text_;
  size_t emitted_ = 0;
  bool done_ = false;
  std::string stop_reason_;
};

}  // namespace deepinfer
