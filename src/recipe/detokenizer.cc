#include "recipe/detokenizer.h"

#include "recipe/unicode_utf8.h"

namespace deepinfer::recipe {

StreamDetokenizer::StreamDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

void StreamDetokenizer::push_into(int32_t id, std::string& out) {
  if (!tokenizer_->has_token(id)) return;
  if (tokenizer_->is_added(id)) {
    if (skip_special_tokens_ && tokenizer_->is_special(id)) return;
    // Added tokens end a byte run in decode(): an incomplete character before one is final.
    append_utf8_lossy(out, pending_);
    pending_.clear();
    out += tokenizer_->token_bytes(id);
    return;
  }
  pending_ += tokenizer_->token_bytes(id);
  const size_t tail = utf8_incomplete_tail(pending_);
  append_utf8_lossy(out, std::string_view(pending_).substr(0, pending_.size() - tail));
  pending_.erase(0, pending_.size() - tail);
}

std::string StreamDetokenizer::push(int32_t id) {
  std::string out;
  push_into(id, out);
  return out;
}

std::string StreamDetokenizer::push(std::span<const int32_t> ids) {
  std::string out;
  for (int32_t id : ids) push_into(id, out);
  return out;
}

std::string StreamDetokenizer::flush() {
  std::string out;
  append_utf8_lossy(out, pending_);
  pending_.clear();
  return out;
}

}  // namespace deepinfer::recipe
