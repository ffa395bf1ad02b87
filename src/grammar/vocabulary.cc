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

bool in_plain_slice(const std::string& s) {
  int u = 0, chars = 0;
  for (unsigned char c : s) {
    if (u == 0) ++chars;
    u = plain_char_step(u, c);
    if (u < 0) return false;
  }
  return u == 0 && chars >= 1 && chars <= Vocabulary::kSliceMaxChars;
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
  slice_mask_.assign(n_mask_words(), 0);
  for (int32_t id = 0; id < size(); ++id) {
    if (token_bytes_[id].empty() || is_stop_[id]) continue;
    all.push_back(id);
    if (in_plain_slice(token_bytes_[id])) slice_mask_[id >> 5] |= 1u << (id & 31);
    else rest.push_back(id);
  }
  full_ = build_trie(token_bytes_, std::move(all));
  rest_ = build_trie(token_bytes_, std::move(rest));
}

}  // namespace deepinfer::grammar
