#include "server/request_fields.h"

#include <cstdint>

namespace deepinfer::server {

const Json* find_field(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> get_number(const Json& obj, const char* key, double lo, double hi) {
  const Json* v = find_field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw bad_request(std::string(key) + " must be a number", key);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) {
    throw bad_request(std::string(key) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                          "], got " + v->dump(),
                      key);
  }
  return x;
}

std::optional<int64_t> get_int(const Json& obj, const char* key, int64_t lo, int64_t hi) {
  const Json* v = find_field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) throw bad_request(std::string(key) + " must be an integer", key);
  // Unsigned values above INT64_MAX read as negative through get<int64_t>.
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    throw bad_request(std::string(key) + " is out of range", key);
  }
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) {
    throw bad_request(std::string(key) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                          "], got " + std::to_string(x),
                      key);
  }
  return x;
}

std::optional<bool> get_bool(const Json& obj, const char* key, const std::string& param) {
  const Json* v = find_field(obj, key);
  if (!v) return std::nullopt;
  const std::string name = param.empty() ? std::string(key) : param;
  if (!v->is_boolean()) throw bad_request(name + " must be a boolean", name);
  return v->get<bool>();
}

std::optional<std::string> get_string(const Json& obj, const char* key) {
  const Json* v = find_field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw bad_request(std::string(key) + " must be a string", key);
  return v->get<std::string>();
}

namespace {

enum class Endpoint { kBoth, kChat, kCompletions };

struct Unsupported {
  const char* name;
  Endpoint where;
  const char* what;  // why it cannot be honoured
};

// Fields whose meaning this server does not implement. Absent, null, false, an empty array or
// object (and length_penalty 1) mean "off" and pass.
constexpr Unsupported kUnsupported[] = {
    {"prompt_logprobs", Endpoint::kBoth, "prompt log-probabilities are not computed"},
    {"use_beam_search", Endpoint::kBoth, "beam search is not implemented"},
    {"length_penalty", Endpoint::kBoth, "beam search is not implemented"},
    {"allowed_token_ids", Endpoint::kBoth, "use logit_bias instead"},
    {"bad_words", Endpoint::kBoth, "use logit_bias instead"},
    {"include_stop_str_in_output", Endpoint::kBoth, "stop strings are always cut from the output"},
    {"truncate_prompt_tokens", Endpoint::kBoth, "prompts are never truncated"},
    {"logits_processors", Endpoint::kBoth, "custom logits processors are not supported"},
    {"return_tokens_as_token_ids", Endpoint::kBoth, "tokens are returned as text"},
    {"guided_whitespace_pattern", Endpoint::kBoth, "the whitespace of JSON output is fixed"},
    {"structural_tag", Endpoint::kBoth, "structural tags are not supported"},
    {"chat_template", Endpoint::kChat, "the model's own chat encoding is always used"},
    {"documents", Endpoint::kChat, "documents are not supported"},
    {"mm_processor_kwargs", Endpoint::kChat, "multi-modal inputs are not supported"},
    {"functions", Endpoint::kChat, "the legacy functions field is not supported; use tools"},
    {"function_call", Endpoint::kChat, "the legacy function_call field is not supported; use tool_choice"},
    {"audio", Endpoint::kChat, "audio output is not supported"},
    {"prediction", Endpoint::kChat, "predicted outputs are not supported"},
    {"web_search_options", Endpoint::kChat, "web search is not supported"},
    {"echo", Endpoint::kChat, "echo is only supported by /v1/completions"},
    {"suffix", Endpoint::kCompletions, "suffix (fill in the middle) is not supported"},
};

bool is_off(const Json& v, const char* name) {
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_array() || v.is_object()) return v.empty();
  if (std::string(name) == "length_penalty") return v.is_number() && v.get<double>() == 1.0;
  return false;
}

}  // namespace

void refuse_unsupported_fields(const Json& r, bool chat) {
  for (const Unsupported& u : kUnsupported) {
    if (u.where == (chat ? Endpoint::kCompletions : Endpoint::kChat)) continue;
    auto it = r.find(u.name);
    if (it == r.end() || is_off(*it, u.name)) continue;
    throw ApiError(400, std::string(u.name) + " is not supported: " + u.what, "invalid_request_error", u.name,
                   "unsupported_parameter");
  }
  // Only text output exists.
  if (const Json* m = chat ? find_field(r, "modalities") : nullptr) {
    if (!m->is_array() || m->size() != 1 || (*m)[0] != "text") {
      throw ApiError(400, "modalities: only [\"text\"] is supported", "invalid_request_error", "modalities",
                     "unsupported_parameter");
    }
  }
}

}  // namespace deepinfer::server
