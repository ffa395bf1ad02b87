// The HTTP driver of `deepinfer bench --base-url URL`: runs a Traffic against a running
// OpenAI-compatible server (ours, vLLM, SGLang, ...) through streaming /v1/completions.
//
// Each request is POST <base-url><endpoint> with {"model", "prompt": [token ids],
// "max_tokens", "temperature": 0, "ignore_eos": true, "stream": true,
// "stream_options": {"include_usage": true}}. Its clock starts just before the request is
// written; every SSE event with non-empty choices[0].text is one arrival (TTFT, ITL); the
// output token count is the final usage.completion_tokens when the server sends one, else
// the number of arrivals. A non-200 status, an "error" event or a broken connection fails
// that request only (RequestRecord::error). Plain http only (no TLS). The CLI takes the API
// key from $OPENAI_API_KEY, as vLLM's benchmark does.
//
// Concurrency: worker threads with one keep-alive connection each (the traffic's
// max_concurrency of them, or one per request up to kMaxHttpWorkers in open loop); a worker
// takes the next request, waits for its arrival time and sends it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/bench_metrics.h"
#include "cli/bench_traffic.h"

namespace deepinfer {

constexpr int64_t kMaxHttpWorkers = 512;

struct HttpTarget {
  std::string host, port;    // from base_url
  std::string path_prefix;   // base_url's path ("" or e.g. "/proxy")
  std::string endpoint = "/v1/completions";
  std::string model;         // "model" of each request; empty: the first of GET /v1/models
  std::string api_key;       // sent as "Authorization: Bearer KEY" when not empty
};

// Parses "http://host[:port][/prefix]" (port 80 by default). Throws kInvalidInput otherwise.
HttpTarget parse_base_url(const std::string& url);

// GET <prefix>/v1/models: the first model id. Throws kInvalidInput naming the URL when the
// server cannot be reached or answers without one.
std::string first_served_model(const HttpTarget& target);

struct HttpRun {
  std::vector<RequestRecord> records;  // one per prompt, in order
  double duration_s = 0;
};

// One warm-up request (not recorded) first when `warmup`.
HttpRun run_http_traffic(const HttpTarget& target, const Traffic& traffic, bool warmup);

// What a streamed completion sent besides its timing: the text, and the usage chunk's prompt
// tokens and usage.prompt_tokens_details.cached_tokens (unset when the server sent none).
struct HttpReply {
  std::string text;
  std::optional<int64_t> prompt_tokens, cached_tokens;
};

// One streaming completion of a text prompt on its own connection (bench --multi-turn); fills
// `record` (its clock starts at the send; n_prompt_tokens from the usage) and returns the reply.
HttpReply http_text_completion(const HttpTarget& target, const std::string& prompt, int64_t max_tokens,
                               RequestRecord& record);

// GET <prefix><path>: the body of a 200 answer. Throws kInvalidInput naming the URL otherwise.
std::string http_get(const HttpTarget& target, const std::string& path);

}  // namespace deepinfer
