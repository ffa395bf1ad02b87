// DeepSeek V4 prompt rendering (deepseek-recipe `DeepseekV4Encoding`).
//
// <BOS>{system prompt}{turns}<｜Assistant｜>{<think> | </think>}
//  - system prompt = effort paragraph (thinking mode) + every system message's content joined
//    by "\n\n" (system messages are hoisted to the top wherever they occur) + "\n\n## Tools..."
//    + the JSON response-format instructions;
//  - user and tool messages share <｜User｜> turns: consecutive user messages and tool results
//    join with "\n\n"; a tool result after a user message opens a new <｜User｜> turn;
//  - history tool calls are written in the order of their ids (string order), and after an
//    assistant message with k tool calls the next k messages are stably ordered by their
//    tool_call_id (other messages last);
//  - assistant turns: <｜Assistant｜>{<think>R</think> | </think>}{content}{DSML}<EOS>; the
//    reasoning is kept for every turn when tools are declared (or drop_thinking is false),
//    and for a prefix message, otherwise dropped; a trailing prefix message gets no EOS, and
//    in thinking mode with nothing after its reasoning stays inside <think>.
#pragma once

#include "recipe/chat_prompt.h"
#include "recipe/messages.h"

namespace deepinfer::recipe {

RenderedPrompt render_prompt_v4(const Conversation& conv, const SpecialTokens& tokens);

// The effort paragraph V4 puts first in the system prompt ("" for none).
std::string v4_effort_paragraph(const ReasoningEffort& effort, V4EffortStyle style);

}  // namespace deepinfer::recipe
