// Tokenizer: a byte-for-byte reimplementation of HF `tokenizers` (0.23) for the
// byte-level BPE tokenizer.json files DeepSeek ships (V3, V4, V4.1).
//
// Pipeline of encode(): added tokens are split out of the raw text first (see
// tokenizer_added.h); each remaining segment is pre-tokenized (pretokenizer.h) and every
// piece is BPE-encoded on raw bytes (bpe.h). Supported tokenizer.json contents, anything
// else is rejected with deepinfer::Error (kUnsupported, or kInvalidInput for malformed
// files) naming the culprit:
//   normalizer:     null, or "Sequence" of nothing but (nested) empty sequences
//   pre_tokenizer:  Sequence / Split / ByteLevel (a ByteLevel step is required)
//   model:          BPE
//   post_processor: null or ByteLevel (neither adds tokens: add_special_tokens has no effect)
//   decoder:        ByteLevel
//   truncation, padding: null
//
// Ids are int32_t in [0, vocab_size()); the id space may have holes (no token), which
// encode never produces and decode skips. Added-token ids follow HF's assignment (file
// order after the model vocabulary), which for DeepSeek files equals the written ids; a
// file whose written ids differ loads with a warning and HF's ids.
//
// Thread-safety: a Tokenizer is immutable after loading, except its internal BPE word
// cache which is locked; every const method may be called from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "recipe/tokenizer_added.h"

namespace deepinfer::recipe {

class BpeModel;
class PreTokenizer;

class Tokenizer {
 public:
  // Loads a tokenizer.json file / its text. Throws deepinfer::Error (kNotFound for a
  // missing file, kInvalidInput for malformed JSON or fields, kUnsupported for unknown types).
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_json(std::string_view json);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text -> ids, identical to HF `Tokenizer.encode(text, add_special_tokens).ids`.
  // Added-token spellings in `text` (special or not) become their ids. `text` must be
  // valid UTF-8 (throws kInvalidInput naming the byte offset otherwise).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // Like encode() but added-token spellings are NOT recognised: the whole text goes
  // through pre-tokenization and BPE ("<think>" becomes ordinary tokens). This is what
  // prompt encoding uses for user-provided text.
  std::vector<int32_t> encode_ordinary(std::string_view text) const;

  // Appends the ids of `text` to `out`: encode() when parse_added_tokens, else
  // encode_ordinary(). For building a prompt from pieces without temporary vectors.
  void encode_append(std::string_view text, bool parse_added_tokens, std::vector<int32_t>& out) const {
    encode_into(text, parse_added_tokens, out);
  }

  // encode() of every text, spread over `n_threads` threads (0: all OpenMP threads).
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& texts,
                                                 bool add_special_tokens = true, int n_threads = 0) const;

  // Ids -> text, identical to HF `Tokenizer.decode(ids, skip_special_tokens)`: runs of
  // model tokens are decoded to bytes and converted with U+FFFD for invalid UTF-8; added
  // tokens contribute their content verbatim (special ones are dropped when
  // skip_special_tokens); ids with no token are skipped.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Token text as stored in tokenizer.json (byte-level characters for model tokens).
  std::optional<std::string> id_to_token(int32_t id) const;

  // Raw bytes a token decodes to (what decode() contributes for it before UTF-8 repair):
  // byte-level-decoded bytes for model tokens, the content for added tokens, empty for
  // ids with no token or out of range. Valid for the Tokenizer's lifetime.
  std::string_view token_bytes(int32_t id) const;

  // Size of the id space: 1 + the largest id (129280 for DeepSeek V3/V4).
  int32_t vocab_size() const { return static_cast<int32_t>(token_bytes_.size()); }
  bool has_token(int32_t id) const;
  bool is_added(int32_t id) const;
  bool is_special(int32_t id) const;  // an added token with special=true
  const std::vector<AddedToken>& added_tokens() const { return added_.tokens(); }

 private:
  Tokenizer();
  void encode_into(std::string_view text, bool parse_added, std::vector<int32_t>& out) const;
  void encode_segment(std::string_view segment, std::vector<int32_t>& out) const;

  enum Kind : uint8_t { kNone = 0, kModel = 1, kAdded = 2, kSpecial = 3 };

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  AddedVocabulary added_;
  std::unordered_map<std::string, int32_t> added_ids_;
  std::vector<std::string> tokens_;       // id -> token text
  std::vector<std::string> token_bytes_;  // id -> raw bytes
  std::vector<uint8_t> kinds_;            // id -> Kind
};

}  // namespace deepinfer::recipe
