// Chat encoding: a Conversation (messages.h) -> the DeepSeek V4 or V4.1 prompt string,
// byte-identical to deepseek-recipe 0.2.0 (`DeepseekV4Encoding` / `DeepseekV41Encoding`
// `.render_conversation(...)`), plus token ids through a tokenizer.
//
// Behaviour in brief (details in encoding_v4.h / encoding_v41.h):
//  - thinking mode opens the generation turn with "<think>", chat mode with "</think>";
//  - the reasoning effort paragraph/number goes at the top of the system prompt;
//  - tools (unless tool_choice is "none") become a "## Tools" system section, history tool
//    calls are written in DSML, tool results as <tool_result>...</tool_result> user text
//    ordered like the calls;
//  - reasoning of history turns is dropped except where deepseek-recipe keeps it;
//  - a trailing assistant message with `prefix` is continued instead of closed.
// Errors (kInvalidInput, message names the culprit): see validate_conversation().
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/chat_prompt.h"
#include "recipe/messages.h"
#include "recipe/output_parser.h"

namespace deepinfer::recipe {

enum class ChatVersion { kV4, kV41 };
ChatVersion parse_chat_version(std::string_view name);  // "v4" | "v4.1" (case-insensitive)

// Throws deepinfer::Error (kInvalidInput) for: empty tool or tool-call names, tool
// parameters that are neither a JSON object nor null, reasoning fields on non-assistant
// messages, tool calls on non-assistant messages, negative image counts, a numeric
// reasoning effort for V4 or one outside 1..100 for V4.1, a json_schema response
// format whose schema is null, more than one prefix message or a prefix message that is not
// an assistant message.
void validate_conversation(const Conversation& conv, ChatVersion version);

RenderedPrompt render_prompt(const Conversation& conv, ChatVersion version,
                             const SpecialTokens& tokens = SpecialTokens());

// How to parse the completion of a prompt rendered from `conv` (deepseek-recipe's request
// conversion): tool calls are parsed when tools are declared (tool_choice not "none"); a
// "required" choice starts inside the tool-call block the prompt opened; json_object output
// is recognised; in thinking mode parsing starts in the reasoning, or, after a trailing prefix
// message, continues its reasoning (empty content, non-empty reasoning) or its answer
// (non-empty content). Chat mode always starts at the answer.
ParserOptions parser_options_for(const Conversation& conv,
                                 std::vector<std::string> stop_sequences = {});

class Tokenizer;

// Token ids of a rendered prompt (deepseek-recipe's `DeepseekV4Encoding.encode`): each
// special range becomes its added token's id, each plain span is encoded without the added
// vocabulary (Tokenizer::encode_ordinary). Throws kInvalidInput when the tokenizer has no
// token for a special spelling (e.g. "<｜System｜>" with a V4 tokenizer).
std::vector<int32_t> encode_prompt(const RenderedPrompt& prompt, const Tokenizer& tokenizer);

// render_prompt + encode_prompt.
std::vector<int32_t> encode_conversation(const Conversation& conv, ChatVersion version,
                                         const Tokenizer& tokenizer,
                                         const SpecialTokens& tokens = SpecialTokens());

}  // namespace deepinfer::recipe
