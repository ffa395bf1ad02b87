// DSML, the markup DeepSeek V4 models use for tool calls, in its two dialects.
//
//   V4:   <｜DSML｜tool_calls> <｜DSML｜invoke name="f"> <｜DSML｜parameter name="p" string="true">
//   V4.1: <｜DSML｜ calls>     <｜DSML｜ invoke name="f"> <｜DSML｜ parameter name="p" string="true">
//
// A parameter is string="true" when its JSON value is a string (written raw), otherwise
// string="false" with the value as JSON text. Rendering of history tool calls and of the
// "## Tools" system section lives here; parsing model output is output_parser.h's job.
#pragma once

#include <string>
#include <vector>

#include "recipe/chat_json.h"
#include "recipe/chat_prompt.h"
#include "recipe/messages.h"

namespace deepinfer::recipe {

enum class DsmlDialect { kV4, kV41 };

struct DsmlTags {
  std::string calls;      // "tool_calls" | " calls"
  std::string invoke;     // "invoke" | " invoke"
  std::string parameter;  // "parameter" | " parameter"
};
const DsmlTags& dsml_tags(DsmlDialect dialect);

// Writes "\n\n<｜DSML｜calls>\n<invoke...>...</｜DSML｜calls>" for an assistant message.
void render_dsml_tool_calls(PromptBuilder& b, const std::vector<ToolCall>& calls,
                            DsmlDialect dialect, JsonFloatStyle style);

// The "## Tools" section appended to the system prompt (without its leading "\n\n"); deferred
// tools are left out.
void render_tools_section(PromptBuilder& b, const std::vector<ToolDefinition>& tools,
                          DsmlDialect dialect, JsonFloatStyle style);

// "\n\n### Updated Tool Schemas\n\n" + the schemas, one per line (V4.1 system messages).
void render_updated_tool_schemas(PromptBuilder& b, const std::vector<ToolDefinition>& tools,
                                 JsonFloatStyle style);

// The text that opens a tool-call block in the generation prompt of a required tool choice:
// "\n\n<｜DSML｜tool_calls>\n".
void render_required_tool_calls_opening(PromptBuilder& b, DsmlDialect dialect);

}  // namespace deepinfer::recipe
