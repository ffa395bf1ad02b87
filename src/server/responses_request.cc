#include "server/responses_request.h"

#include <set>

namespace deepinfer::server {
namespace {

// Fields copied to the chat body unchanged (OpenAI's and vLLM's sampling fields).
const std::set<std::string> kPassThrough = {
    "model", "temperature", "top_p", "stream", "parallel_tool_calls", "seed", "top_k", "min_p",
    "repetition_penalty", "presence_penalty", "frequency_penalty", "stop", "stop_token_ids", "ignore_eos",
    "min_tokens", "priority"};
// Fields read here (converted, checked or accepted without effect).
const std::set<std::string> kHandled = {
    "input", "instructions", "max_output_tokens", "tools", "tool_choice", "reasoning", "text",
    "metadata", "user", "safety_identifier", "prompt_cache_key", "service_tier", "store", "stream_options",
    "previous_response_id", "conversation", "prompt", "background", "include", "top_logprobs",
    "max_tool_calls", "truncation"};

std::string type_of(const Json& item) {
  const Json* t = item.is_object() ? find_field(item, "type") : nullptr;
  return t && t->is_string() ? t->get<std::string>() : "";
}

// Refuses a field unless it is absent, null or `off`.
void refuse_unless(const Json& r, const char* key, const Json& off, const std::string& why) {
  const Json* v = find_field(r, key);
  if (v && *v != off) throw bad_request(std::string(key) + " is not supported: " + why, key);
}

// Message content: a string, or parts -> chat content parts ({"type": "text", "text"}).
Json content_of(const Json& content, const std::string& where) {
  if (content.is_string()) return content;
  if (!content.is_array()) throw bad_request(where + ".content must be a string or an array of parts", "input");
  Json parts = Json::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const Json& p = content[k];
    const std::string type = type_of(p);
    const std::string at = where + ".content[" + std::to_string(k) + "]";
    if (type == "input_text" || type == "output_text" || type == "refusal") {
      const Json* text = find_field(p, type == "refusal" ? "refusal" : "text");
      if (!text || !text->is_string()) throw bad_request(at + " needs a string text", "input");
      parts.push_back({{"type", "text"}, {"text", *text}});
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      throw bad_request(at + ": " + type + " inputs are not supported", "input");
    } else {
      throw bad_request(at + " has unknown type '" + type + "'", "input");
    }
  }
  return parts;
}

// Text of a function_call_output's output: a string or input_text parts.
std::string output_text_of(const Json& output, const std::string& where) {
  if (output.is_string()) return output.get<std::string>();
  std::string text;
  if (output.is_array()) {
    for (const Json& p : output) {
      const Json* t = type_of(p) == "input_text" ? find_field(p, "text") : nullptr;
      if (!t || !t->is_string()) throw bad_request(where + ".output parts must be input_text", "input");
      text += t->get<std::string>();
    }
    return text;
  }
  throw bad_request(where + ".output must be a string or an array of input_text parts", "input");
}

const std::string& required_string(const Json& item, const char* key, const std::string& where) {
  const Json* v = find_field(item, key);
  if (!v || !v->is_string()) throw bad_request(where + "." + key + " must be a string", "input");
  return v->get_ref<const std::string&>();
}

// input items -> chat messages (after `messages`' system message, if any).
void convert_input(const Json& input, Json& messages) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array() || input.empty()) throw bad_request("input must be a string or a non-empty array", "input");
  std::string reasoning;  // a reasoning item's text, for the next assistant message
  bool have_reasoning = false;
  auto assistant = [&]() -> Json& {
    // A function call continues the assistant message just before it; reasoning opens a new one.
    if (have_reasoning || messages.empty() || messages.back().value("role", "") != "assistant") {
      messages.push_back({{"role", "assistant"}, {"content", ""}});
    }
    if (have_reasoning) messages.back()["reasoning_content"] = reasoning;
    have_reasoning = false;
    reasoning.clear();
    return messages.back();
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const Json& item = input[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) throw bad_request(where + " must be an object", "input");
    const std::string type = type_of(item);
    if (type == "message" || (type.empty() && item.contains("role"))) {
      const std::string& role = required_string(item, "role", where);
      if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
        throw bad_request(where + ".role must be user, assistant, system or developer", "input");
      }
      const Json* content = find_field(item, "content");
      if (!content) throw bad_request(where + " has no content", "input");
      if (role == "assistant") {
        Json& m = have_reasoning ? assistant() : messages.emplace_back(Json{{"role", "assistant"}});
        m["content"] = content_of(*content, where);
      } else {
        messages.push_back({{"role", role}, {"content", content_of(*content, where)}});
      }
    } else if (type == "function_call") {
      const Json* args = find_field(item, "arguments");
      if (args && !args->is_string()) throw bad_request(where + ".arguments must be a string", "input");
      Json call = {{"id", required_string(item, "call_id", where)},
                   {"type", "function"},
                   {"function", {{"name", required_string(item, "name", where)},
                                 {"arguments", args ? *args : Json("{}")}}}};
      Json& m = assistant();
      if (!m.contains("tool_calls")) m["tool_calls"] = Json::array();
      m["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      const Json* output = find_field(item, "output");
      if (!output) throw bad_request(where + ".output is required", "input");
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", required_string(item, "call_id", where)},
                          {"content", output_text_of(*output, where)}});
    } else if (type == "reasoning") {
      if (const Json* content = find_field(item, "content")) {
        if (!content->is_array()) throw bad_request(where + ".content must be an array", "input");
        for (const Json& p : *content) {
          const Json* t = type_of(p) == "reasoning_text" ? find_field(p, "text") : nullptr;
          if (!t || !t->is_string()) throw bad_request(where + ".content parts must be reasoning_text", "input");
          reasoning += t->get<std::string>();
        }
      }
      have_reasoning = true;
    } else {
      throw bad_request(where + " has unsupported type '" + type + "'", "input");
    }
  }
  if (have_reasoning) throw bad_request("a reasoning item must be followed by an assistant message or call", "input");
}

Json convert_tools(const Json& tools) {
  if (!tools.is_array()) throw bad_request("tools must be an array", "tools");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (type_of(t) != "function") {
      throw bad_request(where + ": only function tools are supported, got '" + type_of(t) + "'", "tools");
    }
    const Json* name = find_field(t, "name");
    if (!name || !name->is_string()) throw bad_request(where + ".name must be a string", "tools");
    Json fn = {{"name", *name}};
    for (const char* key : {"description", "parameters"}) {
      if (const Json* v = find_field(t, key)) fn[key] = *v;
    }
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

Json convert_tool_choice(const Json& choice) {
  if (choice.is_string()) return choice;  // auto / none / required: checked by the chat parser
  if (type_of(choice) == "function") {
    const Json* name = find_field(choice, "name");
    if (!name || !name->is_string()) throw bad_request("tool_choice.name must be a string", "tool_choice");
    return {{"type", "function"}, {"function", {{"name", *name}}}};
  }
  throw bad_request("tool_choice must be auto, none, required or {\"type\": \"function\", \"name\"}", "tool_choice");
}

// reasoning {"effort", "summary"} -> the chat body's thinking switch and reasoning_effort.
void convert_reasoning(const Json& reasoning, Json& chat) {
  if (!reasoning.is_object()) throw bad_request("reasoning must be an object", "reasoning");
  for (const auto& [key, value] : reasoning.items()) {
    if (key != "effort" && key != "summary" && key != "generate_summary") {
      throw bad_request("reasoning." + key + " is not supported", "reasoning");
    }
  }
  const Json* effort = find_field(reasoning, "effort");
  if (effort && !effort->is_string()) throw bad_request("reasoning.effort must be a string", "reasoning.effort");
  const std::string e = effort ? effort->get<std::string>() : "";
  bool thinking = true;
  if (e == "none") {
    thinking = false;
  } else if (e == "minimal" || e == "low") {
    chat["reasoning_effort"] = "low";
  } else if (e == "medium" || e == "high") {
    chat["reasoning_effort"] = "high";
  } else if (e == "xhigh") {
    chat["reasoning_effort"] = "xhigh";
  } else if (!e.empty()) {
    throw bad_request("reasoning.effort must be none, minimal, low, medium, high or xhigh, got '" + e + "'",
                      "reasoning.effort");
  }
  chat["chat_template_kwargs"] = {{"thinking", thinking}};
}

// text {"format", "verbosity"} -> response_format.
void convert_text(const Json& text, Json& chat) {
  if (!text.is_object()) throw bad_request("text must be an object", "text");
  for (const auto& [key, value] : text.items()) {
    if (key != "format" && key != "verbosity") throw bad_request("text." + key + " is not supported", "text");
  }
  const Json* format = find_field(text, "format");
  if (!format) return;
  const std::string type = type_of(*format);
  if (type == "text") return;
  if (type == "json_object") {
    chat["response_format"] = {{"type", "json_object"}};
  } else if (type == "json_schema") {
    Json schema = {{"name", format->value("name", "response")}};
    for (const char* key : {"schema", "strict", "description"}) {
      if (const Json* v = find_field(*format, key)) schema[key] = *v;
    }
    chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  } else {
    throw bad_request("text.format.type must be text, json_object or json_schema", "text.format");
  }
}

std::string responses_param(const std::string& param) {
  if (param == "messages") return "input";
  if (param == "max_tokens") return "max_output_tokens";
  if (param == "response_format") return "text.format";
  return param;
}

}  // namespace

ResponsesRequest parse_responses_request(const Json& r, const RequestLimits& limits, recipe::ChatVersion version,
                                         bool default_thinking) {
  for (const auto& [key, value] : r.items()) {
    if (!kPassThrough.count(key) && !kHandled.count(key)) {
      throw bad_request("unknown parameter '" + key + "' for /v1/responses", key);
    }
  }
  const std::string nothing_stored = "this server keeps no responses or conversations";
  refuse_unless(r, "previous_response_id", nullptr, nothing_stored);
  refuse_unless(r, "conversation", nullptr, nothing_stored);
  refuse_unless(r, "prompt", nullptr, "no prompt templates are stored");
  refuse_unless(r, "background", false, "responses run in the foreground");
  refuse_unless(r, "include", Json::array(), "no extra output data is produced");
  refuse_unless(r, "top_logprobs", 0, "log-probabilities are not returned by /v1/responses");
  refuse_unless(r, "max_tool_calls", nullptr, "tool calls are not counted");
  refuse_unless(r, "truncation", "disabled", "the input is never truncated");
  if (const Json* so = find_field(r, "stream_options")) {
    if (!so->is_object() || so->size() > 1 || (so->size() == 1 && so->value("include_obfuscation", true))) {
      throw bad_request("stream_options supports only include_obfuscation false", "stream_options");
    }
  }
  get_string(r, "user");
  get_string(r, "safety_identifier");
  get_string(r, "prompt_cache_key");
  get_string(r, "service_tier");
  get_bool(r, "store");
  const Json* metadata = find_field(r, "metadata");
  if (metadata && !metadata->is_object()) throw bad_request("metadata must be an object", "metadata");

  Json chat = Json::object();
  for (const auto& [key, value] : r.items()) {
    if (kPassThrough.count(key)) chat[key] = value;
  }
  Json messages = Json::array();
  if (auto instructions = get_string(r, "instructions")) {
    messages.push_back({{"role", "system"}, {"content", *instructions}});
  }
  const Json* input = find_field(r, "input");
  if (!input) throw bad_request("input is required", "input");
  convert_input(*input, messages);
  chat["messages"] = std::move(messages);
  if (const Json* v = find_field(r, "max_output_tokens")) chat["max_tokens"] = *v;
  const Json* tools = find_field(r, "tools");
  if (tools) chat["tools"] = convert_tools(*tools);
  const Json* tool_choice = find_field(r, "tool_choice");
  if (tool_choice) chat["tool_choice"] = convert_tool_choice(*tool_choice);
  const Json* reasoning = find_field(r, "reasoning");
  if (reasoning) convert_reasoning(*reasoning, chat);
  const Json* text = find_field(r, "text");
  if (text) convert_text(*text, chat);

  ResponsesRequest out;
  try {
    out.chat = parse_chat_request(chat, limits, version, default_thinking);
  } catch (ApiError& e) {
    e.param = responses_param(e.param);
    throw;
  }
  auto or_null = [](const Json* v) { return v ? *v : Json(nullptr); };
  const SamplingRequest& s = out.chat.sampling;
  Json effort = nullptr;
  if (reasoning) effort = or_null(find_field(*reasoning, "effort"));
  out.echo = {{"instructions", or_null(find_field(r, "instructions"))},
              {"max_output_tokens", or_null(find_field(r, "max_output_tokens"))},
              {"metadata", metadata ? *metadata : Json::object()},
              {"parallel_tool_calls", get_bool(r, "parallel_tool_calls").value_or(true)},
              {"reasoning", {{"effort", out.chat.thinking ? effort : Json("none")}, {"summary", nullptr}}},
              {"temperature", s.params.temperature},
              {"text", {{"format", text && find_field(*text, "format") ? (*text)["format"] : Json{{"type", "text"}}}}},
              {"tool_choice", tool_choice ? *tool_choice : Json("auto")},
              {"tools", tools ? *tools : Json::array()},
              {"top_p", s.params.top_p},
              {"user", or_null(find_field(r, "user"))}};
  return out;
}

}  // namespace deepinfer::server
