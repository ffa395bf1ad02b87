// The token vocabulary as the grammar engine sees it: token id -> the raw bytes it decodes to.
//
// Independent of the tokenizer code: the caller passes `token_bytes` (size n_vocab; special or
// unused ids map to "" and are never allowed by a grammar) and the stop token ids (EOS and any
// other stop tokens, allowed exactly when the grammar can end). Builds a byte trie over the
// non-empty tokens in depth-first order, which the mask computation walks.
// Immutable after construction; share one instance (shared_ptr) across grammars and threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace deepinfer::grammar {

class Vocabulary {
 public:
  struct TrieNode {
    uint8_t byte;          // the byte leading to this node (unused for the root)
    uint16_t depth;        // number of bytes from the root
    int32_t end;           // index one past the last node of this node's subtree
    int32_t token_begin;   // tokens ending here: trie_tokens()[token_begin, token_begin + n_tokens)
    int32_t n_tokens;
  };

  Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_token_ids);

  int32_t size() const { return static_cast<int32_t>(token_bytes_.size()); }
  int32_t n_mask_words() const { return (size() + 31) / 32; }
  const std::string& token_bytes(int32_t id) const { return token_bytes_[id]; }
  const std::vector<int32_t>& stop_tokens() const { return stop_tokens_; }
  bool is_stop(int32_t id) const { return is_stop_[id] != 0; }

  // Node 0 is the root; nodes are in preorder (a node's subtree is [i + 1, end)). Node size()
  // is a sentinel whose token_begin is the total, so a subtree's tokens are the contiguous range
  // [trie[i].token_begin, trie[trie[i].end].token_begin).
  const std::vector<TrieNode>& trie() const { return trie_; }
  int32_t n_trie_nodes() const { return static_cast<int32_t>(trie_.size()) - 1; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }

 private:
  std::vector<std::string> token_bytes_;
  std::vector<int32_t> stop_tokens_;
  std::vector<uint8_t> is_stop_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
};

}  // namespace deepinfer::grammar
