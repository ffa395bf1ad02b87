#include "server/chat_generation.h"

#include "base/error.h"
#include "recipe/chat_encoding.h"

namespace deepinfer::server {
namespace {

Json chunk_choice(size_t i, Json delta, Json logprobs = nullptr, Json finish_reason = nullptr) {
  return {{"index", i}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)},
          {"finish_reason", std::move(finish_reason)}};
}

// Appends a {key: text} delta, or extends the previous delta when it is the same kind.
void add_text_delta(std::vector<Json>& deltas, const char* key, const std::string& text) {
  if (text.empty()) return;
  if (!deltas.empty() && deltas.back().size() == 1 && deltas.back().contains(key)) {
    deltas.back()[key] = deltas.back()[key].get<std::string>() + text;
  } else {
    deltas.push_back({{key, text}});
  }
}

}  // namespace

ChatGeneration::ChatGeneration(const ChatRequest& request, const ModelInfo& model)
    : Generation(random_id("chatcmpl-"), "chat.completion.chunk", model, request.sampling, /*keep_special=*/true),
      request_(request) {
  const int64_t max_model_len = model.max_model_len;
  std::vector<int32_t> prompt;
  try {
    prompt = recipe::encode_conversation(request.conversation, model.chat_version, tokenizer_);
  } catch (const Error& e) {
    throw bad_request(e.what(), "messages");
  }
  const int64_t max_tokens = resolve_max_tokens(request.sampling, static_cast<int64_t>(prompt.size()),
                                                max_model_len, max_model_len);
  for (int64_t j = 0; j < request.sampling.n; ++j) {
    add_choice(prompt, max_tokens, j == 0);
    chat_.emplace_back(request.parser);
  }
}

Json ChatGeneration::logprob_entries(const RequestOutput& out) const {
  Json entries = Json::array();
  auto entry = [&](int32_t id, float logprob) {
    const std::string text = token_text(id);
    Json bytes = Json::array();
    for (unsigned char b : text) bytes.push_back(static_cast<int>(b));
    return Json{{"token", text}, {"logprob", logprob}, {"bytes", std::move(bytes)}};
  };
  for (const TokenLogprob& l : out.logprobs) {
    Json e = entry(l.token, l.logprob);
    Json top = Json::array();
    for (const auto& [id, value] : l.top) top.push_back(entry(id, value));
    e["top_logprobs"] = std::move(top);
    entries.push_back(std::move(e));
  }
  return entries;
}

void ChatGeneration::to_deltas(ChatChoice& c, const std::vector<recipe::OutputEvent>& events,
                               std::vector<Json>& deltas) {
  using Kind = recipe::OutputEvent::Kind;
  auto send_header = [&](Tool& t, int k) {
    if (t.header_sent) return;
    t.header_sent = true;
    deltas.push_back({{"tool_calls", Json::array({{{"index", k}, {"id", t.id}, {"type", "function"},
                                                   {"function", {{"name", t.name}, {"arguments", ""}}}}})}});
  };
  for (const recipe::OutputEvent& e : events) {
    switch (e.kind) {
      case Kind::kReasoning:
        add_text_delta(deltas, "reasoning_content", c.reasoning.push(e.text));
        break;
      case Kind::kContent:
        add_text_delta(deltas, "content", c.content.push(e.text));
        break;
      case Kind::kToolCallBegin:
        add_text_delta(deltas, "reasoning_content", c.reasoning.flush());
        add_text_delta(deltas, "content", c.content.flush());
        while (static_cast<int>(c.tools.size()) <= e.tool_index) c.tools.emplace_back().id = random_id("call_");
        break;
      case Kind::kToolName:
        while (static_cast<int>(c.tools.size()) <= e.tool_index) c.tools.emplace_back().id = random_id("call_");
        c.tools[e.tool_index].name += e.text;
        break;
      case Kind::kToolArguments: {
        while (static_cast<int>(c.tools.size()) <= e.tool_index) c.tools.emplace_back().id = random_id("call_");
        Tool& t = c.tools[e.tool_index];
        send_header(t, e.tool_index);
        const std::string args = t.arguments.push(e.text);
        if (!args.empty()) {
          deltas.push_back({{"tool_calls", Json::array({{{"index", e.tool_index},
                                                         {"function", {{"arguments", args}}}}})}});
        }
        break;
      }
      case Kind::kStop:
        break;
    }
  }
}

void ChatGeneration::handle_output(size_t i, const RequestOutput& out, const std::string& text,
                                   std::vector<Json>& chunks) {
  ChatChoice& c = chat_[i];
  const recipe::ParsedOutput& parsed = c.parser.result();
  if (request_.thinking && parsed.content.empty() && parsed.tool_calls.empty() && !c.parser.ended()) {
    c.n_reasoning_tokens += static_cast<int64_t>(out.new_tokens.size());
  }
  const std::vector<recipe::OutputEvent> events = c.parser.feed(text);
  Json lp = nullptr;
  if (sampling_.n_logprobs >= 0 && !out.logprobs.empty()) {
    Json entries = logprob_entries(out);
    if (stream()) {
      lp = {{"content", std::move(entries)}};
    } else {
      for (Json& e : entries) c.logprobs.push_back(std::move(e));
    }
  }
  if (c.parser.ended()) end_early(i, "stop");
  if (!stream()) return;
  if (!c.role_sent) {
    c.role_sent = true;
    chunks.push_back(chunk_choice(i, {{"role", "assistant"}, {"content", ""}}));
  }
  std::vector<Json> deltas;
  to_deltas(c, events, deltas);
  if (deltas.empty() && !lp.is_null()) deltas.push_back(Json::object());
  for (Json& d : deltas) {
    chunks.push_back(chunk_choice(i, std::move(d), std::move(lp)));
    lp = nullptr;
  }
}

void ChatGeneration::handle_finish(size_t i, std::string& reason, std::vector<Json>& chunks) {
  ChatChoice& c = chat_[i];
  const std::vector<recipe::OutputEvent> events = c.parser.finish();
  if (!c.parser.result().tool_calls.empty() && reason != "length") reason = "tool_calls";
  if (!stream()) return;
  if (!c.role_sent) {
    c.role_sent = true;
    chunks.push_back(chunk_choice(i, {{"role", "assistant"}, {"content", ""}}));
  }
  std::vector<Json> deltas;
  to_deltas(c, events, deltas);
  add_text_delta(deltas, "reasoning_content", c.reasoning.flush());
  add_text_delta(deltas, "content", c.content.flush());
  for (size_t k = 0; k < c.tools.size(); ++k) {
    Tool& t = c.tools[k];
    if (!t.header_sent) {
      t.header_sent = true;
      deltas.push_back({{"tool_calls", Json::array({{{"index", k}, {"id", t.id}, {"type", "function"},
                                                     {"function", {{"name", t.name}, {"arguments", ""}}}}})}});
    }
    const std::string args = t.arguments.flush();
    if (!args.empty()) {
      deltas.push_back({{"tool_calls", Json::array({{{"index", k}, {"function", {{"arguments", args}}}}})}});
    }
  }
  for (Json& d : deltas) chunks.push_back(chunk_choice(i, std::move(d)));
  chunks.push_back(chunk_choice(i, Json::object(), nullptr, reason));
}

Json ChatGeneration::usage() const {
  Json u = Generation::usage();
  int64_t reasoning = 0;
  for (const ChatChoice& c : chat_) reasoning += c.n_reasoning_tokens;
  u["completion_tokens_details"] = {{"reasoning_tokens", reasoning}};
  return u;
}

std::string ChatGeneration::response_body() {
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const recipe::ParsedOutput& parsed = chat_[i].parser.result();
    Json message = {{"role", "assistant"}, {"content", parsed.content}};
    if (!parsed.reasoning_content.empty() || request_.thinking) {
      message["reasoning_content"] = parsed.reasoning_content;
    }
    if (!parsed.tool_calls.empty()) {
      Json calls = Json::array();
      for (const recipe::ParsedToolCall& call : parsed.tool_calls) {
        calls.push_back({{"id", random_id("call_")}, {"type", "function"},
                         {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      }
      message["tool_calls"] = std::move(calls);
      if (parsed.content.empty()) message["content"] = nullptr;
    }
    Json lp = nullptr;
    if (sampling_.n_logprobs >= 0) lp = {{"content", chat_[i].logprobs}};
    choices.push_back({{"index", i}, {"message", std::move(message)}, {"logprobs", std::move(lp)},
                       {"finish_reason", choices_[i].finish_reason}});
  }
  Json body = {{"id", id_}, {"object", "chat.completion"}, {"created", created_}, {"model", model_},
               {"choices", std::move(choices)}, {"usage", usage()}};
  return dump(body);
}

}  // namespace deepinfer::server
