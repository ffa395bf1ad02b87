// The pre-tokenizer of a HF tokenizer.json: splits one text segment (the text between
// added tokens) into pieces that BPE encodes independently.
//
// Supported (exactly as HF tokenizers 0.23 does them), anything else is rejected with
// kUnsupported naming the type:
//   - "Sequence" of the steps below, applied in order to every piece;
//   - "Split" with a {"Regex": ...} or {"String": ...} pattern, every behavior
//     (Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous) and `invert`;
//   - "ByteLevel" (must be the last step) with add_prefix_space=false; use_regex=true
//     adds the GPT-2 split. It marks the pieces as byte-level (BPE runs on raw bytes).
// Thread-safety: immutable after construction; split() may run concurrently.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "recipe/pretokenizer_regex.h"

namespace deepinfer::recipe {

// [begin, end) byte offsets into the segment given to split().
struct Piece {
  size_t begin;
  size_t end;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  // `config` is the "pre_tokenizer" value of tokenizer.json (may be null: one piece).
  explicit PreTokenizer(const nlohmann::json& config);
  ~PreTokenizer();

  // Replaces `out` with the non-empty pieces of `segment`, in order.
  void split(std::string_view segment, std::vector<Piece>& out) const;

  // True when a ByteLevel step is present (BPE then works on raw bytes).
  bool byte_level() const { return byte_level_; }

 private:
  struct Step {
    std::unique_ptr<Regex> regex;
    SplitBehavior behavior;
    bool invert;
  };
  void add_step(const nlohmann::json& config, bool is_last);

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace deepinfer::recipe
