// Typed reads of request JSON fields, each refusal a 400 naming the field (api_error.h), and
// the table of request fields that OpenAI or vLLM define but this server does not implement:
// they are refused (400 naming the field) unless they hold their no-op value, so that no
// accepted field is silently ignored.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace deepinfer::server {

using Json = nlohmann::ordered_json;

// The field's value, nullptr when absent or null.
const Json* find_field(const Json& obj, const char* key);
// Absent or null: nullopt. Wrong type or outside [lo, hi]: 400 naming `key` (`param` when given,
// e.g. "stream_options.include_usage").
std::optional<double> get_number(const Json& obj, const char* key, double lo, double hi);
std::optional<int64_t> get_int(const Json& obj, const char* key, int64_t lo, int64_t hi);
std::optional<bool> get_bool(const Json& obj, const char* key, const std::string& param = "");
std::optional<std::string> get_string(const Json& obj, const char* key);

// Refuses the fields this server knows but does not implement, for the chat (`chat`) or the
// completions endpoint: prompt_logprobs, use_beam_search, allowed_token_ids, bad_words,
// include_stop_str_in_output, truncate_prompt_tokens, logits_processors, chat_template, ... A
// field holding its no-op value (false, null, an empty list, 1.0 for length_penalty) passes.
void refuse_unsupported_fields(const Json& request, bool chat);

}  // namespace deepinfer::server
