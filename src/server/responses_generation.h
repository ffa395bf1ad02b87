// ResponsesGeneration: POST /v1/responses (the OpenAI Responses API) over the chat path.
//
// The prompt is the chat path's (responses_request.h -> the V4 / V4.1 encoder) and the output
// goes through the same recipe::OutputParser; its events become Response output items, in
// order: a "reasoning" item (thinking mode; its text in content [{"type": "reasoning_text"}],
// summary empty), a "message" item (one output_text part) and one "function_call" item per
// tool call (arguments as JSON text). Shapes follow the openai package's types
// (openai/types/responses): Response, ResponseOutputMessage, ResponseReasoningItem,
// ResponseFunctionToolCall, ResponseUsage.
//
// Streaming: SSE "event: TYPE\ndata: JSON" with sequence_number counting from 0 and no [DONE]:
//   response.created, response.in_progress; per item response.output_item.added, then for
//   reasoning / message response.content_part.added, response.reasoning_text.delta /
//   response.output_text.delta ..., response.reasoning_text.done / response.output_text.done,
//   response.content_part.done; for a call response.function_call_arguments.delta ...,
//   response.function_call_arguments.done; then response.output_item.done; finally
//   response.completed, or response.incomplete (status "incomplete", incomplete_details
//   {"reason": "max_output_tokens"}) when the token limit cut the output, or response.failed
//   when the engine failed. The non-streaming body is the Response of the final event.
// Thread-safety: see generation.h.
#pragma once

#include "recipe/output_parser.h"
#include "server/generation.h"
#include "server/responses_request.h"
#include "server/text_stream.h"

namespace deepinfer::server {

class ResponsesGeneration final : public Generation {
 public:
  // Throws ApiError (400) for conversations the encoder refuses or that leave no room.
  ResponsesGeneration(const ResponsesRequest& request, const ModelInfo& model);
  std::string response_body() override;
  std::vector<std::string> initial_events() override;
  std::vector<std::string> final_events() override;
  std::string sse(const std::string& payload) const override;
  std::string sse_end() const override { return ""; }

 private:
  enum class Item { kNone, kReasoning, kMessage, kFunctionCall };

  void handle_output(size_t i, const RequestOutput& out, const std::string& text,
                     std::vector<Json>& chunks) override;
  void handle_finish(size_t i, std::string& reason, std::vector<Json>& chunks) override;
  Json usage() const override;
  Json wrap_chunk(Json event) override;
  std::string stream_error_payload() override;

  void on_events(const std::vector<recipe::OutputEvent>& events, std::vector<Json>& out);
  // Opens an output item of `kind` (closing the open one) unless it is already open.
  void open(Item kind, std::vector<Json>& out);
  // Appends text to the open item (held back to whole UTF-8 characters), as a delta event.
  void append(const std::string& text, std::vector<Json>& out);
  void close(std::vector<Json>& out, const char* status = "completed");
  // Fields every event of the open item carries.
  Json item_event(const char* type) const;
  Json response_object(const std::string& status) const;

  const ResponsesRequest request_;
  recipe::OutputParser parser_;
  Json output_ = Json::array();  // the output items; the last one may be open
  Item open_ = Item::kNone;
  std::string open_text_;        // the open item's text (reasoning, output text or arguments)
  Utf8Holdback holdback_;
  std::string tool_name_;        // of the call whose arguments come next
  int tool_index_ = -1;          // parser index of the open function_call item
  int64_t n_reasoning_tokens_ = 0;
  int64_t sequence_ = 0;
  std::string status_ = "in_progress";
  std::string finish_reason_;
};

}  // namespace deepinfer::server
