// The token vocabulary as the grammar engine sees it: token id -> the raw bytes it decodes to.
//
// Independent of the tokenizer code: the caller passes `token_bytes` (size n_vocab; special or
// unused ids map to "" and are never allowed by a grammar) and the stop token ids (EOS and any
// other stop tokens, allowed exactly when the grammar can end). Builds a byte trie over the
// non-empty tokens in depth-first order, which the mask computation walks.
// Immutable after construction; share one instance (shared_ptr) across grammars and threads.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace deepinfer::grammar {

// A byte trie over a set of tokens, in preorder (see Vocabulary::trie()).
struct TokenTrie {
  struct Node {
    uint8_t byte;          // the byte leading to this node (unused for the root)
    uint16_t depth;        // number of bytes from the root
    int32_t end;           // index one past the last node of this node's subtree
    int32_t token_begin;   // tokens ending here: tokens[token_begin, token_begin + n_tokens)
    int32_t n_tokens;
  };
  // Node 0 is the root; node size()-1 is a sentinel whose token_begin is the total, so a
  // subtree's tokens are the contiguous range [nodes[i].token_begin, nodes[nodes[i].end].token_begin).
  std::vector<Node> nodes;
  std::vector<int32_t> tokens;
  int32_t n_nodes() const { return static_cast<int32_t>(nodes.size()) - 1; }
};

class Vocabulary {
 public:
  using TrieNode = TokenTrie::Node;
  // Tokens of the "plain" slice have at most this many characters.
  static constexpr int kSliceMaxChars = 16;

  Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_token_ids);

  int32_t size() const { return static_cast<int32_t>(token_bytes_.size()); }
  // Unique per Vocabulary object in this process (keys of process-wide caches; never reused).
  uint64_t uid() const { return uid_; }
  int32_t n_mask_words() const { return (size() + 31) / 32; }
  const std::string& token_bytes(int32_t id) const { return token_bytes_[id]; }
  const std::vector<int32_t>& stop_tokens() const { return stop_tokens_; }
  // Bytes of the longest non-stop token (the deepest trie node).
  int32_t max_token_bytes() const { return max_token_bytes_; }
  // Tokens of at most kShortTokenBytes bytes (a mask), and a trie of the longer ones (914 of
  // DeepSeek-V3's 128k): a mask entry for the short tokens reads at most that many bytes of its
  // automaton, so states alike that far share it and only the long tokens are walked per state.
  static constexpr int kShortTokenBytes = 16;
  const std::vector<uint32_t>& short_token_mask() const { return short_mask_; }
  const TokenTrie& long_trie() const { return long_; }
  bool is_stop(int32_t id) const { return is_stop_[id] != 0; }

  // All non-empty, non-stop tokens.
  const TokenTrie& full_trie() const { return full_; }
  const std::vector<TrieNode>& trie() const { return full_.nodes; }
  int32_t n_trie_nodes() const { return full_.n_nodes(); }
  const std::vector<int32_t>& trie_tokens() const { return full_.tokens; }

  // The plain slice (the llguidance "slicer" idea): tokens of 1..kSliceMaxChars characters, each
  // printable ASCII other than `"` and `\`, or a UTF-8 sequence whose lead byte is C2-DF, E1-EC,
  // EE-EF or F1-F3 (no overlong/surrogate special cases). If an automaton state survives every
  // such character sequence, the whole slice is allowed without walking it.
  const std::vector<uint32_t>& slice_mask() const { return slice_mask_; }
  // The tokens outside the slice.
  const TokenTrie& rest_trie() const { return rest_; }
  // Slice tokens of at most k characters (k = 0..kSliceMaxChars; k = 0 is empty).
  const std::vector<uint32_t>& slice_mask_up_to(int k) const { return slice_by_chars_[k]; }
  // For each full_trie() node: the most characters of any token in its subtree if all of them
  // are slice tokens, else 255. A walk that knows every slice token of <= k characters is
  // accepted can skip subtrees with value <= k.
  const std::vector<uint8_t>& subtree_slice_chars() const { return subtree_slice_chars_; }

  // Sets of ASCII characters (bit c: character c). Bit kNonAscii (NUL, never a plain character)
  // stands for every non-ASCII character: a set holding it excludes the slice tokens with any
  // non-ASCII character (automata that survive every ASCII sequence but kill a few code points,
  // e.g. the `.` of a pattern: U+2028, U+2029; `\S`: the Unicode spaces).
  using AsciiSet = std::array<uint64_t, 2>;
  static constexpr int kNonAscii = 0;
  // For each full_trie() node: the characters of the tokens in its subtree as an AsciiSet. With
  // subtree_slice_chars(), a walk that knows every slice token of <= k characters avoiding a set
  // is accepted skips the subtrees whose value is <= k and whose characters avoid the set
  // ([^,"]+, [A-Za-z0-9 ]{1,32}, `.` with its dead code points).
  const std::vector<AsciiSet>& subtree_ascii() const { return subtree_ascii_; }
  // The distinct non-ASCII characters of the slice tokens (UTF-8 bytes; ids index this list).
  const std::vector<std::string>& slice_nonascii_chars() const { return nonascii_chars_; }
  // The slice tokens of at most k characters none of which is in `excluded` or among the
  // non-ASCII characters `dead_chars` (sorted ids of slice_nonascii_chars()). Cached.
  std::shared_ptr<const std::vector<uint32_t>> slice_mask_without(const AsciiSet& excluded, int k,
                                                                  const std::vector<int32_t>& dead_chars = {}) const;

 private:
  std::vector<std::string> token_bytes_;
  std::vector<int32_t> stop_tokens_;
  std::vector<uint8_t> is_stop_;
  TokenTrie full_, rest_, long_;
  std::vector<uint32_t> short_mask_;
  std::vector<uint32_t> slice_mask_;
  std::vector<std::vector<uint32_t>> slice_by_chars_;
  std::vector<uint8_t> subtree_slice_chars_;
  std::vector<AsciiSet> subtree_ascii_;
  std::vector<uint8_t> slice_chars_;  // per token: its characters if a slice token, else 0
  uint64_t uid_;
  int32_t max_token_bytes_ = 0;
  mutable std::mutex slice_without_mu_;
  mutable std::map<std::tuple<AsciiSet, int, std::vector<int32_t>>, std::shared_ptr<const std::vector<uint32_t>>>
      slice_masks_without_;
  std::vector<std::string> nonascii_chars_;
  std::vector<int32_t> slice_char_begin_, slice_char_ids_;  // per slice token: its non-ASCII character ids
  std::vector<int32_t> char_token_begin_, char_tokens_;      // per non-ASCII character: the slice tokens holding it
  std::vector<int32_t> slice_ids_;          // the slice tokens
  std::vector<AsciiSet> slice_ascii_;       // per slice token (same order): its characters (AsciiSet)
};

// Byte classes of the plain-slice characters, as a 5-state automaton over UTF-8:
// state 0 = at a character boundary; states 1..3 = that many continuation bytes still due.
// Returns the next state, or -1 if `b` is not allowed in state `u`.
int plain_char_step(int u, uint8_t b);

}  // namespace deepinfer::grammar
