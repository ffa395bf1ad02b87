#include "server/http_session.h"

#include <cstdio>
#include <string_view>

#include "base/logging.h"
#include "server/chat_generation.h"
#include "server/completion_generation.h"
#include "server/request_checks.h"
#include "server/responses_generation.h"
#include "server/spec_metrics.h"
#include "server/structured_output.h"
#include "server/utility_endpoints.h"

namespace deepinfer::server {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

constexpr size_t kHeaderLimit = 64 * 1024;
constexpr size_t kMaxPipelinedBytes = 1 << 20;

std::string chunk(const std::string& data) {
  char size[24];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + data + "\r\n";
}

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

bool is_client_gone(beast::error_code ec) {
  return ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
         ec == beast::error::timeout || ec == net::error::operation_aborted;
}

std::string_view std_view(beast::string_view s) { return {s.data(), s.size()}; }

}  // namespace

HttpSession::HttpSession(net::ip::tcp::socket&& socket, ServerState& state)
    : stream_(std::move(socket)), state_(state) {}

HttpSession::~HttpSession() { state_.n_exchanges_ended.fetch_add(1, std::memory_order_relaxed); }

void HttpSession::start() {
  net::dispatch(stream_.get_executor(), beast::bind_front_handler(&HttpSession::await_request, shared_from_this()));
}

// The next request: parsed at once from bytes already buffered (pipelined requests), else
// awaited for up to the idle timeout (the watch read; its first bytes start read_request).
void HttpSession::await_request() {
  if (closed_) return;
  if (buffer_.size() > 0) return read_request();
  stream_.expires_after(seconds(state_.options.idle_timeout_seconds));
  watch();
}

// One deadline for the whole request, header and body: a client that sends it slowly (or
// stops half-way) is disconnected when it passes.
void HttpSession::read_request() {
  if (closed_) return;
  parser_.emplace();
  parser_->body_limit(state_.options.max_body_bytes);
  parser_->header_limit(kHeaderLimit);
  read_deadline_ = std::chrono::steady_clock::now() + seconds(state_.options.read_timeout_seconds);
  stream_.expires_at(read_deadline_);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void HttpSession::on_header(beast::error_code ec) {
  if (closed_) return;
  if (ec && is_client_gone(ec)) return close();
  t0_ = std::chrono::steady_clock::now();
  exchange_active_ = true;
  state_.n_exchanges.fetch_add(1, std::memory_order_relaxed);
  gen_.reset();
  cors_.clear();
  status_ = 0;
  endpoint_ = "other";
  method_ = "-";
  target_ = "-";
  if (ec) {
    keep_alive_ = false;
    if (ec == http::error::body_limit) {
      linger_ = true;
      return respond_error(ApiError(413, "request body larger than " + std::to_string(state_.options.max_body_bytes) +
                                             " bytes",
                                    "invalid_request_error", "", "request_too_large"));
    }
    return respond_error(bad_request(std::string("bad HTTP request: ") + ec.message()));
  }
  const auto& req = parser_->get();
  method_ = std::string(req.method_string());
  target_ = std::string(req.target());
  keep_alive_ = req.keep_alive();
  if (beast::iequals(req[http::field::expect], "100-continue")) {
    write("HTTP/1.1 100 Continue\r\n\r\n");
    stream_.expires_at(read_deadline_);  // the write set both timers; the body keeps the request's
  }
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
}

void HttpSession::on_body(beast::error_code ec) {
  if (closed_) return;
  if (ec == http::error::body_limit) {
    keep_alive_ = false;
    linger_ = true;
    return respond_error(ApiError(413, "request body larger than " + std::to_string(state_.options.max_body_bytes) +
                                           " bytes",
                                  "invalid_request_error", "", "request_too_large"));
  }
  if (ec) return close();
  route();
}

void HttpSession::route() {
  const auto& req = parser_->get();
  const std::string path = target_.substr(0, target_.find('?'));
  const bool get = req.method() == http::verb::get;
  const bool post = req.method() == http::verb::post;
  try {
    const std::string_view origin = std_view(req[http::field::origin]);
    cors_ = state_.cors.response_headers(origin);
    if (req.method() == http::verb::options && state_.cors.enabled() && !origin.empty() &&
        req.count(http::field::access_control_request_method) > 0) {
      endpoint_ = "preflight";
      Headers h = state_.cors.preflight(origin, std_view(req[http::field::access_control_request_method]),
                                        std_view(req[http::field::access_control_request_headers]));
      cors_.clear();
      return respond(200, "text/plain; charset=utf-8", "OK", h);
    }
    if (path == "/health") {
      endpoint_ = path;
      if (!get) throw method_not_allowed("GET", path);
      const std::string unavailable = state_.engine.unavailable();
      if (!unavailable.empty()) throw replica_unavailable(unavailable);
      return respond(200, "application/json", "{\"status\":\"ok\"}");
    }
    if (path == "/internal/load") {  // the data-parallel front's routing input (parallel/dp/dp_front.h)
      endpoint_ = path;
      if (!get) throw method_not_allowed("GET", path);
      return respond(200, "application/json", load_body(state_.engine));
    }
    if (path == "/metrics") {
      endpoint_ = path;
      if (!get) throw method_not_allowed("GET", path);
      const SpecDecodeCounters spec = state_.options.spec_stats ? state_.options.spec_stats->get() : SpecDecodeCounters{};
      std::string text = state_.metrics.render(state_.engine.stats(), &spec);
      if (state_.options.extra_metrics) text += state_.options.extra_metrics();
      return respond(200, "text/plain; version=0.0.4; charset=utf-8", text);
    }
    if (path == "/version") {
      endpoint_ = path;
      if (!get) throw method_not_allowed("GET", path);
      return respond(200, "application/json", version_body());
    }
    if (path == "/tokenize" || path == "/detokenize") {
      endpoint_ = path;
      if (!post) throw method_not_allowed("POST", path);
      check_content_type(std_view(req[http::field::content_type]));
      const ServerState& st = state_;
      if (path == "/detokenize") {
        return respond_from_pool([&st](const Json& body) { return detokenize_body(body, st.model); });
      }
      return respond_from_pool([&st](const Json& body) {
        return tokenize_body(body, st.model, st.options.limits, st.options.default_thinking);
      });
    }
    const bool model_path = path.rfind("/v1/models/", 0) == 0;
    const bool known = path == "/v1/models" || path == "/v1/completions" || path == "/v1/chat/completions" ||
                       path == "/v1/responses";
    if (known) endpoint_ = path;
    if (model_path) endpoint_ = "/v1/models/{id}";
    if (path.rfind("/v1/", 0) == 0 && !state_.options.api_key.empty() &&
        !bearer_matches(std_view(req[http::field::authorization]), state_.options.api_key)) {
      ApiError e(401, "Incorrect API key provided", "authentication_error", "", "invalid_api_key");
      e.headers.emplace_back("WWW-Authenticate", "Bearer");
      throw e;
    }
    if (!known && !model_path) {
      throw ApiError(404, "no route for " + method_ + " " + path, "invalid_request_error", "", "not_found");
    }
    if (path == "/v1/models" || model_path) {
      if (!get) throw method_not_allowed("GET", path);
      Json model = {{"id", state_.options.model_name},   {"object", "model"},
                    {"created", state_.created},          {"owned_by", "deepinfer"},
                    {"max_model_len", state_.options.max_model_len}};
      if (!model_path) {
        return respond(200, "application/json", dump(Json{{"object", "list"}, {"data", Json::array({model})}}));
      }
      check_model(Json{{"model", path.substr(std::string("/v1/models/").size())}}, state_.options.model_name);
      return respond(200, "application/json", dump(model));
    }
    if (!post) throw method_not_allowed("POST", path);
    check_content_type(std_view(req[http::field::content_type]));
    // Parsing, prompt rendering and tokenization run on the preparation pool so that a long
    // prompt does not stall the other connections of this io thread; the watch read notices a
    // client that leaves meanwhile. A generation may run for long: no read deadline.
    stream_.expires_never();
    watch();
    auto executor = stream_.get_executor();
    const Kind kind = path == "/v1/chat/completions" ? Kind::kChat
                      : path == "/v1/responses"      ? Kind::kResponses
                                                     : Kind::kCompletion;
    net::post(*state_.prep_pool, [self = shared_from_this(), executor, body = std::move(parser_->get().body()),
                                 kind]() mutable {
      std::shared_ptr<Generation> gen;
      std::optional<ApiError> error;
      try {
        gen = self->prepare(body, kind);
      } catch (const ApiError& e) {
        error = e;
      } catch (const std::exception& e) {
        error = ApiError(500, e.what(), "server_error");
      }
      // A constraint is compiled (within its budgets) on the grammar pool: requests without
      // one never queue behind a compilation.
      if (gen && !gen->sampling().constraint_kind.empty()) {
        net::post(*self->state_.grammar_pool, [self, executor, gen] {
          std::optional<ApiError> error;
          const SamplingRequest& s = gen->sampling();
          try {
            // Compiled here for the engine's vocabulary: the engine thread only makes a matcher.
            gen->set_compiled_constraint(check_constraint(
                s.constraint_kind, s.constraint, s.constraint_param, self->state_.options.limits.grammar,
                [self](const std::string& kind, const std::string& text) {
                  return self->state_.engine.compile_constraint(kind, text);
                }));
          } catch (const ApiError& e) {
            error = e;
          } catch (const std::exception& e) {
            error = ApiError(500, e.what(), "server_error");
          }
          net::post(executor, [self, gen = error ? nullptr : gen, error] { self->start_generation(gen, error); });
        });
        return;
      }
      net::post(executor, [self, gen, error] { self->start_generation(gen, error); });
    });
  } catch (const ApiError& e) {
    gen_.reset();
    respond_error(e);
  } catch (const std::exception& e) {
    gen_.reset();
    LOG(ERROR) << method_ << " " << target_ << ": " << e.what();
    respond_error(ApiError(500, e.what(), "server_error"));
  }
}

void HttpSession::respond_from_pool(std::function<std::string(const Json&)> job) {
  stream_.expires_never();
  watch();
  auto executor = stream_.get_executor();
  net::post(*state_.prep_pool, [self = shared_from_this(), executor, job = std::move(job),
                               text = std::move(parser_->get().body())] {
    std::string body;
    std::optional<ApiError> error;
    try {
      const Json request = parse_body(text, self->state_.options.limits);
      check_model(request, self->state_.options.model_name);
      body = job(request);
    } catch (const ApiError& e) {
      error = e;
    } catch (const std::exception& e) {
      error = ApiError(500, e.what(), "server_error");
    }
    net::post(executor, [self, body = std::move(body), error]() mutable {
      if (self->closed_) return;
      if (error) return self->respond_error(*error);
      self->respond(200, "application/json", std::move(body));
    });
  });
}

std::shared_ptr<Generation> HttpSession::prepare(const std::string& text, Kind kind) const {
  const ServerOptions& o = state_.options;
  const Json body = parse_body(text, o.limits);
  check_model(body, o.model_name);
  const int64_t vocab_size = state_.tokenizer.vocab_size();
  if (kind == Kind::kResponses) {
    const ResponsesRequest request = parse_responses_request(body, o.limits, o.chat_version, o.default_thinking);
    check_token_ids(request.chat.sampling, vocab_size);
    return std::make_shared<ResponsesGeneration>(request, state_.model);
  }
  if (kind == Kind::kChat) {
    const ChatRequest request = parse_chat_request(body, o.limits, o.chat_version, o.default_thinking);
    check_token_ids(request.sampling, vocab_size);
    return std::make_shared<ChatGeneration>(request, state_.model);
  }
  const CompletionRequest request = parse_completion_request(body, state_.tokenizer, o.limits);
  check_token_ids(request.sampling, vocab_size);
  return std::make_shared<CompletionGeneration>(request, state_.model);
}

void HttpSession::start_generation(std::shared_ptr<Generation> gen, const std::optional<ApiError>& error) {
  if (closed_) return;  // the client left while the request was prepared
  if (error) {
    if (error->status == 500) {
      LOG(ERROR) << method_ << " " << target_ << ": " << error->what();
    }
    return respond_error(*error);
  }
  gen_ = std::move(gen);
  std::weak_ptr<HttpSession> weak = weak_from_this();
  auto executor = stream_.get_executor();
  std::vector<EngineRequest> requests = gen_->take_requests();
  if (static_cast<int64_t>(requests.size()) > state_.engine.max_live_requests()) {
    gen_.reset();  // would never be admitted: not a matter of retrying later
    return respond_error(bad_request("this request needs " + std::to_string(requests.size()) +
                                         " sequences (prompts times n), more than the server's limit of " +
                                         std::to_string(state_.engine.max_live_requests()),
                                     "n"));
  }
  LiveRequests& live = state_.live;
  std::vector<std::string> ids;
  for (const EngineRequest& r : requests) ids.push_back(r.id);
  for (const std::string& id : ids) live.add(id);
  const AsyncEngine::Admission admission = state_.engine.submit(
      std::move(requests), [weak, executor, &live](const RequestOutput& out, const std::string& error) {
        if (out.finished) live.remove(out.id);
        net::post(executor, [weak, out, error] {
          if (auto self = weak.lock()) self->on_engine_output(out, error);
        });
      });
  if (admission != AsyncEngine::Admission::kAccepted) {
    for (const std::string& id : ids) live.remove(id);
  }
  if (admission == AsyncEngine::Admission::kFull) {
    gen_.reset();
    return respond_error(ApiError(429, "the server is at capacity (" + std::to_string(state_.engine.max_live_requests()) +
                                           " requests); retry later",
                                  "rate_limit_error", "", "rate_limit_exceeded"),
                         {{"Retry-After", "1"}});
  }
  if (admission == AsyncEngine::Admission::kShuttingDown) {
    gen_.reset();
    return respond_error(ApiError(503, "the server is shutting down", "server_error", "", "service_unavailable"));
  }
  if (admission == AsyncEngine::Admission::kUnavailable) {
    gen_.reset();
    return respond_error(replica_unavailable(state_.engine.unavailable()));
  }
  if (gen_->stream()) {
    status_ = 200;
    std::string head = "HTTP/1.1 200 OK\r\nServer: deepinfer\r\nContent-Type: text/event-stream\r\n"
                       "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n";
    for (const auto& [name, value] : cors_) head += name + ": " + value + "\r\n";
    write(head + (keep_alive_ ? "Connection: keep-alive\r\n" : "Connection: close\r\n") + "\r\n");
    std::string data;
    for (const std::string& e : gen_->initial_events()) data += gen_->sse(e);
    if (!data.empty()) write(chunk(data));
  }
}

void HttpSession::on_engine_output(const RequestOutput& out, const std::string& error) {
  if (closed_ || !gen_) return;
  std::vector<std::string> events, aborts;
  gen_->on_output(out, error, events, aborts);
  for (const std::string& id : aborts) state_.engine.abort(id);
  if (gen_->stream()) {
    std::string data;
    for (const std::string& e : events) data += gen_->sse(e);
    if (gen_->done()) {
      for (const std::string& e : gen_->final_events()) data += gen_->sse(e);
      data += gen_->sse_end();
    }
    if (!data.empty()) write(chunk(data));
    if (gen_->done()) {
      write("0\r\n\r\n");
      response_complete_ = true;
      log_exchange();
      if (!writing_) end_exchange();
    }
  } else if (gen_->done()) {
    if (gen_->error()) {
      // The engine failed for good (its expert-parallel group broke): 503, not 500.
      const std::string unavailable = state_.engine.unavailable();
      respond_error(unavailable.empty() ? *gen_->error() : replica_unavailable(unavailable));
    } else {
      respond(200, "application/json", gen_->response_body());
    }
  }
}

void HttpSession::respond(int status, const std::string& content_type, std::string body, const Headers& extra) {
  status_ = status;
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " +
                     std::string(http::obsolete_reason(http::int_to_status(status))) + "\r\n";
  head += "Server: deepinfer\r\nContent-Type: " + content_type + "\r\n";
  head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  for (const auto& [name, value] : extra) head += name + ": " + value + "\r\n";
  for (const auto& [name, value] : cors_) head += name + ": " + value + "\r\n";
  head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  write(head + body);
  response_complete_ = true;
  log_exchange();
  if (!writing_) end_exchange();
}

void HttpSession::respond_error(const ApiError& e, const Headers& extra) {
  Headers headers = e.headers;
  headers.insert(headers.end(), extra.begin(), extra.end());
  respond(e.status, "application/json", e.body(), headers);
}

void HttpSession::write(std::string data) {
  if (closed_) return;
  writes_.push_back(std::move(data));
  if (!writing_) do_write();
}

void HttpSession::do_write() {
  writing_ = true;
  // A client that takes none of a response for this long is gone (a pending watch read keeps
  // its own timer: with a read in flight this sets only the write timer).
  stream_.expires_after(seconds(state_.options.write_timeout_seconds));
  net::async_write(stream_, net::buffer(writes_.front()),
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_write(ec); });
}

void HttpSession::on_write(beast::error_code ec) {
  writing_ = false;
  if (closed_) return;
  if (ec) {
    if (gen_) {
      LOG(INFO) << "client went away during " << method_ << " " << target_ << ": " << ec.message();
    }
    return close();
  }
  writes_.pop_front();
  if (!writes_.empty()) return do_write();
  if (response_complete_ && exchange_active_) end_exchange();
}

void HttpSession::end_exchange() {
  exchange_active_ = false;
  response_complete_ = false;
  gen_.reset();
  state_.n_exchanges_ended.fetch_add(1, std::memory_order_relaxed);
  if (!keep_alive_) return linger_ ? linger_close() : close();
  if (!watching_) return await_request();
  // The watch read of the generation is still pending, without a deadline. Cancel it: on_watch
  // then starts the next request, from the bytes already buffered (pipelined requests, which
  // would otherwise wait for more bytes that never come) or with the idle timeout.
  resume_after_watch_ = true;
  stream_.cancel();
}

// Reads whatever the client sends while no request is being read: during a generation (to
// notice a client that leaves; bytes that arrive are kept for the next exchange) and while the
// connection is idle (the idle timeout applies).
void HttpSession::watch() {
  if (watching_ || closed_) return;
  watching_ = true;
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
    self->on_watch(ec, n);
  });
}

void HttpSession::on_watch(beast::error_code ec, size_t n) {
  watching_ = false;
  if (closed_) return;
  const bool resume = std::exchange(resume_after_watch_, false);
  if (ec == net::error::operation_aborted && resume) return await_request();
  if (ec) {
    if (exchange_active_ && gen_) {
      LOG(INFO) << "client disconnected from " << gen_->id() << ": aborting " << gen_->unfinished_ids().size()
                << " engine request(s)";
    }
    return close();
  }
  buffer_.commit(n);
  if (exchange_active_) {
    if (buffer_.size() < kMaxPipelinedBytes) watch();
    return;
  }
  read_request();
}

// After refusing a body (413): stop sending, read and drop what the client still sends for a
// moment so that it sees the response instead of a reset connection.
void HttpSession::linger_close() {
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_send, ec);
  stream_.expires_after(std::chrono::seconds(5));
  auto scratch = std::make_shared<std::array<char, 65536>>();
  auto self = shared_from_this();
  auto drain = std::make_shared<std::function<void(beast::error_code, size_t)>>();
  *drain = [self, scratch, drain](beast::error_code ec, size_t) {
    if (ec || self->closed_) {
      *drain = nullptr;  // break the cycle
      return self->close();
    }
    self->stream_.async_read_some(net::buffer(*scratch), *drain);
  };
  stream_.async_read_some(net::buffer(*scratch), *drain);
}

void HttpSession::close() {
  if (closed_) return;
  closed_ = true;
  if (gen_) {
    for (const std::string& id : gen_->unfinished_ids()) state_.engine.abort(id);
    if (exchange_active_ && !response_complete_) {
      status_ = 499;  // client closed request (nginx's convention)
      log_exchange();
    }
    gen_.reset();
  }
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  stream_.close();
}

void HttpSession::log_exchange() {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const int64_t n_prompt = gen_ ? gen_->n_prompt_tokens() : 0;
  const int64_t n_completion = gen_ ? gen_->n_completion_tokens() : 0;
  const double ttft = gen_ ? gen_->ttft_seconds() : -1.0;
  RequestRecord record{endpoint_, status_, n_prompt, n_completion, secs, ttft, {}, {}};
  if (gen_) {
    record.inter_token_seconds = gen_->inter_token_seconds();
    if (status_ == 200) record.finish_reasons = gen_->finish_reasons();
    if (status_ == 499) {
      record.finish_reasons.assign(gen_->finish_reasons().size() + gen_->unfinished_ids().size(), "abort");
    }
  }
  state_.metrics.observe(record);
  char line[160];
  std::snprintf(line, sizeof(line), " %d prompt=%lld completion=%lld ttft_ms=%.1f e2e_ms=%.1f", status_,
                static_cast<long long>(n_prompt), static_cast<long long>(n_completion),
                ttft >= 0 ? ttft * 1e3 : -1.0, secs * 1e3);
  LOG(INFO) << method_ << " " << target_ << (gen_ ? " " + gen_->id() : std::string()) << line;
}

}  // namespace deepinfer::server
