// DeepSeek V4.1 prompt rendering (deepseek-recipe `DeepseekV41Encoding`).
//
// <BOS>[<｜System｜>{head}]{turns}[<｜Assistant｜>{<think> | </think>}]
//  - head = "Reasoning Effort: N (range 1-100, ...)\n\n" (thinking mode, unless there are no
//    messages, tools or response format at all) + the first message's content if it is a
//    system message + "\n\n## Tools..." (unless tool_choice is "none"; deferred tools left
//    out) + response-format instructions + that system message's own tools as "### Updated
//    Tool Schemas"; written when not empty or when it consumed a system message. Later
//    system messages are their own <｜System｜> turns, in place, with their tools.
//  - of consecutive latest_reminder messages only the first is rendered;
//  - a run of consecutive user/tool messages forms one <｜User｜> turn joined by "\n\n"; its
//    tool results that carry an id are stably reordered among their own slots by the index
//    of the call they answer in the latest tool-calling assistant turn (0 for an id no call
//    has); everything else stays in place.
//  - assistant turns: <｜Assistant｜>[<think>R]</think>{content}{DSML}[<EOS>]; in thinking mode
//    R ("" when absent) is written for every turn when tools are declared (or drop_thinking is
//    false) and for prefix messages (except a prefix opening the conversation whose system
//    block holds only the effort line); a kept prefix without content or calls leaves out
//    the </think>. Prefix messages get no EOS; a trailing one no generation prompt.
// A required tool choice appends "\n\n<｜DSML｜ calls>\n".
#pragma once

#include "recipe/chat_prompt.h"
#include "recipe/messages.h"

namespace deepinfer::recipe {

RenderedPrompt render_prompt_v41(const Conversation& conv, const SpecialTokens& tokens);

// 1..100 for an effort (unset/high/xhigh = 75, low = 50, max = 100).
int v41_effort_value(const ReasoningEffort& effort);

}  // namespace deepinfer::recipe
