// The Engram compressed token map (MODEL_SPEC.md §C.8.1): raw token id -> compressed id.
//
// Built offline from tokenizer.json by tools/make_engram_tables.py and committed as
// models/engram/token_map.bin (format in that script's docstring and models/engram/README.md):
// a header (magic "DIENGMP1", token count, compressed vocabulary size, repeat count, sha256 of
// the vocabulary it was computed from) and the (token, compressed id) pairs of the tokens whose
// normalised key repeats an earlier token's; every other token takes the next new id.
//
// Feed `ids` to EngramHashParams::token_map (ops/engram/engram.h) and check
// `compressed_vocab_size` against the config's engram_compressed_vocab_size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer {

// The committed map of the shipped V4 tokenizer (models/tiny/tokenizer.json), relative to the
// repository root.
inline constexpr const char* kEngramTokenMapPath = "models/engram/token_map.bin";

struct EngramTokenMap {
  std::vector<int32_t> ids;           // [n_tokens] compressed id of each raw token id
  int64_t compressed_vocab_size = 0;  // number of distinct compressed ids (0..C-1 all used)
  std::string vocabulary_sha256;      // hex; see tools/engram_reference.py vocabulary_sha256
};

// Reads and validates `path`. Throws deepinfer::Error naming the file: kNotFound when it cannot
// be opened, kInvalidInput when the magic, sizes or pairs are inconsistent.
EngramTokenMap load_engram_token_map(const std::string& path);

}  // namespace deepinfer
