#include "recipe/dsml.h"

namespace deepinfer::recipe {
namespace {

// Writes "<" + dsml + tag (open) or "</" + dsml + tag (close) with the DSML marker special.
void dsml_open(PromptBuilder& b, const std::string& tag) {
  b.text("<");
  b.special(b.tokens().dsml);
  b.text(tag);
}
void dsml_close(PromptBuilder& b, const std::string& tag) {
  b.text("</");
  b.special(b.tokens().dsml);
  b.text(tag);
  b.text(">");
}

// {"name": ..., "description": ..., "parameters": ...} of one tool.
std::string tool_schema_line(const ToolDefinition& tool, JsonFloatStyle style) {
  OrderedJson entry = OrderedJson::object();
  entry["name"] = tool.name;
  entry["description"] = tool.description.value_or("");
  entry["parameters"] = tool.parameters;
  return dump_json(entry, style);
}

}  // namespace

const DsmlTags& dsml_tags(DsmlDialect dialect) {
  static const DsmlTags v4{"tool_calls", "invoke", "parameter"};
  static const DsmlTags v41{" calls", " invoke", " parameter"};
  return dialect == DsmlDialect::kV4 ? v4 : v41;
}

void render_dsml_tool_calls(PromptBuilder& b, const std::vector<ToolCall>& calls,
                            DsmlDialect dialect, JsonFloatStyle style) {
  const DsmlTags& tags = dsml_tags(dialect);
  b.text("\n\n");
  dsml_open(b, tags.calls);
  b.text(">\n");
  for (const ToolCall& call : calls) {
    dsml_open(b, tags.invoke);
    b.text(" name=\"" + call.name + "\">\n");
    OrderedJson args;
    std::vector<std::pair<std::string, const OrderedJson*>> params;
    OrderedJson fallback;
    if (parse_json_object(call.arguments, args)) {
      for (auto it = args.begin(); it != args.end(); ++it) params.emplace_back(it.key(), &it.value());
    } else {
      fallback = call.arguments;
      params.emplace_back("arguments", &fallback);
    }
    for (const auto& [name, value] : params) {
      dsml_open(b, tags.parameter);
      const bool is_string = value->is_string();
      b.text(" name=\"" + name + "\" string=\"" + (is_string ? "true" : "false") + "\">");
      b.text(is_string ? value->get_ref<const std::string&>() : dump_json(*value, style));
      dsml_close(b, tags.parameter);
      b.text("\n");
    }
    // V4.1 always leaves a line between the invoke tags; V4 only the parameters' lines.
    if (dialect == DsmlDialect::kV41 && params.empty()) b.text("\n");
    dsml_close(b, tags.invoke);
    b.text("\n");
  }
  dsml_close(b, tags.calls);
}

void render_tools_section(PromptBuilder& b, const std::vector<ToolDefinition>& tools,
                          DsmlDialect dialect, JsonFloatStyle style) {
  const DsmlTags& t = dsml_tags(dialect);
  const std::string d = b.tokens().dsml;
  const std::string think = b.tokens().thinking_start;
  const std::string unthink = b.tokens().thinking_end;
  std::string s;
  s += "## Tools\n\nYou have access to a set of tools to help answer the user's question. "
       "You can invoke tools by writing a \"<" + d + t.calls + ">\" block like the following:\n\n";
  s += "<" + d + t.calls + ">\n";
  s += "<" + d + t.invoke + " name=\"$TOOL_NAME\">\n";
  s += "<" + d + t.parameter +
       " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + d + t.parameter +
       ">\n";
  s += "...\n";
  s += "</" + d + t.invoke + ">\n";
  s += "<" + d + t.invoke + " name=\"$TOOL_NAME2\">\n";
  s += "...\n";
  s += "</" + d + t.invoke + ">\n";
  s += "</" + d + t.calls + ">\n\n";
  s += "String parameters should be specified as is and set `string=\"true\"`. For all other "
       "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
       "`string=\"false\"`.\n\n";
  s += "If thinking_mode is enabled (triggered by " + think + "), you MUST output your complete "
       "reasoning inside " + think + "..." + unthink + " BEFORE any tool calls or final "
       "response.\n\n";
  s += "Otherwise, output directly after " + unthink + " with tool calls or final response.\n\n";
  s += "### Available Tool Schemas\n\n";
  b.template_text(s);
  // V4 ends every schema line with "\n"; V4.1 joins them (the two differ when all are deferred).
  std::string lines;
  for (const ToolDefinition& tool : tools) {
    if (tool.defer_loading) continue;
    if (dialect == DsmlDialect::kV41 && !lines.empty()) lines += "\n";
    lines += tool_schema_line(tool, style);
    if (dialect == DsmlDialect::kV4) lines += "\n";
  }
  b.text(lines);
  b.text(dialect == DsmlDialect::kV41 ? "\n\n" : "\n");
  b.text("You MUST strictly follow the above defined tool name and parameter schemas to invoke "
         "tool calls.\n");
}

void render_updated_tool_schemas(PromptBuilder& b, const std::vector<ToolDefinition>& tools,
                                 JsonFloatStyle style) {
  b.text("\n\n### Updated Tool Schemas\n\n");
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i > 0) b.text("\n");
    b.text(tool_schema_line(tools[i], style));
  }
}

void render_required_tool_calls_opening(PromptBuilder& b, DsmlDialect dialect) {
  b.text("\n\n");
  dsml_open(b, dsml_tags(dialect).calls);
  b.text(">\n");
}

}  // namespace deepinfer::recipe
