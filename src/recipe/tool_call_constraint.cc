#include "recipe/tool_call_constraint.h"

#include "recipe/chat_json.h"
#include "recipe/chat_prompt.h"

namespace deepinfer::recipe {

std::string dsml_tool_call_constraint(const std::vector<ToolDefinition>& tools, DsmlDialect dialect,
                                      bool parallel) {
  const DsmlTags& t = dsml_tags(dialect);
  const std::string d = SpecialTokens().dsml;
  // The bytes render_dsml_tool_calls writes around each call and parameter.
  OrderedJson syntax = OrderedJson::object();
  syntax["call_open"] = "<" + d + t.invoke + " name=\"";
  syntax["call_name_end"] = "\">\n";
  syntax["param_open"] = "<" + d + t.parameter + " name=";
  syntax["param_string"] = " string=\"true\">";
  syntax["param_json"] = " string=\"false\">";
  syntax["param_close"] = "</" + d + t.parameter + ">\n";
  syntax["empty_params"] = dialect == DsmlDialect::kV41 ? "\n" : "";
  syntax["call_close"] = "</" + d + t.invoke + ">\n";
  syntax["end"] = "</" + d + t.calls + ">";
  // The output parser ends a parameter value at the first "</｜DSML｜".
  syntax["value_forbidden"] = "</" + d;
  OrderedJson list = OrderedJson::array();
  for (const ToolDefinition& tool : tools) {
    OrderedJson entry = OrderedJson::object();
    entry["name"] = tool.name;
    entry["parameters"] = tool.parameters;
    list.push_back(std::move(entry));
  }
  OrderedJson spec = OrderedJson::object();
  spec["syntax"] = std::move(syntax);
  spec["tools"] = std::move(list);
  spec["parallel"] = parallel;
  // The encoders write JSON values as Python's json.dumps does ({"a": 1, "b": [2, 3]}).
  spec["max_whitespace"] = 1;
  return spec.dump();
}

}  // namespace deepinfer::recipe
