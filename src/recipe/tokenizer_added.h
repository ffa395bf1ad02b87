// The added vocabulary of a HF tokenizer.json ("added_tokens"): tokens matched in the
// raw text before pre-tokenization and BPE, as HF tokenizers 0.23 does it:
//   1. tokens with normalized=false are matched on the whole text (leftmost-longest,
//      non-overlapping), honouring single_word / lstrip / rstrip;
//   2. tokens with normalized=true are then matched the same way inside each remaining
//      text segment (the normalizer is the identity for the tokenizers we accept).
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::recipe {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by decode(skip_special_tokens=true)
  bool lstrip = false;       // also swallows whitespace before the match
  bool rstrip = false;       // also swallows whitespace after the match
  bool normalized = false;   // matched on normalized text (second pass)
  bool single_word = false;  // only matched when not inside a word
};

// A part of the input: an added token (id >= 0) or plain text (id == -1).
struct TextSegment {
  size_t begin;
  size_t end;
  int32_t id;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  explicit AddedVocabulary(std::vector<AddedToken> tokens);

  // Replaces `out` with the segments of `text` (valid UTF-8), in order; plain-text
  // segments are non-empty.
  void split(std::string_view text, std::vector<TextSegment>& out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }

 private:
  // Byte trie over token contents; node 0 is the root.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;
      int32_t token = -1;  // index into tokens_
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void add(std::string_view s, int32_t token);
    // Longest token starting at text[pos], or -1.
    int32_t longest(std::string_view text, size_t pos, size_t& length) const;
    bool empty() const { return nodes.size() == 1; }
  };
  void find_matches(std::string_view text, size_t base, const Trie& trie, std::vector<TextSegment>& out) const;

  std::vector<AddedToken> tokens_;
  Trie raw_trie_;
  Trie normalized_trie_;
};

}  // namespace deepinfer::recipe
