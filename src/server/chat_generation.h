// ChatGeneration: POST /v1/chat/completions through the recipe layer. The conversation is
// rendered with the V4 or V4.1 encoder and tokenized (prompt_tokens.h); each choice's output
// goes through an OutputParser (recipe/output_parser.h) into reasoning_content, content and
// tool_calls, streamed as deltas without DSML markup. finish_reason is "tool_calls" when the
// model called tools (and did not run out of tokens). usage counts reasoning tokens (tokens
// produced while the parser was still in the reasoning stage).
// Thread-safety: see generation.h.
#pragma once

#include "recipe/chat_encoding.h"
#include "recipe/output_parser.h"
#include "server/generation.h"
#include "server/text_stream.h"

namespace deepinfer::server {

class ChatGeneration final : public Generation {
 public:
  // Throws ApiError (400) for conversations the encoder refuses or that leave no room.
  ChatGeneration(const ChatRequest& request, const ModelInfo& model);
  std::string response_body() override;

 private:
  struct Tool {
    std::string id;
    std::string name;
    bool header_sent = false;
    Utf8Holdback arguments;
  };
  struct ChatChoice {
    explicit ChatChoice(const recipe::ParserOptions& options) : parser(options) {}
    recipe::OutputParser parser;
    bool role_sent = false;
    Utf8Holdback reasoning, content;
    std::vector<Tool> tools;
    Json logprobs = Json::array();  // accumulated "content" entries (non-streaming)
    int64_t n_reasoning_tokens = 0;
  };

  void handle_output(size_t i, const RequestOutput& out, const std::string& text,
                     std::vector<Json>& chunks) override;
  void handle_finish(size_t i, std::string& reason, std::vector<Json>& chunks) override;
  Json usage() const override;
  // Parser events -> deltas (streaming), merging neighbours of the same kind.
  void to_deltas(ChatChoice& c, const std::vector<recipe::OutputEvent>& events, std::vector<Json>& deltas);
  Json logprob_entries(const RequestOutput& out) const;

  const ChatRequest request_;
  std::vector<ChatChoice> chat_;
};

}  // namespace deepinfer::server
