// libFuzzer harness for the chat request -> prompt path the HTTP server runs on a request
// body (HttpSession::prepare, then ChatGeneration): parse_body, check_model,
// parse_chat_request (sampling fields, messages, tools, structured-output constraints),
// check_token_ids, then the prompt: recipe::encode_conversation with the V4 encoding and the
// shipped tokenizer, and with the V4.1 encoding and the V4.1 spelling of that tokenizer, plus
// parser_options_for. /v1/completions bodies go through parse_completion_request.
// Expected outcomes: success, deepinfer::Error (not kInternal), ApiError with a 4xx status.
// The first byte of the input picks the endpoint and the default thinking mode; the rest is
// the body.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "recipe/chat_encoding.h"
#include "recipe/tokenizer.h"
#include "recipe/v41_tokenizer.h"
#include "server/openai_request.h"

using namespace deepinfer;
using namespace deepinfer::server;

namespace {

const recipe::Tokenizer& v4_tokenizer() {
  static const recipe::Tokenizer t = recipe::Tokenizer::from_file(fuzz::shipped_tokenizer_path());
  return t;
}
const recipe::Tokenizer& v41_tokenizer() {
  static const recipe::Tokenizer t =
      recipe::Tokenizer::from_json(recipe::v41_tokenizer_json_from_v4(fuzz::shipped_tokenizer_path()));
  return t;
}

RequestLimits limits() {
  RequestLimits l;
  l.grammar.max_states = 20000;
  l.grammar.max_memory_bytes = 32 << 20;
  l.grammar.timeout_ms = 500;
  return l;
}

template <class Fn>
void refusal_is_4xx(Fn&& fn) {
  fuzz::expect_ok_or_refusal([&] {
    try {
      fn();
    } catch (const ApiError& e) {
      if (e.status >= 500) fuzz::finding("ApiError with a 5xx status", e.what());
    }
  });
}

void chat(const std::string& body, bool thinking) {
  static const RequestLimits l = limits();
  for (const recipe::ChatVersion version : {recipe::ChatVersion::kV4, recipe::ChatVersion::kV41}) {
    const recipe::Tokenizer& tok = version == recipe::ChatVersion::kV4 ? v4_tokenizer() : v41_tokenizer();
    refusal_is_4xx([&] {
      const Json j = parse_body(body, l);
      check_model(j, "deepinfer");
      const ChatRequest r = parse_chat_request(j, l, version, thinking);
      check_token_ids(r.sampling, tok.vocab_size());
      const std::vector<int32_t> prompt = recipe::encode_conversation(r.conversation, version, tok);
      (void)recipe::parser_options_for(r.conversation, r.sampling.stop);
      (void)resolve_max_tokens(r.sampling, static_cast<int64_t>(prompt.size()), 1 << 20, 256);
    });
  }
}

void completion(const std::string& body) {
  static const RequestLimits l = limits();
  refusal_is_4xx([&] {
    const Json j = parse_body(body, l);
    check_model(j, "deepinfer");
    const CompletionRequest r = parse_completion_request(j, v4_tokenizer(), l);
    check_token_ids(r.sampling, v4_tokenizer().vocab_size());
    for (const auto& p : r.prompts) (void)resolve_max_tokens(r.sampling, static_cast<int64_t>(p.size()), 1 << 20, 256);
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)v4_tokenizer();
  (void)v41_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: chat(body, false); break;
    case 1: chat(body, true); break;
    case 2: completion(body); break;
  }
  return 0;
}
