// Byte-level BPE model of a HF tokenizer.json ("model": {"type": "BPE", ...}).
//
// Pieces arrive as raw bytes; each byte starts as the vocabulary token of its
// byte-level character, then merges are applied lowest rank first (leftmost on ties),
// which is the order HF's priority-queue merge produces. Results are cached per piece.
// Supported options: vocab, merges (as "a b" strings or [a, b] pairs), unk_token and
// fuse_unk (for bytes missing from the vocab), ignore_merges; dropout,
// continuing_subword_prefix, end_of_word_suffix and byte_fallback are rejected.
// Thread-safety: encode() is safe to call concurrently (the cache is internally locked).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "recipe/bpe_cache.h"

namespace deepinfer::recipe {

// Hash for string maps that can be probed with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Vocabulary entries and merges taken out of the JSON by parse_tokenizer_json.
struct BpeInput {
  std::vector<std::pair<std::string, nlohmann::json>> vocab;
  std::vector<nlohmann::json> merges;
};

class BpeModel {
 public:
  // `model` is the "model" object; its vocab / merges are read from `input` when the
  // loader took them out (the ones left in `model` are then empty).
  explicit BpeModel(const nlohmann::json& model, BpeInput input = {});
  ~BpeModel();

  // Appends the ids of one pre-tokenized piece (raw bytes) to `out`.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  // Token text (byte-level characters) -> id, over the model vocabulary only.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The model vocabulary as (token text, id) pairs.
  const StringIdMap& vocab() const { return vocab_; }
  size_t n_merges() const { return n_merges_; }

 private:
  struct MergeEntry {
    uint64_t key;  // (left id << 32) | right id; 0 marks an empty slot (id pairs are never (0,0)+1)
    int32_t rank;
    int32_t new_id;
  };
  // Returns the merge of the pair, or nullptr.
  const MergeEntry* find_merge(int32_t left, int32_t right) const;
  void add_merge(int32_t left, int32_t right, int32_t rank, int32_t new_id);
  void merge_word(std::vector<int32_t>& symbols) const;
  void merge_word_long(std::vector<int32_t>& symbols) const;

  StringIdMap vocab_;
  StringIdMap bytes_vocab_;  // raw bytes -> id (for ignore_merges)
  std::array<int32_t, 256> byte_ids_{};                   // -1: byte not in vocab
  std::vector<MergeEntry> merges_;                         // open addressing, power-of-two size
  // Merges of two byte tokens, indexed by (left byte << 8 | right byte): the first merges
  // of every word, served from a dense 1 MB table instead of the large hash table.
  std::vector<MergeEntry> byte_pairs_;
  std::vector<int16_t> id_byte_;  // byte of a byte token id, -1 otherwise; covers ids <= max byte id
  size_t merge_mask_ = 0;
  size_t n_merges_ = 0;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  mutable BpeCache cache_;
};

}  // namespace deepinfer::recipe
