#include "server/responses_generation.h"

#include <algorithm>
#include <chrono>

#include "base/error.h"
#include "recipe/chat_encoding.h"

namespace deepinfer::server {
namespace {

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ResponsesGeneration::ResponsesGeneration(const ResponsesRequest& request, const ModelInfo& model)
    : Generation(random_id("resp_"), "response", model, request.chat.sampling, /*keep_special=*/true),
      request_(request),
      parser_(request.chat.parser) {
  std::vector<int32_t> prompt;
  try {
    prompt = recipe::encode_conversation(request.chat.conversation, model.chat_version, tokenizer_);
  } catch (const Error& e) {
    throw bad_request(e.what(), "input");
  }
  int64_t max_tokens = 0;
  try {
    max_tokens = resolve_max_tokens(request.chat.sampling, static_cast<int64_t>(prompt.size()),
                                    model.max_model_len, model.max_model_len);
  } catch (ApiError& e) {
    e.param = e.param == "messages" ? "input" : e.param == "max_tokens" ? "max_output_tokens" : e.param;
    throw;
  }
  add_choice(prompt, max_tokens, /*count_prompt=*/true);
}

Json ResponsesGeneration::item_event(const char* type) const {
  Json e = {{"type", type}, {"item_id", output_.back()["id"]}, {"output_index", output_.size() - 1}};
  if (open_ != Item::kFunctionCall) e["content_index"] = 0;
  return e;
}

void ResponsesGeneration::open(Item kind, std::vector<Json>& out) {
  if (open_ == kind && kind != Item::kFunctionCall) return;
  close(out);
  Json item;
  Json part;
  switch (kind) {
    case Item::kReasoning:
      item = {{"id", random_id("rs_")}, {"type", "reasoning"}, {"summary", Json::array()},
              {"content", Json::array()}, {"status", "in_progress"}};
      part = {{"type", "reasoning_text"}, {"text", ""}};
      break;
    case Item::kMessage:
      item = {{"id", random_id("msg_")}, {"type", "message"}, {"role", "assistant"}, {"status", "in_progress"},
              {"content", Json::array()}};
      part = {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}, {"logprobs", Json::array()}};
      break;
    case Item::kFunctionCall:
      item = {{"id", random_id("fc_")}, {"type", "function_call"}, {"call_id", random_id("call_")},
              {"name", tool_name_}, {"arguments", ""}, {"status", "in_progress"}};
      break;
    case Item::kNone:
      return;
  }
  output_.push_back(item);
  open_ = kind;
  open_text_.clear();
  out.push_back({{"type", "response.output_item.added"}, {"output_index", output_.size() - 1}, {"item", item}});
  if (!part.is_null()) {
    Json e = item_event("response.content_part.added");
    e["part"] = std::move(part);
    out.push_back(std::move(e));
  }
}

void ResponsesGeneration::append(const std::string& text, std::vector<Json>& out) {
  const std::string t = holdback_.push(text);
  if (t.empty()) return;
  open_text_ += t;
  const char* type = open_ == Item::kReasoning ? "response.reasoning_text.delta"
                     : open_ == Item::kMessage ? "response.output_text.delta"
                                               : "response.function_call_arguments.delta";
  Json e = item_event(type);
  e["delta"] = t;
  if (open_ == Item::kMessage) e["logprobs"] = Json::array();
  out.push_back(std::move(e));
}

void ResponsesGeneration::close(std::vector<Json>& out, const char* status) {
  if (open_ == Item::kNone) return;
  const std::string rest = holdback_.flush();
  if (!rest.empty()) {
    open_text_ += rest;
    Json e = item_event(open_ == Item::kReasoning ? "response.reasoning_text.delta"
                        : open_ == Item::kMessage ? "response.output_text.delta"
                                                  : "response.function_call_arguments.delta");
    e["delta"] = rest;
    if (open_ == Item::kMessage) e["logprobs"] = Json::array();
    out.push_back(std::move(e));
  }
  Json& item = output_.back();
  if (open_ == Item::kFunctionCall) {
    Json e = item_event("response.function_call_arguments.done");
    e["arguments"] = open_text_;
    out.push_back(std::move(e));
    item["arguments"] = open_text_;
  } else {
    const bool reasoning = open_ == Item::kReasoning;
    Json part = reasoning ? Json{{"type", "reasoning_text"}, {"text", open_text_}}
                          : Json{{"type", "output_text"}, {"text", open_text_}, {"annotations", Json::array()},
                                 {"logprobs", Json::array()}};
    Json done = item_event(reasoning ? "response.reasoning_text.done" : "response.output_text.done");
    done["text"] = open_text_;
    if (!reasoning) done["logprobs"] = Json::array();
    out.push_back(std::move(done));
    Json part_done = item_event("response.content_part.done");
    part_done["part"] = part;
    out.push_back(std::move(part_done));
    item["content"] = Json::array({std::move(part)});
  }
  item["status"] = status;
  out.push_back({{"type", "response.output_item.done"}, {"output_index", output_.size() - 1}, {"item", item}});
  open_ = Item::kNone;
  open_text_.clear();
}

void ResponsesGeneration::on_events(const std::vector<recipe::OutputEvent>& events, std::vector<Json>& out) {
  using Kind = recipe::OutputEvent::Kind;
  for (const recipe::OutputEvent& e : events) {
    switch (e.kind) {
      case Kind::kReasoning:
        if (e.text.empty()) break;
        open(Item::kReasoning, out);
        append(e.text, out);
        break;
      case Kind::kContent:
        if (e.text.empty()) break;
        open(Item::kMessage, out);
        append(e.text, out);
        break;
      case Kind::kToolCallBegin:
        close(out);
        tool_index_ = e.tool_index;
        tool_name_.clear();
        break;
      case Kind::kToolName:
        tool_name_ += e.text;
        break;
      case Kind::kToolArguments:
        if (open_ != Item::kFunctionCall) open(Item::kFunctionCall, out);
        append(e.text, out);
        break;
      case Kind::kStop:
        break;
    }
  }
}

void ResponsesGeneration::handle_output(size_t i, const RequestOutput& out, const std::string& text,
                                        std::vector<Json>& chunks) {
  const recipe::ParsedOutput& parsed = parser_.result();
  if (request_.chat.thinking && parsed.content.empty() && parsed.tool_calls.empty() && !parser_.ended()) {
    n_reasoning_tokens_ += static_cast<int64_t>(out.new_tokens.size());
  }
  on_events(parser_.feed(text), chunks);
  if (parser_.ended()) end_early(i, "stop");
}

void ResponsesGeneration::handle_finish(size_t, std::string& reason, std::vector<Json>& chunks) {
  on_events(parser_.finish(), chunks);
  const recipe::ParsedOutput& parsed = parser_.result();
  // A call whose arguments never streamed (the parser settled them at the end) still gets its item.
  const int n_calls = static_cast<int>(parsed.tool_calls.size());
  const int n_items = static_cast<int>(std::count_if(output_.begin(), output_.end(), [](const Json& item) {
    return item["type"] == "function_call";
  }));
  for (int k = n_items; k < n_calls; ++k) {
    tool_name_ = parsed.tool_calls[k].name;
    open(Item::kFunctionCall, chunks);
    append(parsed.tool_calls[k].arguments, chunks);
  }
  if (n_calls > 0 && reason != "length") reason = "tool_calls";
  finish_reason_ = reason;
  status_ = reason == "length" ? "incomplete" : "completed";
  close(chunks, status_.c_str());
}

Json ResponsesGeneration::usage() const {
  const int64_t completion = n_completion_tokens();
  return {{"input_tokens", n_prompt_tokens()},
          {"input_tokens_details", {{"cached_tokens", n_cached_prompt_tokens()}, {"cache_write_tokens", 0}}},
          {"output_tokens", completion},
          {"output_tokens_details", {{"reasoning_tokens", n_reasoning_tokens_}}},
          {"total_tokens", n_prompt_tokens() + completion}};
}

Json ResponsesGeneration::wrap_chunk(Json event) {
  event["sequence_number"] = sequence_++;
  return event;
}

Json ResponsesGeneration::response_object(const std::string& status) const {
  const Json& echo = request_.echo;
  Json r = {{"id", id_}, {"object", "response"}, {"created_at", created_}, {"status", status},
            {"background", false}, {"error", nullptr}, {"incomplete_details", nullptr}};
  if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  if (status == "failed" && error()) r["error"] = {{"code", "server_error"}, {"message", error()->what()}};
  if (status == "completed" || status == "incomplete") r["completed_at"] = unix_seconds();
  r["instructions"] = echo["instructions"];
  r["max_output_tokens"] = echo["max_output_tokens"];
  r["metadata"] = echo["metadata"];
  r["model"] = model_;
  r["output"] = output_;
  r["parallel_tool_calls"] = echo["parallel_tool_calls"];
  r["previous_response_id"] = nullptr;
  r["reasoning"] = echo["reasoning"];
  r["store"] = false;
  r["temperature"] = echo["temperature"];
  r["text"] = echo["text"];
  r["tool_choice"] = echo["tool_choice"];
  r["tools"] = echo["tools"];
  r["top_p"] = echo["top_p"];
  r["truncation"] = "disabled";
  r["usage"] = status == "in_progress" ? Json(nullptr) : usage();
  r["user"] = echo["user"];
  return r;
}

std::vector<std::string> ResponsesGeneration::initial_events() {
  std::vector<std::string> events;
  for (const char* type : {"response.created", "response.in_progress"}) {
    events.push_back(dump(wrap_chunk({{"type", type}, {"response", response_object("in_progress")}})));
  }
  return events;
}

std::vector<std::string> ResponsesGeneration::final_events() {
  if (!stream() || error()) return {};
  const char* type = status_ == "incomplete" ? "response.incomplete" : "response.completed";
  return {dump(wrap_chunk({{"type", type}, {"response", response_object(status_)}}))};
}

std::string ResponsesGeneration::stream_error_payload() {
  return dump(wrap_chunk({{"type", "response.failed"}, {"response", response_object("failed")}}));
}

std::string ResponsesGeneration::sse(const std::string& payload) const {
  // Every payload here starts with its "type" member (ordered JSON).
  constexpr std::string_view kPrefix = "{\"type\":\"";
  std::string type = "message";
  if (payload.rfind(kPrefix, 0) == 0) {
    type = payload.substr(kPrefix.size(), payload.find('"', kPrefix.size()) - kPrefix.size());
  }
  return "event: " + type + "\ndata: " + payload + "\n\n";
}

std::string ResponsesGeneration::response_body() { return dump(response_object(status_)); }

}  // namespace deepinfer::server
