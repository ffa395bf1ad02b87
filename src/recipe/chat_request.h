// Conversation <-> JSON, for the server, the Python package and the recipe_cli driver.
//
// {
//   "messages": [ {"role": "system|user|assistant|tool|latest_reminder", "content": "...",
//                  "reasoning_content": "..." (assistant, optional),
//                  "tool_calls": [ {"id": "...", "name": "f", "arguments": "{...}"} |
//                                  {"id": "...", "type": "function",
//                                   "function": {"name": "f", "arguments": "{...}" | {...}}} ],
//                  "tool_call_id": "..." (tool), "n_images": 0, "prefix": false} ],
//   "thinking_mode": true, "tools": [ {"name", "description", "parameters"} |
//                                     {"type": "function", "function": {...}} ],
//   "tool_choice": "auto|none|required", "reasoning_effort": "low|high|xhigh|max|none" | 1..100,
//   "response_format": "text|json_object" | {"type": "json_schema", "schema": {...}} |
//                      {"type": "regex", "regex": "..."},
//   "drop_thinking": true, "v4_effort_style": "0731|april"
// }
// Content may be null (read as "") or, OpenAI style, a list of parts: {"type": "text", "text"}
// parts joined by "\n\n", {"type": "image_url", ...} parts becoming an image placeholder.
// "thinking": {"type": "enabled" | "disabled"} is accepted for "thinking_mode".
// Unknown keys are ignored; wrong types, unknown roles, tool schemas that are not objects and
// invalid efforts throw kInvalidInput naming the field.
#pragma once

#include <string>

#include "recipe/messages.h"

namespace deepinfer::recipe {

// How a request maps to a conversation. The defaults take the JSON literally; an
// OpenAI-compatible server wants chat_completions_request_options().
struct ChatRequestOptions {
  // The normalisation of deepseek-recipe's Chat Completions conversion: in thinking mode a
  // missing assistant reasoning_content becomes "", in chat mode every reasoning_content is
  // dropped (this shows in V4 prompts when tools keep reasoning); system messages with empty
  // content are dropped; a tool without "parameters" gets {}.
  bool normalize = false;
  // Image parts become `image_token` plus one image (V4.1); false writes the text
  // "[Unsupported Image]" instead (V4 has no vision).
  bool image_placeholders = true;
  std::string image_token = "<｜image｜>";
};
// deepseek-recipe's Chat Completions conversion for `version` (V4 or V4.1).
ChatRequestOptions chat_completions_request_options(bool version_has_vision);

Conversation conversation_from_json(const OrderedJson& request,
                                    const ChatRequestOptions& options = ChatRequestOptions());
Message message_from_json(const OrderedJson& message, size_t index,
                          const ChatRequestOptions& options = ChatRequestOptions());
ToolDefinition tool_from_json(const OrderedJson& tool, size_t index);

}  // namespace deepinfer::recipe
