// Parsing of an OpenAI Responses API body (POST /v1/responses) into the chat path's request.
//
// The body is rewritten into a Chat Completions body and read by parse_chat_request, so the
// conversation, tools, tool_choice, reasoning and structured output follow exactly the rules
// (and the V4 / V4.1 encoders, the DSML tool-call grammar) of /v1/chat/completions:
//   instructions                 -> a leading system message
//   input (a string)             -> one user message
//   input items                  -> messages: {"type": "message"} (roles user / assistant /
//       system / developer; content a string or input_text / output_text / refusal parts),
//       "function_call" (an assistant tool call; consecutive ones join one assistant message),
//       "function_call_output" (a tool message), "reasoning" (reasoning_text content becomes the
//       next assistant message's reasoning_content)
//   max_output_tokens            -> max_tokens
//   tools [{"type": "function", "name", "description", "parameters", "strict"}]
//                                -> tools [{"type": "function", "function": {...}}]
//   tool_choice auto / none / required / {"type": "function", "name"}
//   reasoning {"effort"}         -> thinking on (effort none: off); minimal / low -> low,
//       medium / high -> high, xhigh -> xhigh. Without reasoning: the server's default.
//   text.format text / json_object / json_schema {name, schema, strict} -> response_format
//   temperature, top_p, parallel_tool_calls, stream; vLLM's sampling extensions seed, top_k,
//   min_p, repetition_penalty, presence_penalty, frequency_penalty, stop, stop_token_ids,
//   ignore_eos, min_tokens, priority pass through unchanged.
// Accepted and without effect: metadata (echoed), user, safety_identifier, prompt_cache_key,
// service_tier, store (nothing is stored: the response says store false), stream_options
// include_obfuscation false. Refused (400 naming the field) unless off: previous_response_id,
// conversation, prompt, background, include, top_logprobs, max_tool_calls, truncation "auto",
// tools or tool_choice of other types, image or file inputs. Any other field: 400 (unknown).
// Errors of the chat parser name the Responses field (messages -> input, max_tokens ->
// max_output_tokens, response_format -> text.format).
// Thread-safety: pure functions.
#pragma once

#include "server/openai_request.h"

namespace deepinfer::server {

struct ResponsesRequest {
  ChatRequest chat;
  // What the Response object repeats of the request, in the Responses form: instructions,
  // max_output_tokens, metadata, parallel_tool_calls, reasoning, temperature, text, tool_choice,
  // tools, top_p, user (each null or its default when absent).
  Json echo;
};

ResponsesRequest parse_responses_request(const Json& request, const RequestLimits& limits,
                                         recipe::ChatVersion version = recipe::ChatVersion::kV4,
                                         bool default_thinking = false);

}  // namespace deepinfer::server
