#include "engine/text_stream.h"

#include <algorithm>

#include "base/error.h"

namespace deepinfer {

TextStream::TextStream(const recipe::Tokenizer* tokenizer, bool skip_special_tokens,
                       std::vector<std::string> stop)
    : stop_(std::move(stop)) {
  for (const std::string& s : stop_) {
    CHECK(!s.empty()) << "stop strings must not be empty";
    max_stop_ = std::max(max_stop_, s.size());
  }
  CHECK(tokenizer != nullptr || stop_.empty())
      << "stop strings need a tokenizer, and this model has none";
  if (tokenizer != nullptr) {
    detok_ = std::make_unique<recipe::StreamDetokenizer>(*tokenizer, skip_special_tokens);
  }
}

bool TextStream::push(int32_t token) {
  if (done_ || detok_ == nullptr) return false;
  const size_t before = text_.size();
  text_ += detok_->push(token);
  if (stop_.empty() || text_.size() == before) return false;
  // A new match must end inside the new text, so it starts at most max_stop_-1 bytes before.
  const size_t from = before >= max_stop_ - 1 ? before - (max_stop_ - 1) : 0;
  size_t best = std::string::npos;
  for (const std::string& s : stop_) {
    const size_t p = text_.find(s, from);
    if (p != std::string::npos && p < best) {
      best = p;
      stop_reason_ = s;
    }
  }
  if (best == std::string::npos) return false;
  text_.resize(best);
  if (emitted_ > best) emitted_ = best;  // cannot happen: emitted text is never a stop prefix
  done_ = true;
  return true;
}

void TextStream::finish() {
  if (done_) return;
  if (detok_ != nullptr) text_ += detok_->flush();
  done_ = true;
}

size_t TextStream::held_back() const {
  size_t held = 0;
  for (const std::string& s : stop_) {
    for (size_t k = std::min(s.size() - 1, text_.size()); k > held; --k) {
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        held = k;
        break;
      }
    }
  }
  return held;
}

std::string TextStream::take() {
  const size_t end = done_ ? text_.size() : text_.size() - held_back();
  if (end <= emitted_) return {};
  std::string out = text_.substr(emitted_, end - emitted_);
  emitted_ = end;
  return out;
}

}  // namespace deepinfer
