// Token ids of a rendered chat prompt (recipe/chat_prompt.h): each plain span is encoded
// without the added vocabulary (text a user typed stays text) and each special range is its
// single token. Throws deepinfer::Error (kInvalidInput) when the tokenizer lacks one of the
// special tokens the encoder wrote.
#pragma once

#include <cstdint>
#include <vector>

#include "recipe/chat_prompt.h"
#include "recipe/tokenizer.h"

namespace deepinfer::server {

std::vector<int32_t> prompt_token_ids(const recipe::RenderedPrompt& prompt,
                                      const recipe::Tokenizer& tokenizer);

}  // namespace deepinfer::server
