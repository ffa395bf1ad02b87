#include "recipe/chat_encoding.h"

#include "recipe/encoding_v4.h"
#include "recipe/encoding_v41.h"

namespace deepinfer::recipe {

RenderedPrompt render_prompt(const Conversation& conv, ChatVersion version,
                             const SpecialTokens& tokens) {
  return version == ChatVersion::kV4 ? render_prompt_v4(conv, tokens)
                                     : render_prompt_v41(conv, tokens);
}

}  // namespace deepinfer::recipe
