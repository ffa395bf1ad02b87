// Server: the OpenAI-compatible HTTP server (`deepinfer serve`, GitHub issue 6).
//
// Endpoints: GET /health, GET /v1/models, GET /metrics (metrics.h; also under vLLM's names),
// POST /v1/completions, POST /v1/chat/completions (stream and non-stream; SSE `data: {...}\n\n`
// ... `data: [DONE]\n\n`), POST /v1/responses (responses_generation.h), and vLLM's
// POST /tokenize, POST /detokenize, GET /version (utility_endpoints.h). Only /v1/* needs the
// API key (as in vLLM). CORS when allowed_origins is set (cors.h).
// Asynchronous (Boost.Asio/Beast): `n_io_threads` threads serve every connection, one strand
// per connection; the engine runs on the AsyncEngine's own thread.
// Errors use the OpenAI format: 400 malformed/invalid (also a request needing more sequences
// than the engine admits at all), 401 wrong API key (WWW-Authenticate: Bearer; the scheme is
// case-insensitive), 404 unknown model or path, 405 method (with Allow), 413 body over
// max_body_bytes, 415 a body whose Content-Type is not JSON, 429 (Retry-After) when the
// engine's admission is full, 503 while shutting down, 500 engine failure. A client that
// disconnects has its requests aborted. Pipelined requests are answered in order; idle,
// slow-to-send and not-reading clients are disconnected (ServerOptions' timeouts,
// http_session.h). One log line per request.
// Memory: every request's allocations are freed when it ends (the engine's per-request states
// included, even when no request follows); the heap is trimmed once the server is quiet (no
// request began or ended for half a second, nothing live in the engine; AsyncEngine also trims
// after engine work), and `deepinfer serve` runs with one malloc arena so that the trim returns
// everything free: after a burst the resident size is back within a few MB of idle, and
// malloc's bytes in use (GET /metrics: deepinfer_heap_in_use_bytes) within 1 MB
// (tests/python/test_server.py, test_500_concurrent_streams).
//
// Thread-safety: construct and run() on one thread; stop() from any thread or a signal.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "recipe/chat_encoding.h"
#include "recipe/tokenizer.h"
#include "server/openai_request.h"

namespace deepinfer::server {

class SpecStatsBoard;

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;              // 0: any free port (see Server::port())
  std::string api_key;               // non-empty: /v1/* needs "Authorization: Bearer KEY"
  std::string model_name = "deepinfer";
  int64_t max_model_len = 0;         // prompt + output limit (required, > 0)
  size_t max_body_bytes = 8u << 20;
  RequestLimits limits;
  recipe::ChatVersion chat_version = recipe::ChatVersion::kV4;
  bool default_thinking = false;     // chat requests that do not say (vLLM/SGLang: off)
  int n_io_threads = 1;
  int n_prep_threads = 2;            // parse + tokenize requests off the io threads
  // Compile structured-output constraints (within limits.grammar): a queue of their own, so a
  // request without a constraint never waits behind a compilation.
  int n_grammar_threads = 2;
  double drain_seconds = 30.0;       // graceful shutdown: let running requests finish this long
  double idle_timeout_seconds = 60.0;   // keep-alive: no request begun for this long closes
  double read_timeout_seconds = 30.0;   // a request's header and body must arrive within this
  double write_timeout_seconds = 60.0;  // a response write the client does not take closes
  bool handle_signals = true;        // SIGINT/SIGTERM -> graceful shutdown
  std::vector<std::string> allowed_origins;  // CORS (cors.h): empty = off, "*" = any origin
  // Speculative decoding's counters for /metrics (spec_metrics.h: make_spec_stats_tap posts
  // them); null: none shown.
  std::shared_ptr<const SpecStatsBoard> spec_stats;
  // More Prometheus text for /metrics, appended as it is (the parallel serve's expert- and
  // context-parallel lines: parallel/parallel_metrics.h, parallel/dp/cp_serve.h). Called from
  // the I/O threads, any number at once: it must be thread-safe. Null: nothing appended.
  std::function<std::string()> extra_metrics;
};

// What every connection shares.
struct ServerState;

// A socket bound to host:port and listening. `host` is an IP address or a name (resolved;
// "localhost" binds the first of its addresses that can be bound); port 0 picks a free port.
// Throws Error naming the address when it cannot bind (e.g. the port is in use). Made before
// the model loads, it reports a bad address at once instead of after the load.
class ListeningSocket {
 public:
  ListeningSocket(const std::string& host, uint16_t port);
  ~ListeningSocket();
  ListeningSocket(ListeningSocket&& other) noexcept;
  ListeningSocket& operator=(ListeningSocket&&) = delete;
  uint16_t port() const { return port_; }

 private:
  friend class Server;
  int fd_ = -1;
  bool v6_ = false;
  uint16_t port_ = 0;
};

class Server {
 public:
  // Serves on `socket` (the options' host and port are then only logged). `eos_ids`: the
  // model's end-of-sequence ids (never part of response text).
  Server(ServerOptions options, ListeningSocket socket, const recipe::Tokenizer& tokenizer,
         std::vector<int32_t> eos_ids, AsyncEngine& engine);
  // Binds options.host:options.port itself (ListeningSocket).
  Server(ServerOptions options, const recipe::Tokenizer& tokenizer, std::vector<int32_t> eos_ids,
         AsyncEngine& engine);
  ~Server();

  uint16_t port() const;
  // Serves until stop() or a signal; then stops accepting, drains the engine
  // (drain_seconds, then aborts) and returns once the final responses are written. A second
  // signal (or stop()) during the drain aborts what still runs at once. Streams cut short
  // by the shutdown end with finish_reason "length" (their output was truncated).
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::server
