// DeepSeek V4 prompt rendering (deepseek-recipe `DeepseekV4Encoding`).
//
// <BOS>{system prompt}{turns}[<｜Assistant｜>{<think> | </think>}]
//  - system prompt = effort paragraph (thinking mode) + the non-empty contents of all system
//    messages joined by "\n\n" (system messages are hoisted to the top wherever they occur;
//    their own `tools` are not rendered) + "\n\n## Tools..." (unless tool_choice is "none";
//    deferred tools left out) + the JSON response-format instructions;
//  - a run of consecutive user messages is one text (non-empty contents joined by "\n\n");
//    tool results share the <｜User｜> turn of the results before them, a user text after
//    tool results joins their turn, a tool result after user text opens a new turn;
//  - history tool calls are written in the order of their ids (string order), and after an
//    assistant message with k tool calls the next k turns are stably ordered by tool_call_id
//    (results without an id first, non-results last) when at least k turns follow; these
//    windows are positions in the unsorted turn list, sorted one after the other;
//  - assistant turns: <｜Assistant｜>[<think>R]</think>{content}{DSML}<EOS>; R is written for
//    every turn when tools are declared (or drop_thinking is false) and for prefix messages,
//    otherwise dropped; a thinking-mode prefix message without content leaves out the
//    </think>; the last message, if a prefix, gets no EOS and no generation prompt.
// A required tool choice appends "\n\n<｜DSML｜tool_calls>\n".
#pragma once

#include "recipe/chat_prompt.h"
#include "recipe/messages.h"

namespace deepinfer::recipe {

RenderedPrompt render_prompt_v4(const Conversation& conv, const SpecialTokens& tokens);

// The effort paragraph V4 puts first in the system prompt ("" for none).
std::string v4_effort_paragraph(const ReasoningEffort& effort, V4EffortStyle style);

}  // namespace deepinfer::recipe
