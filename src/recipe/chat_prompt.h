// A rendered prompt and the builder the V4/V4.1 encoders write it with.
//
// `special_ranges` are the byte ranges [begin, end) of `prompt` that hold special tokens the
// encoder wrote (BOS, role markers, <think>, DSML markers, image placeholders). Everything
// between them is plain text: a prompt is tokenized by encoding each plain span WITHOUT the
// added vocabulary and each special range as its single token, so a user who types
// "<｜User｜>" gets text, not a role marker (deepseek-recipe's prompt encoding).
// deepseek-recipe's Python binding reports the same ranges in code points.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deepinfer::recipe {

// Spellings of the special tokens the encoders write; defaults are deepseek-recipe's.
struct SpecialTokens {
  std::string bos = "<｜begin▁of▁sentence｜>";
  std::string eos = "<｜end▁of▁sentence｜>";
  std::string thinking_start = "<think>";
  std::string thinking_end = "</think>";
  std::string system = "<｜System｜>";
  std::string user = "<｜User｜>";
  std::string assistant = "<｜Assistant｜>";
  std::string latest_reminder = "<｜latest_reminder｜>";
  std::string dsml = "｜DSML｜";
  std::string image = "<｜image｜>";
};

struct RenderedPrompt {
  std::string prompt;
  std::vector<std::pair<size_t, size_t>> special_ranges;  // ascending, disjoint, bytes
  int n_images = 0;  // image placeholders written (in prompt order)
};

class PromptBuilder {
 public:
  explicit PromptBuilder(const SpecialTokens& tokens) : tokens_(tokens) {}

  void text(std::string_view s) { out_.prompt.append(s); }
  void special(std::string_view s);
  // Template text in which every occurrence of the DSML marker and of <think>/</think> is a
  // special token (the tools section of the system prompt).
  void template_text(std::string_view s);
  // Message content whose first `n_images` image-token occurrences are placeholders.
  void content(std::string_view s, int n_images);
  // Removes `s` from the end of the prompt if it is there (and its special range).
  bool strip_suffix(std::string_view s);

  const SpecialTokens& tokens() const { return tokens_; }
  size_t size() const { return out_.prompt.size(); }
  RenderedPrompt take() { return std::move(out_); }

 private:
  const SpecialTokens& tokens_;
  RenderedPrompt out_;
};

}  // namespace deepinfer::recipe
