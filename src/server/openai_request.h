// Parsing of OpenAI request bodies (Chat Completions, Completions) into what the engine and
// the recipe layer take. Every refusal is an ApiError (api_error.h) naming the field: 400 for
// malformed JSON, wrong types, out-of-range values and unsupported features, 404 for an
// unknown model. Field names and defaults follow the OpenAI API; vLLM's extensions top_k,
// min_p, repetition_penalty, min_tokens, ignore_eos, stop_token_ids, priority,
// skip_special_tokens, stream_options.continuous_usage_stats, echo (completions),
// continue_final_message (chat) and the guided_* / structured_outputs constraints
// (structured_output.h) are accepted too; logit_bias as OpenAI defines it. Fields that OpenAI
// or vLLM define but this server does not implement are refused unless off
// (request_fields.h); `user` must be a string.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "grammar/budget.h"
#include "recipe/chat_encoding.h"
#include "recipe/messages.h"
#include "recipe/output_parser.h"
#include "recipe/tokenizer.h"
#include "server/api_error.h"
#include "server/request_fields.h"

namespace deepinfer::server {

using Json = nlohmann::ordered_json;

struct RequestLimits {
  int max_json_depth = 64;
  int64_t max_n = 16;
  int64_t max_messages = 4096;
  int64_t max_stop = 16;
  int64_t max_top_logprobs = 20;
  int64_t max_logit_bias = 1024;  // logit_bias entries per request
  // Structured-output constraints are compiled within these budgets (grammar/budget.h).
  grammar::CompileLimits grammar;
  // A response_format json_schema is shown to the model in the prompt only up to this many
  // bytes of its JSON text; a larger one is announced as "reply with a JSON object" (the
  // grammar still enforces the whole schema). 0: never shown.
  int64_t max_prompt_schema_bytes = 8192;
};

// Parses the body; malformed JSON, a non-object or nesting deeper than max_json_depth -> 400.
Json parse_body(const std::string& body, const RequestLimits& limits);

// A "model" other than `served` -> 404 (model_not_found). A missing model is accepted.
void check_model(const Json& request, const std::string& served);

// The sampling fields shared by both endpoints.
struct SamplingRequest {
  int64_t n = 1;
  std::optional<int64_t> max_tokens;  // max_tokens / max_completion_tokens
  SamplingParams params;              // everything but max_tokens and seed
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool continuous_usage_stats = false;  // stream_options (vLLM): usage so far in every chunk
  bool skip_special_tokens = true;    // special tokens (other than the chat parser's markers) make no text
  int64_t n_logprobs = -1;            // -1: none; k: chosen token + top-k
  int64_t priority = 0;               // vLLM's extension: lower runs first (priority policy)
  // Structured output (EngineRequest::constraint_kind / constraint): from response_format
  // json_object / json_schema, or our extensions response_format {"type": "regex", "regex"}
  // and {"type": "ebnf", "ebnf"} (also vLLM's guided_json / guided_regex / guided_grammar).
  std::string constraint_kind;
  std::string constraint;
  std::string constraint_param;       // the request field it came from (for errors)
};

// Reads the structured-output constraint of a request into `s` (both endpoints; every spelling
// of structured_output.h) and checks that it compiles to a grammar: a malformed or unsupported
// schema, pattern or grammar is a 400 naming the field. Returns the response_format object to
// give the chat encoder (deepseek-recipe's form), or null for none.
Json parse_constraint(const Json& request, SamplingRequest& s);

// logit_bias is OpenAI's {"<token id>": bias} map (bias in [-100, 100], added to the raw
// logits; reported logprobs stay those of the raw logits, see SamplingParams::logit_bias).
SamplingRequest parse_sampling(const Json& request, bool chat, const RequestLimits& limits);

// stop_token_ids and logit_bias ids outside [0, vocab_size) -> 400 naming the field.
void check_token_ids(const SamplingRequest& s, int64_t vocab_size);

// max_tokens for a prompt of `n_prompt` tokens: the request's (prompt + max_tokens must fit
// max_model_len, else 400) or, when absent, `default_max` capped by what fits. min_tokens above
// it: 400.
int64_t resolve_max_tokens(const SamplingRequest& s, int64_t n_prompt, int64_t max_model_len,
                           int64_t default_max);

struct CompletionRequest {
  SamplingRequest sampling;
  std::vector<std::vector<int32_t>> prompts;  // one or more prompts, tokenized
  bool echo = false;                          // the output text starts with the prompt's
  std::vector<std::string> prompt_texts;      // echo: each prompt's text (token prompts decoded)
};

CompletionRequest parse_completion_request(const Json& request, const recipe::Tokenizer& tokenizer,
                                           const RequestLimits& limits);

struct ChatRequest {
  SamplingRequest sampling;
  recipe::Conversation conversation;
  recipe::ParserOptions parser;  // how to read the model's output
  bool thinking = false;
};

// Chat messages in the OpenAI form read as deepseek-recipe's Chat Completions conversion reads
// them (recipe::chat_completions_request_options: content parts, image parts, normalisation),
// plus the "developer" role (as system); user messages need content; tools (each
// {"type": "function", "function": {"name", ...}}) and tool_choice (auto / none / required /
// a named function), parallel_tool_calls (a boolean); continue_final_message (the trailing
// assistant message is continued: add_generation_prompt must then be false, and is true
// otherwise),
// chat_template_kwargs {thinking, reasoning_effort}, the DeepSeek API's thinking {type},
// reasoning_effort, response_format
// (text, json_object, json_schema, regex, ebnf: see parse_constraint; not with thinking on).
// Thinking is `default_thinking` unless the request says; thinking with tool_choice required
// or named is refused (as deepseek-recipe does).
ChatRequest parse_chat_request(const Json& request, const RequestLimits& limits,
                               recipe::ChatVersion version = recipe::ChatVersion::kV4,
                               bool default_thinking = false);

}  // namespace deepinfer::server
