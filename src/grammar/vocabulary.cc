#include "grammar/vocabulary.h"

#include <algorithm>
#include <numeric>

#include "base/error.h"

namespace deepinfer::grammar {

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_token_ids)
    : token_bytes_(std::move(token_bytes)), stop_tokens_(std::move(stop_token_ids)) {
  is_stop_.assign(token_bytes_.size(), 0);
  for (int32_t id : stop_tokens_) {
    CHECK(id >= 0 && id < size()) << "stop token id " << id << " outside the vocabulary of " << size();
    is_stop_[id] = 1;
  }
  std::vector<int32_t> order;
  for (int32_t id = 0; id < size(); ++id)
    if (!token_bytes_[id].empty() && !is_stop_[id]) order.push_back(id);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes_[a] != token_bytes_[b] ? token_bytes_[a] < token_bytes_[b] : a < b;
  });
  trie_.push_back({0, 0, 0, 0, 0});
  std::vector<int32_t> path{0};  // path[d] = node at depth d on the current branch
  std::string prev;
  for (int32_t id : order) {
    const std::string& s = token_bytes_[id];
    CHECK(s.size() < 65535) << "token " << id << " is too long";
    size_t common = 0;
    while (common < prev.size() && common < s.size() && prev[common] == s[common]) ++common;
    while (path.size() > common + 1) {
      trie_[path.back()].end = static_cast<int32_t>(trie_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      trie_.push_back({static_cast<uint8_t>(s[d]), static_cast<uint16_t>(d + 1), 0,
                       static_cast<int32_t>(trie_tokens_.size()), 0});
      path.push_back(static_cast<int32_t>(trie_.size()) - 1);
    }
    trie_[path.back()].n_tokens++;
    trie_tokens_.push_back(id);
    prev = s;
  }
  while (!path.empty()) {
    trie_[path.back()].end = static_cast<int32_t>(trie_.size());
    path.pop_back();
  }
  trie_.push_back({0, 0, 0, static_cast<int32_t>(trie_tokens_.size()), 0});  // sentinel
}

}  // namespace deepinfer::grammar
