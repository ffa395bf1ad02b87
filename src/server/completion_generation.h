// CompletionGeneration: POST /v1/completions. Each prompt gets n choices (index =
// prompt * n + j); stop strings are cut out of the text (the text before the first one is
// returned, finish_reason "stop"); logprobs in the legacy form {tokens, token_logprobs,
// top_logprobs, text_offset}. With echo the text starts with the prompt's (not cut by stop
// strings; a stream sends it in each choice's first chunk). Thread-safety: see generation.h.
#pragma once

#include <memory>

#include "server/generation.h"
#include "server/text_stream.h"

namespace deepinfer::server {

class CompletionGeneration final : public Generation {
 public:
  static constexpr int64_t kDefaultMaxTokens = 16;  // OpenAI's default for completions

  // Throws ApiError (400) when a prompt leaves no room for max_tokens.
  CompletionGeneration(const CompletionRequest& request, const ModelInfo& model);
  std::string response_body() override;

 private:
  struct Text {
    StopMatcher stop;
    std::string text;
    Json logprobs;       // accumulated (non-streaming)
    int64_t offset = 0;  // text_offset of the next token
    std::string echo;    // streaming: the prompt text still to send (echo)
  };
  void handle_output(size_t i, const RequestOutput& out, const std::string& text,
                     std::vector<Json>& chunks) override;
  void handle_finish(size_t i, std::string& reason, std::vector<Json>& chunks) override;
  Json logprobs_of(Text& t, const RequestOutput& out);

  std::vector<Text> texts_;
};

}  // namespace deepinfer::server
