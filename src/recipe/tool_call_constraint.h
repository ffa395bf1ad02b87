// The structured-output constraint that forces DSML tool calls (tool_choice "required" or a
// named function): the spec of the grammar kind "tool_calls" (grammar/tool_calls.h) for the
// dialect's tags, as the chat encodings render calls (dsml.h).
//
// The generation prompt of a required choice already ends with the block's opening
// "\n\n<｜DSML｜tool_calls>\n" (render_required_tool_calls_opening), so the constrained output is
//   (<｜DSML｜invoke name="f">\n
//      (<｜DSML｜parameter name="p" string="true|false">VALUE</｜DSML｜parameter>\n)*
//    </｜DSML｜invoke>\n)+ </｜DSML｜tool_calls>         then the end of the turn (EOS)
// with V4.1's spellings (" calls", " invoke", " parameter", and a "\n" for a call without
// parameters). One call exactly when `parallel` is false. Output parsing starts inside the block
// (ParserOptions::starts_in_tool_calls). Nothing precedes the calls: thinking mode with a required
// choice is refused by the request conversion.
#pragma once

#include <string>
#include <vector>

#include "recipe/dsml.h"
#include "recipe/messages.h"

namespace deepinfer::recipe {

inline constexpr const char* kToolCallConstraintKind = "tool_calls";

// The spec text for `tools` (every tool, deferred ones too: the parser accepts any name).
std::string dsml_tool_call_constraint(const std::vector<ToolDefinition>& tools, DsmlDialect dialect,
                                      bool parallel);

}  // namespace deepinfer::recipe
