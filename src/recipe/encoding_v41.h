// DeepSeek V4.1 prompt rendering (deepseek-recipe `DeepseekV41Encoding`).
//
// <BOS>[<｜System｜>{head}]{turns}<｜Assistant｜>{<think> | </think>}
//  - head = "Reasoning Effort: N (range 1-100, ...)\n\n" (thinking mode, unless there are
//    no messages, tools or response format at all) + the first message's content if it is a system message + "\n\n## Tools..." +
//    response-format instructions; written when not empty or when it consumed a system
//    message. Later system messages are their own <｜System｜> turns, in place.
//  - of consecutive latest_reminder messages only the first is rendered;
//  - a run of consecutive user/tool messages forms one <｜User｜> turn joined by "\n\n"; its
//    tool results that carry an id are stably reordered among their own slots by the index
//    of the call they answer in the latest tool-calling assistant turn (0 for an id no call
//    has); everything else stays in place.
//  - assistant turns keep their reasoning (<think>R</think>, "" when absent) in thinking mode
//    when tools are declared (or drop_thinking is false) or the message is a prefix; else
//    "</think>". A prefix message gets no EOS; in thinking mode with nothing after its
//    reasoning it stays inside <think>.
#pragma once

#include "recipe/chat_prompt.h"
#include "recipe/messages.h"

namespace deepinfer::recipe {

RenderedPrompt render_prompt_v41(const Conversation& conv, const SpecialTokens& tokens);

// 1..100 for an effort (unset/high/xhigh = 75, low = 50, max = 100).
int v41_effort_value(const ReasoningEffort& effort);

}  // namespace deepinfer::recipe
