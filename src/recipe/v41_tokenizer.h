// The built-in tiny V4.1 model's tokenizer: no V4.1 tokenizer.json is public, so it is the
// shipped V4 tokenizer (models/tiny/tokenizer.json; same BPE vocabulary) with the V4.1
// spellings of two added tokens (models/tiny/TOKENIZER_SOURCE.md, models/engram/token_map.json):
// 128799 `<｜System｜>` (a placeholder in V4; V4.1's system-turn marker, used by its chat
// encoding) and 129264 `<｜deepseek_image｜>` (V4's `<｜image2｜>`, V4.1's image_token_id).
// Neither rename changes the Engram token map.
#pragma once

#include <string>

#include "recipe/tokenizer.h"

namespace deepinfer::recipe {

// The V4 tokenizer.json text with the two V4.1 renames applied; throws naming the file when
// it is not the expected V4 tokenizer (a renamed id is missing or spelt otherwise).
std::string v41_tokenizer_json_from_v4(const std::string& v4_tokenizer_path);

}  // namespace deepinfer::recipe
