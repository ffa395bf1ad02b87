#include "server/utility_endpoints.h"

#include <set>

#include "base/error.h"
#include "recipe/chat_encoding.h"

namespace deepinfer::server {
namespace {

void refuse_unknown(const Json& r, const std::set<std::string>& known, const char* endpoint) {
  for (const auto& [key, value] : r.items()) {
    if (!known.count(key)) throw bad_request("unknown parameter '" + key + "' for " + endpoint, key);
  }
}

}  // namespace

std::string tokenize_body(const Json& r, const ModelInfo& model, const RequestLimits& limits,
                          bool default_thinking) {
  const recipe::Tokenizer& tokenizer = *model.tokenizer;
  const bool chat = r.contains("messages");
  if (chat == r.contains("prompt")) throw bad_request("give either prompt or messages", "prompt");
  const bool token_strs = get_bool(r, "return_token_strs").value_or(false);
  std::vector<int32_t> ids;
  if (chat) {
    refuse_unknown(r, {"model", "messages", "add_generation_prompt", "continue_final_message", "tools",
                       "tool_choice", "chat_template_kwargs", "thinking", "reasoning_effort",
                       "add_special_tokens", "return_token_strs"},
                   "/tokenize");
    if (get_bool(r, "add_special_tokens").value_or(false)) {
      throw bad_request("add_special_tokens true is not supported with messages: the chat prompt carries its own "
                        "special tokens",
                        "add_special_tokens");
    }
    Json body = r;
    body.erase("add_special_tokens");
    body.erase("return_token_strs");
    const ChatRequest request = parse_chat_request(body, limits, model.chat_version, default_thinking);
    try {
      ids = recipe::encode_conversation(request.conversation, model.chat_version, tokenizer);
    } catch (const Error& e) {
      throw bad_request(e.what(), "messages");
    }
  } else {
    refuse_unknown(r, {"model", "prompt", "add_special_tokens", "return_token_strs"}, "/tokenize");
    const auto prompt = get_string(r, "prompt");
    if (!prompt) throw bad_request("prompt must be a string", "prompt");
    try {
      ids = tokenizer.encode(*prompt, get_bool(r, "add_special_tokens").value_or(true));
    } catch (const Error& e) {
      throw bad_request(e.what(), "prompt");
    }
  }
  Json strs = nullptr;
  if (token_strs) {
    strs = Json::array();
    for (int32_t id : ids) strs.push_back(tokenizer.id_to_token(id).value_or(""));
  }
  return dump({{"count", ids.size()}, {"max_model_len", model.max_model_len}, {"tokens", ids},
               {"token_strs", std::move(strs)}});
}

std::string detokenize_body(const Json& r, const ModelInfo& model) {
  refuse_unknown(r, {"model", "tokens"}, "/detokenize");
  const Json* tokens = find_field(r, "tokens");
  if (!tokens || !tokens->is_array()) throw bad_request("tokens must be an array of token ids", "tokens");
  const int64_t vocab = model.tokenizer->vocab_size();
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  for (const Json& t : *tokens) {
    const bool ok = t.is_number_integer() && (t.is_number_unsigned() ? t.get<uint64_t>() < uint64_t(vocab)
                                                                      : t.get<int64_t>() >= 0 && t.get<int64_t>() < vocab);
    if (!ok) {
      throw bad_request("tokens: " + t.dump() + " is not a token id in [0, " + std::to_string(vocab) + ")", "tokens");
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return dump({{"prompt", model.tokenizer->decode(ids, /*skip_special_tokens=*/false)}});
}

std::string version_body() { return dump({{"version", kVersion}}); }

std::string load_body(const AsyncEngine& engine) {
  const AsyncEngineStats s = engine.stats();
  return dump(Json{{"live", s.n_live},
                   {"queued", s.n_queued},
                   {"max_live", engine.max_live_requests()},
                   {"state_slots", s.load.n_state_slots},
                   {"state_slots_used", s.load.n_state_slots_used},
                   {"max_block_usage", s.load.max_block_usage},
                   {"unavailable", engine.unavailable()}});
}

ApiError replica_unavailable(const std::string& reason) {
  return ApiError(503, "replica failed: " + reason, "server_error", "", "replica_failed");
}

}  // namespace deepinfer::server
