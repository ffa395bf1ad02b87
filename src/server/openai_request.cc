#include "server/openai_request.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "base/error.h"
#include "server/structured_output.h"
#include "recipe/chat_request.h"
#include "recipe/tool_call_constraint.h"

namespace deepinfer::server {
namespace {

struct TooDeep {};

const Json* find(const Json& obj, const char* key) { return find_field(obj, key); }

}  // namespace

std::string ApiError::body() const {
  Json err = {{"message", what()}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) err["param"] = param;
  if (!code.empty()) err["code"] = code;
  return Json{{"error", err}}.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json parse_body(const std::string& body, const RequestLimits& limits) {
  Json j;
  try {
    j = Json::parse(body, [&](int depth, Json::parse_event_t, Json&) {
      if (depth > limits.max_json_depth) throw TooDeep{};
      return true;
    });
  } catch (const TooDeep&) {
    throw bad_request("JSON nesting deeper than " + std::to_string(limits.max_json_depth));
  } catch (const Json::exception& e) {
    throw bad_request(std::string("malformed JSON body: ") + e.what());
  }
  if (!j.is_object()) throw bad_request("the request body must be a JSON object");
  return j;
}

void check_model(const Json& request, const std::string& served) {
  const Json* m = find(request, "model");
  if (!m) return;
  if (!m->is_string()) throw bad_request("model must be a string", "model");
  if (m->get<std::string>() != served) {
    throw ApiError(404, "The model '" + m->get<std::string>() + "' does not exist (this server serves '" +
                            served + "')",
                   "invalid_request_error", "model", "model_not_found");
  }
}

SamplingRequest parse_sampling(const Json& r, bool chat, const RequestLimits& limits) {
  SamplingRequest s;
  s.n = get_int(r, "n", 1, limits.max_n).value_or(1);
  s.max_tokens = get_int(r, "max_tokens", 1, INT64_MAX);
  if (chat) {
    if (auto m = get_int(r, "max_completion_tokens", 1, INT64_MAX)) s.max_tokens = m;
  }
  s.params.temperature = static_cast<float>(get_number(r, "temperature", 0.0, 2.0).value_or(1.0));
  s.params.top_p = static_cast<float>(get_number(r, "top_p", 0.0, 1.0).value_or(1.0));
  if (s.params.top_p <= 0.0f) throw bad_request("top_p must be in (0, 1]", "top_p");
  s.params.top_k = get_int(r, "top_k", -1, INT32_MAX).value_or(0);
  if (s.params.top_k < 0) s.params.top_k = 0;  // vLLM spells "off" as -1
  s.params.min_p = static_cast<float>(get_number(r, "min_p", 0.0, 1.0).value_or(0.0));
  s.params.presence_penalty = static_cast<float>(get_number(r, "presence_penalty", -2.0, 2.0).value_or(0.0));
  s.params.frequency_penalty = static_cast<float>(get_number(r, "frequency_penalty", -2.0, 2.0).value_or(0.0));
  s.params.repetition_penalty =
      static_cast<float>(get_number(r, "repetition_penalty", 1e-3, 100.0).value_or(1.0));
  s.params.min_tokens = get_int(r, "min_tokens", 0, INT32_MAX).value_or(0);
  s.params.ignore_eos = get_bool(r, "ignore_eos").value_or(false);
  s.priority = get_int(r, "priority", INT32_MIN, INT32_MAX).value_or(0);
  if (const Json* v = find(r, "seed")) {
    if (!v->is_number_integer()) throw bad_request("seed must be an integer", "seed");
    s.seed = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
  }
  if (const Json* v = find(r, "stop")) {
    if (v->is_string()) {
      s.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const Json& x : *v) {
        if (!x.is_string()) throw bad_request("stop must be a string or an array of strings", "stop");
        s.stop.push_back(x.get<std::string>());
      }
    } else {
      throw bad_request("stop must be a string or an array of strings", "stop");
    }
    if (static_cast<int64_t>(s.stop.size()) > limits.max_stop) {
      throw bad_request("at most " + std::to_string(limits.max_stop) + " stop sequences", "stop");
    }
    std::erase(s.stop, std::string());
  }
  if (const Json* v = find(r, "stop_token_ids")) {
    if (!v->is_array()) throw bad_request("stop_token_ids must be an array of integers", "stop_token_ids");
    for (const Json& x : *v) {
      if (!x.is_number_integer()) throw bad_request("stop_token_ids must be integers", "stop_token_ids");
      // Range-checked before narrowing: 4294967297 must not wrap to 1 (the vocabulary check
      // of check_token_ids follows).
      const bool fits = x.is_number_unsigned() ? x.get<uint64_t>() <= static_cast<uint64_t>(INT32_MAX)
                                               : x.get<int64_t>() >= 0 && x.get<int64_t>() <= INT32_MAX;
      if (!fits) throw bad_request("stop_token_ids: " + x.dump() + " is not a token id", "stop_token_ids");
      s.params.stop_token_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
  }
  s.stream = get_bool(r, "stream").value_or(false);
  if (const Json* so = find(r, "stream_options")) {
    if (!so->is_object()) throw bad_request("stream_options must be an object", "stream_options");
    if (!s.stream) throw bad_request("stream_options is only allowed with stream", "stream_options");
    for (const auto& [key, value] : so->items()) {
      if (key != "include_usage" && key != "continuous_usage_stats") {
        throw bad_request("stream_options." + key + " is not supported", "stream_options." + key);
      }
    }
    s.include_usage = get_bool(*so, "include_usage", "stream_options.include_usage").value_or(false);
    s.continuous_usage_stats =
        get_bool(*so, "continuous_usage_stats", "stream_options.continuous_usage_stats").value_or(false);
  }
  s.skip_special_tokens = get_bool(r, "skip_special_tokens").value_or(true);
  get_string(r, "user");  // OpenAI's end-user id: recorded nowhere, but it must be a string
  refuse_unsupported_fields(r, chat);
  if (chat) {
    const bool logprobs = get_bool(r, "logprobs").value_or(false);
    const auto top = get_int(r, "top_logprobs", 0, limits.max_top_logprobs);
    if (top && !logprobs) throw bad_request("top_logprobs requires logprobs", "top_logprobs");
    if (logprobs) s.n_logprobs = top.value_or(0);
  } else {
    if (auto k = get_int(r, "logprobs", 0, limits.max_top_logprobs)) s.n_logprobs = *k;
  }
  if (const Json* lb = find(r, "logit_bias")) {
    // OpenAI's form: {"<token id>": bias}, the id a decimal string, the bias in [-100, 100].
    if (!lb->is_object()) throw bad_request("logit_bias must be an object of token id -> bias", "logit_bias");
    if (static_cast<int64_t>(lb->size()) > limits.max_logit_bias) {
      throw bad_request("at most " + std::to_string(limits.max_logit_bias) + " logit_bias entries", "logit_bias");
    }
    for (const auto& [key, value] : lb->items()) {
      const bool digits = !key.empty() && key.size() <= 10 &&
                          std::all_of(key.begin(), key.end(), [](unsigned char c) { return std::isdigit(c); });
      const int64_t id = digits ? std::stoll(key) : -1;
      if (id < 0 || id > INT32_MAX) {
        throw bad_request("logit_bias keys must be token ids (non-negative integers), got '" + key + "'",
                          "logit_bias");
      }
      if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0)) {
        throw bad_request("logit_bias of token " + key + " must be a number in [-100, 100], got " + value.dump(),
                          "logit_bias");
      }
      s.params.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(value.get<double>()));
    }
  }
  if (auto best_of = get_int(r, "best_of", 1, limits.max_n); best_of && *best_of != s.n) {
    throw bad_request("best_of other than n is not supported", "best_of");
  }
  try {
    s.params.validate();
  } catch (const Error& e) {
    throw bad_request(e.what());
  }
  return s;
}

int64_t resolve_max_tokens(const SamplingRequest& s, int64_t n_prompt, int64_t max_model_len,
                           int64_t default_max) {
  const int64_t room = max_model_len - n_prompt;
  if (room < 1) {
    throw bad_request("the prompt has " + std::to_string(n_prompt) +
                          " tokens, which leaves no room in the context of " +
                          std::to_string(max_model_len) + " tokens",
                      "messages");
  }
  int64_t max_tokens = std::min(default_max, room);
  if (s.max_tokens) {
    if (*s.max_tokens > room) {
      throw bad_request("max_tokens " + std::to_string(*s.max_tokens) + " + " + std::to_string(n_prompt) +
                            " prompt tokens exceed the context of " + std::to_string(max_model_len) +
                            " tokens",
                        "max_tokens");
    }
    max_tokens = *s.max_tokens;
  }
  // Refused here, while the request is prepared: a stream must not start and then fail.
  if (s.params.min_tokens > max_tokens) {
    throw bad_request("min_tokens " + std::to_string(s.params.min_tokens) + " exceeds max_tokens " +
                          std::to_string(max_tokens) + (s.max_tokens ? "" : " (the default here)"),
                      "min_tokens");
  }
  return max_tokens;
}

Json parse_constraint(const Json& r, SamplingRequest& s) {
  Constraint c = parse_structured_output(r);
  s.constraint_kind = std::move(c.kind);
  s.constraint = std::move(c.text);
  s.constraint_param = std::move(c.param);
  return c.for_encoder;
}

void check_token_ids(const SamplingRequest& s, int64_t vocab_size) {
  for (int32_t t : s.params.stop_token_ids) {
    if (t < 0 || t >= vocab_size) {
      throw bad_request("stop_token_ids: token id " + std::to_string(t) + " is outside the vocabulary of " +
                            std::to_string(vocab_size),
                        "stop_token_ids");
    }
  }
  for (const auto& [t, bias] : s.params.logit_bias) {
    if (t >= vocab_size) {
      throw bad_request("logit_bias: token id " + std::to_string(t) + " is outside the vocabulary of " +
                            std::to_string(vocab_size),
                        "logit_bias");
    }
  }
}

CompletionRequest parse_completion_request(const Json& r, const recipe::Tokenizer& tokenizer,
                                           const RequestLimits& limits) {
  CompletionRequest c;
  c.sampling = parse_sampling(r, /*chat=*/false, limits);
  parse_constraint(r, c.sampling);
  c.echo = get_bool(r, "echo").value_or(false);
  if (c.echo && c.sampling.n_logprobs >= 0) {
    throw bad_request("echo with logprobs needs the prompt's log-probabilities, which are not computed", "echo");
  }
  const Json* p = find(r, "prompt");
  if (!p) throw bad_request("prompt is required", "prompt");
  auto encode = [&](const std::string& text) {
    if (c.echo) c.prompt_texts.push_back(text);
    try {
      return tokenizer.encode(text, /*add_special_tokens=*/true);
    } catch (const Error& e) {
      throw bad_request(e.what(), "prompt");
    }
  };
  auto ids = [&](const Json& arr) {
    std::vector<int32_t> out;
    for (const Json& x : arr) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= tokenizer.vocab_size()) {
        throw bad_request("prompt token ids must be integers in [0, " +
                              std::to_string(tokenizer.vocab_size()) + ")",
                          "prompt");
      }
      out.push_back(x.get<int32_t>());
    }
    if (c.echo) c.prompt_texts.push_back(tokenizer.decode(out));
    return out;
  };
  if (p->is_string()) {
    c.prompts.push_back(encode(p->get<std::string>()));
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    c.prompts.push_back(ids(*p));
  } else if (p->is_array()) {
    for (const Json& x : *p) {
      if (x.is_string()) {
        c.prompts.push_back(encode(x.get<std::string>()));
      } else if (x.is_array()) {
        c.prompts.push_back(ids(x));
      } else {
        throw bad_request("prompt must be a string, an array of strings, token ids or arrays of ids",
                          "prompt");
      }
    }
  } else {
    throw bad_request("prompt must be a string, an array of strings, token ids or arrays of ids",
                      "prompt");
  }
  if (c.prompts.empty()) throw bad_request("prompt is empty", "prompt");
  for (const auto& ids_ : c.prompts) {
    if (ids_.empty()) throw bad_request("a prompt encodes to no tokens", "prompt");
  }
  if (static_cast<int64_t>(c.prompts.size()) * c.sampling.n > limits.max_n * 8) {
    throw bad_request("too many prompts times n", "prompt");
  }
  return c;
}

ChatRequest parse_chat_request(const Json& r, const RequestLimits& limits, recipe::ChatVersion version,
                               bool default_thinking) {
  ChatRequest c;
  c.sampling = parse_sampling(r, /*chat=*/true, limits);
  const Json* messages = find(r, "messages");
  if (!messages || !messages->is_array() || messages->empty()) {
    throw bad_request("messages must be a non-empty array", "messages");
  }
  if (static_cast<int64_t>(messages->size()) > limits.max_messages) {
    throw bad_request("more than " + std::to_string(limits.max_messages) + " messages", "messages");
  }
  // Rewrite into the recipe layer's conversation JSON (recipe/chat_request.h).
  Json conv = Json::object();
  Json msgs = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_request(where + " must be an object", "messages");
    const Json* role = find(m, "role");
    if (role && *role == "user" && !find(m, "content")) {
      throw bad_request(where + " (user) has no content", "messages");
    }
    Json out = m;
    if (const Json* role = find(m, "role"); role && role->is_string() && role->get<std::string>() == "developer") {
      out["role"] = "system";
    }
    out.erase("name");
    msgs.push_back(std::move(out));
  }
  // vLLM's continue_final_message: the trailing assistant message is continued, not closed
  // (the recipe's "prefix" message, as in DeepSeek's chat prefix completion).
  const bool continue_final = get_bool(r, "continue_final_message").value_or(false);
  if (auto add = get_bool(r, "add_generation_prompt"); add && *add == continue_final) {
    throw bad_request(continue_final ? "continue_final_message needs add_generation_prompt false"
                                     : "add_generation_prompt false is only supported with continue_final_message",
                      "add_generation_prompt");
  }
  if (continue_final) {
    if (msgs.back().value("role", "") != "assistant") {
      throw bad_request("continue_final_message needs the last message to be an assistant message",
                        "continue_final_message");
    }
    msgs.back()["prefix"] = true;
  }
  conv["messages"] = std::move(msgs);

  bool thinking = default_thinking;
  Json effort;
  if (const Json* kw = find(r, "chat_template_kwargs")) {
    if (!kw->is_object()) throw bad_request("chat_template_kwargs must be an object", "chat_template_kwargs");
    for (const char* key : {"thinking", "enable_thinking"}) {
      if (auto t = get_bool(*kw, key)) thinking = *t;
    }
    if (const Json* e = find(*kw, "reasoning_effort")) effort = *e;
  }
  // The DeepSeek API's spelling: "thinking": {"type": "enabled" | "disabled"}.
  if (const Json* t = find(r, "thinking")) {
    const Json* type = t->is_object() ? find(*t, "type") : nullptr;
    if (!type || !type->is_string() || (*type != "enabled" && *type != "disabled")) {
      throw bad_request("thinking must be {\"type\": \"enabled\" | \"disabled\"}", "thinking");
    }
    thinking = *type == "enabled";
  }
  if (const Json* e = find(r, "reasoning_effort")) effort = *e;
  conv["thinking_mode"] = thinking;
  if (!effort.is_null()) conv["reasoning_effort"] = effort;

  std::string choice = "auto";
  const Json* tools = find(r, "tools");
  Json tool_list = tools ? *tools : Json::array();
  if (tools && !tools->is_array()) throw bad_request("tools must be an array", "tools");
  for (size_t i = 0; i < tool_list.size(); ++i) {
    const Json& t = tool_list[i];
    const Json* type = t.is_object() ? find(t, "type") : nullptr;
    const Json* fn = t.is_object() ? find(t, "function") : nullptr;
    const Json* name = fn && fn->is_object() ? find(*fn, "name") : nullptr;
    if (!type || *type != "function" || !name || !name->is_string()) {
      throw bad_request("tools[" + std::to_string(i) + "] must be {\"type\": \"function\", \"function\": {\"name\", ...}}",
                        "tools");
    }
  }
  // With a required / named choice the tool-call grammar allows one call (false) or several.
  const bool parallel_calls = get_bool(r, "parallel_tool_calls").value_or(true);
  if (const Json* tc = find(r, "tool_choice")) {
    if (tc->is_string()) {
      choice = tc->get<std::string>();
      if (choice != "auto" && choice != "none" && choice != "required") {
        throw bad_request("tool_choice must be auto, none, required or a named function", "tool_choice");
      }
    } else if (tc->is_object()) {
      // A named function: offer only that tool and require a call.
      const Json* fn = find(*tc, "function");
      const Json* name = fn && fn->is_object() ? find(*fn, "name") : nullptr;
      if (!name || !name->is_string()) throw bad_request("tool_choice.function.name is required", "tool_choice");
      Json kept = Json::array();
      for (const Json& t : tool_list) {
        const Json* tf = t.is_object() ? find(t, "function") : nullptr;
        const Json* tn = tf && tf->is_object() ? find(*tf, "name") : nullptr;
        if (tn && *tn == *name) kept.push_back(t);
      }
      if (kept.empty()) {
        throw bad_request("tool_choice names '" + name->get<std::string>() + "', which is not in tools",
                          "tool_choice");
      }
      tool_list = std::move(kept);
      choice = "required";
    } else {
      throw bad_request("tool_choice must be a string or an object", "tool_choice");
    }
  }
  if ((choice == "required") && tool_list.empty()) {
    throw bad_request("tool_choice required needs tools", "tool_choice");
  }
  // As deepseek-recipe's conversion (and DeepSeek's API): a thinking turn cannot be forced
  // into a tool call.
  if (thinking && choice == "required" && !tool_list.empty()) {
    throw bad_request("thinking mode does not support tool_choice required or a named function",
                      "tool_choice");
  }
  conv["tools"] = tool_list;
  conv["tool_choice"] = choice;

  // Structured output. The json_object check mirrors OpenAI and deepseek-recipe: the prompt
  // must ask for JSON. A constraint covers the whole output, so it cannot follow a thinking
  // turn's free-form reasoning.
  const Json for_encoder = parse_constraint(r, c.sampling);
  if (choice == "required" && !c.sampling.constraint_kind.empty()) {
    throw bad_request("tool_choice required or a named function cannot be combined with " +
                          c.sampling.constraint_param + " (the tool-call grammar is the constraint)",
                      "tool_choice");
  }
  bool json_output = false;
  if (!for_encoder.is_null()) {
    if (thinking) {
      throw bad_request("response_format constraints cannot be combined with thinking", "response_format");
    }
    if (c.sampling.constraint_kind == "json_object") {
      bool mentions_json = false;
      for (const Json& m : conv["messages"]) {
        if (auto it = m.find("content"); it != m.end() && !it->is_null()) {
          std::string text = it->is_string() ? it->get<std::string>() : it->dump();
          for (char& ch : text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
          mentions_json = mentions_json || text.find("json") != std::string::npos;
        }
      }
      if (!mentions_json) {
        throw bad_request("the messages must contain the word 'json' to use response_format json_object",
                          "response_format");
      }
    }
    json_output = c.sampling.constraint_kind == "json_object" || c.sampling.constraint_kind == "json_schema";
    // deepseek-recipe's encoders (V4 and V4.1) paste the whole schema after "You MUST strictly
    // adhere to the following schema to reply:", with no bound: a 2000-property schema became
    // 21k prompt tokens. Past max_prompt_schema_bytes we keep the Response Format section the
    // encoding requires but in its json_object form (V4: "Reply with JSON object ONLY."; V4.1:
    // the schema {"type": "json_object"}); the grammar still enforces the full schema.
    const bool schema_too_long =
        c.sampling.constraint_kind == "json_schema" &&
        static_cast<int64_t>(c.sampling.constraint.size()) > limits.max_prompt_schema_bytes;
    conv["response_format"] = schema_too_long ? Json{{"type", "json_object"}} : for_encoder;
  } else if (!c.sampling.constraint_kind.empty() && thinking) {
    throw bad_request(c.sampling.constraint_param + " cannot be combined with thinking", c.sampling.constraint_param);
  }
  try {
    c.conversation = recipe::conversation_from_json(
        conv, recipe::chat_completions_request_options(version == recipe::ChatVersion::kV41));
  } catch (const Error& e) {
    throw bad_request(e.what(), "messages");
  }
  c.thinking = thinking && c.conversation.reasoning_effort.tier != recipe::ReasoningEffort::Tier::kNone;
  const bool has_tools = choice != "none" && !tool_list.empty();
  c.parser.parse_tool_calls = has_tools;
  c.parser.starts_in_tool_calls = has_tools && choice == "required";
  if (has_tools && choice == "required") {
    // The prompt opened the tool-call block; the grammar writes the calls (tool_call_constraint.h).
    c.sampling.constraint_kind = recipe::kToolCallConstraintKind;
    c.sampling.constraint = recipe::dsml_tool_call_constraint(
        c.conversation.tools,
        version == recipe::ChatVersion::kV41 ? recipe::DsmlDialect::kV41 : recipe::DsmlDialect::kV4,
        parallel_calls);
    c.sampling.constraint_param = "tool_choice";
  }
  c.parser.parse_json_output = json_output;
  // Thinking starts in the reasoning, or continues a prefix message's reasoning or answer.
  c.parser.start = recipe::parser_options_for(c.conversation).start;
  c.parser.stop_sequences = c.sampling.stop;
  return c;
}

}  // namespace deepinfer::server
