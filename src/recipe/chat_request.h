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
// Content may be null (read as ""). Unknown keys are ignored; wrong types, unknown roles,
// tool schemas that are not objects and invalid efforts throw kInvalidInput naming the field.
#pragma once

#include "recipe/messages.h"

namespace deepinfer::recipe {

Conversation conversation_from_json(const OrderedJson& request);
Message message_from_json(const OrderedJson& message, size_t index);
ToolDefinition tool_from_json(const OrderedJson& tool, size_t index);

}  // namespace deepinfer::recipe
