// Generation: one HTTP generation request (its n choices, each one engine request) turned
// into OpenAI responses. The session feeds it every engine output; it answers with SSE
// payloads (streaming) or, once every choice has finished, the response body.
// Subclasses (completion_generation.h, chat_generation.h) shape the text of one choice.
//
// Choices that end early (a stop sequence, a closed tool-call block) are finished here at
// once and their engine ids handed back for the session to abort; later outputs of those
// requests are ignored.
//
// Thread-safety: none; the owning session calls it from its strand only.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "recipe/chat_encoding.h"
#include "recipe/detokenizer.h"
#include "recipe/tokenizer.h"
#include "server/openai_request.h"

namespace deepinfer::server {

// What every generation of one server needs to know about the model.
struct ModelInfo {
  const recipe::Tokenizer* tokenizer = nullptr;
  std::string name;                  // the served model name
  int64_t max_model_len = 0;
  std::vector<int32_t> eos_ids;      // end-of-sequence ids: never part of the text
  recipe::ChatVersion chat_version = recipe::ChatVersion::kV4;
};

class Generation {
 public:
  // Text comes from the engine's tokens through one StreamDetokenizer per choice, added
  // tokens kept (`keep_special`, chat: the output parser needs "</think>" and DSML markers) or
  // special ones dropped; EOS ids and the request's stop_token_ids never become text, nor, when
  // the request skips special tokens (its default), special tokens other than those markers.
  // Streaming with stream_options.continuous_usage_stats puts the usage so far in every chunk.
  Generation(std::string id, std::string object, const ModelInfo& model, const SamplingRequest& sampling,
             bool keep_special);
  virtual ~Generation() = default;

  const std::string& id() const { return id_; }
  bool stream() const { return sampling_.stream; }
  const SamplingRequest& sampling() const { return sampling_; }
  // The engine requests to submit (moved out once).
  std::vector<EngineRequest> take_requests() { return std::move(requests_); }
  // Attaches the constraint compiled off the engine thread to every request.
  void set_compiled_constraint(const std::shared_ptr<const grammar::CompiledGrammar>& compiled) {
    for (EngineRequest& r : requests_) r.compiled_constraint = compiled;
  }

  // One engine output. Appends SSE payloads (JSON text, streaming only) to `events` and engine
  // ids to abort to `aborts`.
  void on_output(const RequestOutput& out, const std::string& error, std::vector<std::string>& events,
                 std::vector<std::string>& aborts);
  bool done() const { return n_finished_ == choices_.size(); }
  // Engine ids of choices still running (to abort when the client goes away).
  std::vector<std::string> unfinished_ids() const;
  // Streaming: the payloads after the last choice (the usage chunk). Empty otherwise.
  virtual std::vector<std::string> final_events();
  // Streaming: the payloads to send with the response header, before any engine output.
  virtual std::vector<std::string> initial_events() { return {}; }
  // SSE framing of one payload, and the text that ends the stream (Chat Completions and
  // Completions: "data: PAYLOAD" and "data: [DONE]").
  virtual std::string sse(const std::string& payload) const { return "data: " + payload + "\n\n"; }
  virtual std::string sse_end() const { return "data: [DONE]\n\n"; }
  // Non-streaming: the response body (call when done() and no error()).
  virtual std::string response_body() = 0;
  // Set when the engine failed a choice (the request then fails as a whole).
  const std::optional<ApiError>& error() const { return error_; }

  int64_t n_prompt_tokens() const { return n_prompt_tokens_; }
  // Of those, the tokens the engine served from its prefix cache (per counted prompt: the
  // choice that counts it; usage.prompt_tokens_details.cached_tokens).
  int64_t n_cached_prompt_tokens() const;
  int64_t n_completion_tokens() const;
  // Seconds from construction to the first token (-1 before it).
  double ttft_seconds() const { return ttft_; }
  // Seconds between consecutive outputs with new tokens of each choice, in arrival order (the
  // inter-token latencies; one per engine step that produced tokens after the first).
  const std::vector<double>& inter_token_seconds() const { return inter_token_; }
  // The finish reason of every finished choice (as reported: "stop", "length", "tool_calls").
  std::vector<std::string> finish_reasons() const;

 protected:
  struct Choice {
    std::string engine_id;
    bool finished = false;
    std::string finish_reason;
    int64_t n_tokens = 0;
    bool counts_prompt = false;  // its prompt is counted in usage
    int64_t n_cached = 0;        // its prompt tokens served from the prefix cache
  };

  // Adds a choice generating from `prompt`; its index is the number of choices before it and
  // its seed the request's seed + that index (random without one). `count_prompt`: add the
  // prompt to usage (once per distinct prompt, not per choice).
  void add_choice(const std::vector<int32_t>& prompt, int64_t max_tokens, bool count_prompt);
  // One output of choice `i` (`text`: its new text) -> choice objects of stream chunks.
  virtual void handle_output(size_t i, const RequestOutput& out, const std::string& text,
                             std::vector<Json>& chunks) = 0;
  // Choice `i` finished with `reason` (the subclass may rename it, e.g. "tool_calls").
  virtual void handle_finish(size_t i, std::string& reason, std::vector<Json>& chunks) = 0;
  // Ends choice `i` before its engine request does (call from handle_output).
  void end_early(size_t i, std::string reason);
  // prompt_tokens (with prompt_tokens_details.cached_tokens), completion_tokens, total_tokens.
  virtual Json usage() const;
  Json envelope(Json choices) const;
  // A chunk of handle_output / handle_finish -> the stream payload (default: one choice in
  // the chunk envelope).
  virtual Json wrap_chunk(Json chunk) { return envelope(Json::array({std::move(chunk)})); }
  // The stream payload that reports a failed generation (default: the error body).
  virtual std::string stream_error_payload() { return error_->body(); }

  // Token text for logprobs (byte-level bytes, invalid UTF-8 replaced at dump time).
  std::string token_text(int32_t id) const;

  const std::string id_;
  const std::string object_;
  const ModelInfo& info_;
  const std::string model_;
  const SamplingRequest sampling_;
  const recipe::Tokenizer& tokenizer_;
  const int64_t created_;
  std::vector<Choice> choices_;

 private:
  void finish_choice(size_t i, std::string reason, std::vector<Json>& chunks);

  std::vector<EngineRequest> requests_;
  std::vector<recipe::StreamDetokenizer> detok_;  // per choice
  std::vector<int32_t> no_text_ids_;              // EOS + stop_token_ids (sorted)
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::pair<size_t, std::string>> early_;  // ended by handle_output
  bool keep_special_;
  size_t n_finished_ = 0;
  int64_t n_prompt_tokens_ = 0;
  std::optional<ApiError> error_;
  std::chrono::steady_clock::time_point start_;
  double ttft_ = -1.0;
  std::vector<std::chrono::steady_clock::time_point> last_token_at_;  // per choice
  std::vector<double> inter_token_;
};

// A random request id suffix ("chatcmpl-" + 24 hex digits, ...).
std::string random_id(const std::string& prefix);
// Dumps JSON with invalid UTF-8 replaced (model text can hold stray bytes).
std::string dump(const Json& j);

}  // namespace deepinfer::server
