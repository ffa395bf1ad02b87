#include "grammar/vocabulary.h"

#include <algorithm>
#include <atomic>
#include <numeric>

#include "base/error.h"

namespace deepinfer::grammar {

int plain_char_step(int u, uint8_t b) {
  if (u == 0) {
    if (b >= 0x20 && b <= 0x7E && b != '"' && b != '\\') return 0;
    if (b >= 0xC2 && b <= 0xDF) return 1;
    if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return 2;
    if (b >= 0xF1 && b <= 0xF3) return 3;
    return -1;
  }
  return (b >= 0x80 && b <= 0xBF) ? u - 1 : -1;
}

namespace {

// Characters of a plain-slice token, or 0 if it is not one.
int plain_slice_chars(const std::string& s) {
  int u = 0, chars = 0;
  for (unsigned char c : s) {
    if (u == 0) ++chars;
    u = plain_char_step(u, c);
    if (u < 0) return 0;
  }
  return (u == 0 && chars >= 1 && chars <= Vocabulary::kSliceMaxChars) ? chars : 0;
}

TokenTrie build_trie(const std::vector<std::string>& bytes, std::vector<int32_t> order) {
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes[a] != bytes[b] ? bytes[a] < bytes[b] : a < b;
  });
  TokenTrie t;
  t.nodes.push_back({0, 0, 0, 0, 0});
  std::vector<int32_t> path{0};
  std::string prev;
  for (int32_t id : order) {
    const std::string& s = bytes[id];
    CHECK(s.size() < 65535) << "token " << id << " is too long";
    size_t common = 0;
    while (common < prev.size() && common < s.size() && prev[common] == s[common]) ++common;
    while (path.size() > common + 1) {
      t.nodes[path.back()].end = static_cast<int32_t>(t.nodes.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      t.nodes.push_back({static_cast<uint8_t>(s[d]), static_cast<uint16_t>(d + 1), 0,
                         static_cast<int32_t>(t.tokens.size()), 0});
      path.push_back(static_cast<int32_t>(t.nodes.size()) - 1);
    }
    t.nodes[path.back()].n_tokens++;
    t.tokens.push_back(id);
    prev = s;
  }
  while (!path.empty()) {
    t.nodes[path.back()].end = static_cast<int32_t>(t.nodes.size());
    path.pop_back();
  }
  t.nodes.push_back({0, 0, 0, static_cast<int32_t>(t.tokens.size()), 0});  // sentinel
  return t;
}

}  // namespace

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_token_ids)
    : token_bytes_(std::move(token_bytes)), stop_tokens_(std::move(stop_token_ids)) {
  static std::atomic<uint64_t> next_uid{1};
  uid_ = next_uid++;
  is_stop_.assign(token_bytes_.size(), 0);
  for (int32_t id : stop_tokens_) {
    CHECK(id >= 0 && id < size()) << "stop token id " << id << " outside the vocabulary of " << size();
    is_stop_[id] = 1;
  }
  std::vector<int32_t> all, rest;
  std::vector<uint8_t>& chars = slice_chars_;
  chars.assign(size(), 0);
  slice_mask_.assign(n_mask_words(), 0);
  slice_by_chars_.assign(kSliceMaxChars + 1, std::vector<uint32_t>(n_mask_words(), 0));
  for (int32_t id = 0; id < size(); ++id) {
    if (token_bytes_[id].empty() || is_stop_[id]) continue;
    all.push_back(id);
    max_token_bytes_ = std::max(max_token_bytes_, static_cast<int32_t>(token_bytes_[id].size()));
    chars[id] = static_cast<uint8_t>(plain_slice_chars(token_bytes_[id]));
    if (chars[id]) {
      AsciiSet ascii{};
      for (unsigned char c : token_bytes_[id])
        ascii[c < 128 ? c >> 6 : 0] |= uint64_t{1} << (c < 128 ? c & 63 : kNonAscii);
      slice_ids_.push_back(id);
      slice_ascii_.push_back(ascii);
      slice_mask_[id >> 5] |= 1u << (id & 31);
      for (int k = chars[id]; k <= kSliceMaxChars; ++k) slice_by_chars_[k][id >> 5] |= 1u << (id & 31);
    } else {
      rest.push_back(id);
    }
  }
  // The non-ASCII characters of each slice token, as ids of distinct characters.
  std::map<std::string, int32_t> char_ids;
  slice_char_begin_.push_back(0);
  for (int32_t id : slice_ids_) {
    const std::string& b = token_bytes_[id];
    for (size_t p = 0; p < b.size();) {
      const unsigned char c = b[p];
      const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      if (len > 1) {
        auto [it, fresh] = char_ids.emplace(b.substr(p, len), static_cast<int32_t>(nonascii_chars_.size()));
        if (fresh) nonascii_chars_.push_back(it->first);
        slice_char_ids_.push_back(it->second);
      }
      p += len;
    }
    slice_char_begin_.push_back(static_cast<int32_t>(slice_char_ids_.size()));
  }
  char_token_begin_.assign(nonascii_chars_.size() + 1, 0);
  for (int32_t c : slice_char_ids_) ++char_token_begin_[c + 1];
  for (size_t c = 0; c < nonascii_chars_.size(); ++c) char_token_begin_[c + 1] += char_token_begin_[c];
  char_tokens_.resize(slice_char_ids_.size());
  {
    std::vector<int32_t> fill(char_token_begin_.begin(), char_token_begin_.end() - 1);
    for (size_t i = 0; i < slice_ids_.size(); ++i)
      for (int32_t p = slice_char_begin_[i]; p < slice_char_begin_[i + 1]; ++p)
        char_tokens_[fill[slice_char_ids_[p]]++] = slice_ids_[i];
  }
  full_ = build_trie(token_bytes_, std::move(all));
  rest_ = build_trie(token_bytes_, std::move(rest));
  std::vector<int32_t> longer;
  short_mask_.assign(n_mask_words(), 0);
  for (int32_t id = 0; id < size(); ++id) {
    if (token_bytes_[id].empty() || is_stop_[id]) continue;
    if (static_cast<int>(token_bytes_[id].size()) > kShortTokenBytes) longer.push_back(id);
    else short_mask_[id >> 5] |= 1u << (id & 31);
  }
  long_ = build_trie(token_bytes_, std::move(longer));
  // Subtree maxima, children before parents (reverse preorder).
  const int32_t n = full_.n_nodes();
  subtree_slice_chars_.assign(n, 0);
  subtree_ascii_.assign(n, AsciiSet{});
  for (int32_t i = n - 1; i >= 0; --i) {
    uint8_t m = 0;
    AsciiSet a{};
    const auto& node = full_.nodes[i];
    for (int32_t k = 0; k < node.n_tokens; ++k) {
      const int32_t id = full_.tokens[node.token_begin + k];
      uint8_t c = chars[id];
      m = std::max<uint8_t>(m, c ? c : 255);
      for (unsigned char b : token_bytes_[id]) a[b < 128 ? b >> 6 : 0] |= uint64_t{1} << (b < 128 ? b & 63 : kNonAscii);
    }
    for (int32_t c = i + 1; c < node.end; c = full_.nodes[c].end) {
      m = std::max(m, subtree_slice_chars_[c]);
      a[0] |= subtree_ascii_[c][0];
      a[1] |= subtree_ascii_[c][1];
    }
    subtree_slice_chars_[i] = m;
    subtree_ascii_[i] = a;
  }
}

std::shared_ptr<const std::vector<uint32_t>> Vocabulary::slice_mask_without(const AsciiSet& excluded, int k,
                                                                        const std::vector<int32_t>& dead_chars) const {
  auto key = std::make_tuple(excluded, k, dead_chars);
  {
    std::lock_guard<std::mutex> lock(slice_without_mu_);
    auto it = slice_masks_without_.find(key);
    if (it != slice_masks_without_.end()) return it->second;
  }
  if (!dead_chars.empty() && dead_chars.size() <= 256) {
    // A few dead characters: the mask without them, less the tokens that hold one.
    auto out = std::make_shared<std::vector<uint32_t>>(*slice_mask_without(excluded, k));
    for (int32_t c : dead_chars)
      for (int32_t p = char_token_begin_[c]; p < char_token_begin_[c + 1]; ++p)
        (*out)[char_tokens_[p] >> 5] &= ~(1u << (char_tokens_[p] & 31));
    std::lock_guard<std::mutex> lock(slice_without_mu_);
    if (slice_masks_without_.size() < 1024) slice_masks_without_.emplace(std::move(key), out);
    return out;
  }
  std::vector<uint8_t> dead(nonascii_chars_.size(), 0);
  for (int32_t c : dead_chars) dead[c] = 1;
  auto out = std::make_shared<std::vector<uint32_t>>(n_mask_words(), 0);
  for (size_t i = 0; i < slice_ids_.size(); ++i) {
    const int32_t id = slice_ids_[i];
    if (slice_chars_[id] > k || (slice_ascii_[i][0] & excluded[0]) != 0 || (slice_ascii_[i][1] & excluded[1]) != 0) continue;
    bool ok = true;
    if (!dead_chars.empty())
      for (int32_t p = slice_char_begin_[i]; p < slice_char_begin_[i + 1] && ok; ++p) ok = !dead[slice_char_ids_[p]];
    if (ok) (*out)[id >> 5] |= 1u << (id & 31);
  }
  std::lock_guard<std::mutex> lock(slice_without_mu_);
  if (slice_masks_without_.size() < 1024) slice_masks_without_.emplace(std::move(key), out);
  return out;
}

}  // namespace deepinfer::grammar
