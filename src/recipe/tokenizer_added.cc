#include "recipe/tokenizer_added.h"

#include <algorithm>

#include "recipe/pretokenizer_regex.h"
#include "recipe/scratch.h"
#include "recipe/unicode_utf8.h"

namespace deepinfer::recipe {
namespace {

// A word character for single_word tokens: HF tests it with the Rust regex \w, which is
// Alphabetic, marks, decimal digits, connector punctuation and the join controls.
bool is_word_char(std::string_view ch) {
  static const Regex word("^[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]", false);
  thread_local std::vector<size_t> m;
  m.clear();
  word.find_all(ch, m);
  return !m.empty();
}

// Byte offset where the last character of s[0, end) starts.
size_t last_char_start(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

// The single character starting at byte `pos` of valid UTF-8 text.
std::string_view char_at(std::string_view s, size_t pos) {
  size_t k = pos;
  utf8_next(s, k);
  return s.substr(pos, k - pos);
}

}  // namespace

void AddedVocabulary::Trie::add(std::string_view s, int32_t token) {
  int32_t node = 0;
  for (char c : s) {
    const auto b = static_cast<uint8_t>(c);
    auto& ch = nodes[node].children;
    auto it = std::find_if(ch.begin(), ch.end(), [b](const auto& p) { return p.first == b; });
    if (it != ch.end()) {
      node = it->second;
    } else {
      const auto next = static_cast<int32_t>(nodes.size());
      nodes[node].children.emplace_back(b, next);  // may reallocate nodes below: index again
      nodes.emplace_back();
      node = next;
    }
  }
  nodes[node].token = token;
  if (!s.empty()) first_byte[static_cast<uint8_t>(s[0])] = true;
}

int32_t AddedVocabulary::Trie::longest(std::string_view text, size_t pos, size_t& length) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    const auto& ch = nodes[node].children;
    auto it = std::find_if(ch.begin(), ch.end(), [b](const auto& p) { return p.first == b; });
    if (it == ch.end()) break;
    node = it->second;
    if (nodes[node].token >= 0) {
      best = nodes[node].token;
      length = i + 1 - pos;
    }
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;
    (tokens_[i].normalized ? normalized_trie_ : raw_trie_).add(tokens_[i].content, static_cast<int32_t>(i));
  }
}

// HF AddedVocabulary::find_matches on text (a segment starting at byte `base` of the input).
void AddedVocabulary::find_matches(std::string_view text, size_t base, const Trie& trie,
                                   std::vector<TextSegment>& out) const {
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!trie.first_byte[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t length = 0;
    const int32_t t = trie.longest(text, pos, length);
    if (t < 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + length;
    pos = stop;  // matches never overlap, whatever happens to this one below
    const AddedToken& token = tokens_[t];
    if (token.single_word) {
      const bool start_space = start == 0 || !is_word_char(char_at(text, last_char_start(text, start)));
      const bool stop_space = stop == text.size() || !is_word_char(char_at(text, stop));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      size_t s = start;
      while (s > 0) {
        const size_t c = last_char_start(text, s);
        size_t k = c;
        if (!is_unicode_whitespace(utf8_next(text, k))) break;
        s = c;
      }
      start = std::max(s, start_offset);
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t k = stop;
        if (!is_unicode_whitespace(utf8_next(text, k))) break;
        stop = k;
      }
    }
    if (start_offset < start) out.push_back({base + start_offset, base + start, -1});
    out.push_back({base + start, base + stop, token.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({base + start_offset, base + text.size(), -1});
}

void AddedVocabulary::split(std::string_view text, std::vector<TextSegment>& out) const {
  out.clear();
  if (text.empty()) return;
  if (raw_trie_.empty() && normalized_trie_.empty()) {
    out.push_back({0, text.size(), -1});
    return;
  }
  thread_local std::vector<TextSegment> first;
  first.clear();
  find_matches(text, 0, raw_trie_, first);
  if (normalized_trie_.empty()) {
    out = first;
    release_large_scratch(first);
    return;
  }
  for (const TextSegment& seg : first) {
    if (seg.id >= 0) {
      out.push_back(seg);
    } else {
      find_matches(text.substr(seg.begin, seg.end - seg.begin), seg.begin, normalized_trie_, out);
    }
  }
  release_large_scratch(first);
}

}  // namespace deepinfer::recipe
