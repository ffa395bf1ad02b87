#include "recipe/chat_prompt.h"

namespace deepinfer::recipe {

void PromptBuilder::special(std::string_view s) {
  if (s.empty()) return;
  const size_t begin = out_.prompt.size();
  out_.prompt.append(s);
  out_.special_ranges.emplace_back(begin, out_.prompt.size());
}

void PromptBuilder::template_text(std::string_view s) {
  const std::string_view markers[] = {tokens_.dsml, tokens_.thinking_start, tokens_.thinking_end};
  size_t pos = 0;
  while (pos < s.size()) {
    size_t best = std::string_view::npos;
    std::string_view best_marker;
    for (std::string_view m : markers) {
      if (m.empty()) continue;
      const size_t at = s.find(m, pos);
      // At equal positions prefer the longer marker ("</think>" over a "<think>" inside it).
      if (at != std::string_view::npos &&
          (best == std::string_view::npos || at < best ||
           (at == best && m.size() > best_marker.size()))) {
        best = at;
        best_marker = m;
      }
    }
    if (best == std::string_view::npos) {
      text(s.substr(pos));
      return;
    }
    text(s.substr(pos, best - pos));
    special(best_marker);
    pos = best + best_marker.size();
  }
}

void PromptBuilder::content(std::string_view s, int n_images) {
  const std::string_view image = tokens_.image;
  size_t pos = 0;
  while (n_images > 0 && !image.empty()) {
    const size_t at = s.find(image, pos);
    if (at == std::string_view::npos) break;
    text(s.substr(pos, at - pos));
    special(image);
    ++out_.n_images;
    --n_images;
    pos = at + image.size();
  }
  text(s.substr(pos));
}

bool PromptBuilder::strip_suffix(std::string_view s) {
  std::string& p = out_.prompt;
  if (s.empty() || p.size() < s.size() || p.compare(p.size() - s.size(), s.size(), s) != 0) {
    return false;
  }
  p.resize(p.size() - s.size());
  while (!out_.special_ranges.empty() && out_.special_ranges.back().second > p.size()) {
    out_.special_ranges.pop_back();
  }
  return true;
}

}  // namespace deepinfer::recipe
