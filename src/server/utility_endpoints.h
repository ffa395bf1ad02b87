// The small endpoints vLLM's server has next to the OpenAI ones:
//   POST /tokenize    {"prompt": "...", "add_special_tokens": true, "return_token_strs": false}
//                  or {"messages": [...], "add_generation_prompt": true, "tools", "tool_choice",
//                      "chat_template_kwargs", "continue_final_message", "thinking",
//                      "reasoning_effort", "return_token_strs"}  (the prompt /v1/chat/completions
//                      would run, from the same encoder)
//                  -> {"count", "max_model_len", "tokens", "token_strs" (null unless asked)}
//   POST /detokenize  {"tokens": [ids]} -> {"prompt": text} (special tokens kept)
//   GET  /version     -> {"version": kVersion}
//   GET  /internal/load -> {"live", "queued", "max_live", "state_slots", "state_slots_used",
//                      "max_block_usage", "unavailable"}: what the data-parallel front routes by
//                      (parallel/dp/dp_front.h); "unavailable" is "" while the engine can step
// "model" is checked as elsewhere. Unknown fields, wrong types and ids outside the vocabulary
// are 400s naming the field.
// Thread-safety: pure functions (the tokenizer is read-only).
#pragma once

#include <string>

#include "engine/async_engine.h"
#include "server/api_error.h"
#include "server/generation.h"
#include "server/openai_request.h"

namespace deepinfer::server {

// The server's version (the Python package's, pyproject.toml).
inline constexpr const char* kVersion = "0.1.0";

// Each returns the JSON response body; throws ApiError for a bad request.
std::string tokenize_body(const Json& request, const ModelInfo& model, const RequestLimits& limits,
                          bool default_thinking);
std::string detokenize_body(const Json& request, const ModelInfo& model);
std::string version_body();
std::string load_body(const AsyncEngine& engine);
// 503 for an engine that can never step again (AsyncEngine::unavailable(), the reason).
ApiError replica_unavailable(const std::string& reason);

}  // namespace deepinfer::server
