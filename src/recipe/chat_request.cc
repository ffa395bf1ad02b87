#include "recipe/chat_request.h"

#include "base/error.h"

namespace deepinfer::recipe {
namespace {

std::string get_string(const OrderedJson& obj, const char* key, const std::string& where,
                       bool null_is_empty = true) {
  auto it = obj.find(key);
  if (it == obj.end() || (null_is_empty && it->is_null())) return "";
  CHECK(it->is_string()) << where << "." << key << " must be a string, got " << it->type_name();
  return it->get<std::string>();
}

std::optional<std::string> get_optional_string(const OrderedJson& obj, const char* key,
                                               const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  CHECK(it->is_string()) << where << "." << key << " must be a string, got " << it->type_name();
  return it->get<std::string>();
}

bool get_bool(const OrderedJson& obj, const char* key, bool fallback, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  CHECK(it->is_boolean()) << where << "." << key << " must be a boolean, got " << it->type_name();
  return it->get<bool>();
}

// A string, null, or a list of text / image parts.
void read_content(const OrderedJson& obj, const std::string& where,
                  const ChatRequestOptions& options, Message& m) {
  auto it = obj.find("content");
  if (it == obj.end() || it->is_null()) return;
  if (it->is_string()) {
    m.content = it->get<std::string>();
    return;
  }
  CHECK(it->is_array()) << where << ".content must be a string or a list of parts, got "
                        << it->type_name();
  std::string text;
  for (size_t k = 0; k < it->size(); ++k) {
    const OrderedJson& part = (*it)[k];
    const std::string part_where = where + ".content[" + std::to_string(k) + "]";
    CHECK(part.is_object()) << part_where << " must be an object";
    const std::string type = get_string(part, "type", part_where);
    if (k > 0) text += "\n\n";
    if (type == "text") {
      text += get_string(part, "text", part_where);
    } else if (type == "image_url" || type == "image") {
      if (options.image_placeholders) {
        text += options.image_token;
        ++m.n_images;
      } else {
        text += "[Unsupported Image]";
      }
    } else {
      THROW(kInvalidInput) << part_where << ": unsupported content part type '" << type << "'";
    }
  }
  m.content = std::move(text);
}

ToolCall tool_call_from_json(const OrderedJson& j, const std::string& where) {
  CHECK(j.is_object()) << where << " must be an object, got " << j.type_name();
  ToolCall call;
  call.id = get_string(j, "id", where);
  const OrderedJson* fn = &j;
  std::string fn_where = where;
  if (auto it = j.find("function"); it != j.end()) {
    CHECK(it->is_object()) << where << ".function must be an object, got " << it->type_name();
    fn = &*it;
    fn_where = where + ".function";
  }
  call.name = get_string(*fn, "name", fn_where);
  CHECK(!call.name.empty()) << fn_where << ".name is missing or empty";
  if (auto it = fn->find("arguments"); it != fn->end() && !it->is_null()) {
    call.arguments = it->is_string() ? it->get<std::string>() : it->dump();
  }
  return call;
}

}  // namespace

ChatRequestOptions chat_completions_request_options(bool version_has_vision) {
  ChatRequestOptions o;
  o.normalize = true;
  o.image_placeholders = version_has_vision;
  return o;
}

Message message_from_json(const OrderedJson& j, size_t index, const ChatRequestOptions& options) {
  const std::string where = "messages[" + std::to_string(index) + "]";
  CHECK(j.is_object()) << where << " must be an object, got " << j.type_name();
  auto role_it = j.find("role");
  CHECK(role_it != j.end() && role_it->is_string()) << where << ".role is missing";
  Message m;
  m.role = parse_role(role_it->get<std::string>());
  read_content(j, where, options, m);
  m.reasoning_content = get_optional_string(j, "reasoning_content", where);
  m.tool_call_id = get_optional_string(j, "tool_call_id", where);
  m.prefix = get_bool(j, "prefix", false, where);
  if (auto it = j.find("n_images"); it != j.end() && !it->is_null()) {
    CHECK(it->is_number_integer() && it->get<int64_t>() >= 0 && it->get<int64_t>() < (1 << 20))
        << where << ".n_images must be a non-negative integer";
    m.n_images = static_cast<int>(it->get<int64_t>());
  }
  if (auto it = j.find("tools"); it != j.end() && !it->is_null()) {
    CHECK(m.role == Role::kSystem) << where << ": only system messages carry tools";
    CHECK(it->is_array()) << where << ".tools must be an array, got " << it->type_name();
    for (size_t k = 0; k < it->size(); ++k) m.tools.push_back(tool_from_json((*it)[k], k));
  }
  if (auto it = j.find("tool_calls"); it != j.end() && !it->is_null()) {
    CHECK(it->is_array()) << where << ".tool_calls must be an array, got " << it->type_name();
    for (size_t k = 0; k < it->size(); ++k) {
      m.tool_calls.push_back(
          tool_call_from_json((*it)[k], where + ".tool_calls[" + std::to_string(k) + "]"));
    }
  }
  return m;
}

ToolDefinition tool_from_json(const OrderedJson& j, size_t index) {
  const std::string where = "tools[" + std::to_string(index) + "]";
  CHECK(j.is_object()) << where << " must be an object, got " << j.type_name();
  const OrderedJson* fn = &j;
  std::string fn_where = where;
  if (auto it = j.find("function"); it != j.end()) {
    CHECK(it->is_object()) << where << ".function must be an object, got " << it->type_name();
    fn = &*it;
    fn_where = where + ".function";
  }
  ToolDefinition tool;
  tool.name = get_string(*fn, "name", fn_where);
  CHECK(!tool.name.empty()) << fn_where << ".name is missing or empty";
  tool.description = get_optional_string(*fn, "description", fn_where);
  if (auto it = fn->find("parameters"); it != fn->end()) {
    CHECK(it->is_object() || it->is_null())
        << fn_where << ".parameters ('" << tool.name << "') must be a JSON Schema object, got "
        << it->type_name();
    tool.parameters = *it;
  }
  tool.defer_loading = get_bool(*fn, "defer_loading", get_bool(j, "defer_loading", false, where),
                                fn_where);
  if (auto it = fn->find("strict"); it != fn->end() && !it->is_null()) {
    CHECK(it->is_boolean()) << fn_where << ".strict must be a boolean";
    tool.strict = it->get<bool>();
  }
  return tool;
}

Conversation conversation_from_json(const OrderedJson& j, const ChatRequestOptions& options) {
  CHECK(j.is_object()) << "request must be a JSON object, got " << j.type_name();
  Conversation conv;
  if (auto it = j.find("messages"); it != j.end() && !it->is_null()) {
    CHECK(it->is_array()) << "messages must be an array, got " << it->type_name();
    for (size_t i = 0; i < it->size(); ++i) {
      conv.messages.push_back(message_from_json((*it)[i], i, options));
    }
  }
  conv.thinking_mode = get_bool(j, "thinking_mode", true, "request");
  if (auto it = j.find("thinking"); it != j.end() && !it->is_null()) {
    CHECK(it->is_object()) << "thinking must be an object like {\"type\": \"enabled\"}";
    const std::string type = get_string(*it, "type", "thinking");
    CHECK(type == "enabled" || type == "disabled")
        << "thinking.type must be \"enabled\" or \"disabled\", got '" << type << "'";
    conv.thinking_mode = type == "enabled";
  }
  conv.drop_thinking = get_bool(j, "drop_thinking", true, "request");
  if (auto it = j.find("tools"); it != j.end() && !it->is_null()) {
    CHECK(it->is_array()) << "tools must be an array, got " << it->type_name();
    for (size_t i = 0; i < it->size(); ++i) conv.tools.push_back(tool_from_json((*it)[i], i));
  }
  if (auto it = j.find("tool_choice"); it != j.end() && !it->is_null()) {
    CHECK(it->is_string()) << "tool_choice must be a string, got " << it->type_name();
    conv.tool_choice = parse_tool_choice(it->get<std::string>());
  }
  if (auto it = j.find("reasoning_effort"); it != j.end() && !it->is_null()) {
    if (it->is_number_integer()) {
      const int64_t v = it->get<int64_t>();
      CHECK(v >= 1 && v <= 100) << "reasoning_effort " << v << " is out of range 1-100";
      conv.reasoning_effort = reasoning_effort_value(static_cast<int>(v));
    } else {
      CHECK(it->is_string()) << "reasoning_effort must be a string or an integer, got "
                             << it->type_name();
      conv.reasoning_effort = parse_reasoning_effort(it->get<std::string>());
    }
  }
  if (auto it = j.find("response_format"); it != j.end() && !it->is_null()) {
    std::string type;
    if (it->is_string()) {
      type = it->get<std::string>();
    } else {
      CHECK(it->is_object()) << "response_format must be a string or an object";
      type = get_string(*it, "type", "response_format");
    }
    if (type == "text") {
      conv.response_format = ResponseFormat::kText;
    } else if (type == "json_object") {
      conv.response_format = ResponseFormat::kJsonObject;
    } else if (type == "json_schema") {
      CHECK(it->is_object() && it->contains("schema") && !(*it)["schema"].is_null())
          << "response_format json_schema needs a \"schema\"";
      conv.response_format = ResponseFormat::kJsonSchema;
      conv.response_schema = (*it)["schema"];
    } else if (type == "regex") {
      conv.response_format = ResponseFormat::kRegex;
      conv.response_regex = get_string(*it, "regex", "response_format");
    } else {
      THROW(kInvalidInput) << "unknown response_format '" << type
                           << "' (expected text, json_object, json_schema or regex)";
    }
  }
  if (options.normalize) {
    std::erase_if(conv.messages,
                  [](const Message& m) { return m.role == Role::kSystem && m.content.empty(); });
    for (ToolDefinition& tool : conv.tools) {
      if (tool.parameters.is_null()) tool.parameters = OrderedJson::object();
    }
    for (Message& m : conv.messages) {
      if (m.role != Role::kAssistant) continue;
      if (!conv.thinking_mode) {
        m.reasoning_content.reset();
      } else if (!m.reasoning_content) {
        m.reasoning_content = "";
      }
    }
  }
  if (auto it = j.find("v4_effort_style"); it != j.end() && !it->is_null()) {
    const std::string style = it->is_string() ? it->get<std::string>() : "";
    if (style == "0731") {
      conv.v4_effort_style = V4EffortStyle::k0731;
    } else if (style == "april") {
      conv.v4_effort_style = V4EffortStyle::kApril;
    } else {
      THROW(kInvalidInput) << "v4_effort_style must be \"0731\" or \"april\"";
    }
  }
  return conv;
}

}  // namespace deepinfer::recipe
