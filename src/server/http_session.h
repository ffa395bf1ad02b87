// HttpSession: one client connection (HTTP/1.1, keep-alive), on its own strand.
//
// Exchange: read the header (Content-Length over the limit -> 413 before the body; "Expect:
// 100-continue" answered), read the body, route, respond. Generation requests are parsed and
// tokenized on the server's preparation pool, then submitted to the AsyncEngine; its outputs
// are posted back to the strand and written as they come (SSE over chunked transfer encoding)
// or as one JSON body at the end. While a request generates, a read on the socket watches for
// the client going away (EOF or error aborts the request's engine requests); bytes that arrive
// meanwhile (pipelined requests) are kept, and once the response is written the next request
// is parsed from them: pipelined requests are answered one after another, in order.
// Writes are queued, one in flight at a time.
//
// Timeouts (ServerOptions): a connection with no request begun is closed after
// idle_timeout_seconds; a request must arrive whole (header and body) within
// read_timeout_seconds of its first byte being awaited, else the connection is closed
// (slowloris); a write that the client does not take within write_timeout_seconds closes it.
// A generation itself has no deadline.
//
// Thread-safety: every member runs on the session's strand.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "server/generation.h"
#include "server/server_state.h"

namespace deepinfer::server {

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(boost::asio::ip::tcp::socket&& socket, ServerState& state);
  ~HttpSession();  // counts as the end of its exchange for the idle heap trim (its buffers are gone)
  void start();

 private:
  using Headers = std::vector<std::pair<std::string, std::string>>;
  enum class Kind { kCompletion, kChat, kResponses };

  void await_request();
  void read_request();
  void on_header(boost::beast::error_code ec);
  void on_body(boost::beast::error_code ec);
  void route();
  // Runs on the preparation pool: body -> Generation (throws ApiError). Reads only `state_`.
  std::shared_ptr<Generation> prepare(const std::string& body, Kind kind) const;
  // Runs `job` (JSON body -> response body; throws ApiError) on the preparation pool and
  // answers 200 with its result or the error.
  void respond_from_pool(std::function<std::string(const Json&)> job);
  void start_generation(std::shared_ptr<Generation> gen, const std::optional<ApiError>& error);
  void on_engine_output(const RequestOutput& out, const std::string& error);

  void respond(int status, const std::string& content_type, std::string body, const Headers& extra = {});
  void respond_error(const ApiError& e, const Headers& extra = {});
  void write(std::string data);
  void do_write();
  void on_write(boost::beast::error_code ec);
  void end_exchange();
  void watch();
  void on_watch(boost::beast::error_code ec, size_t n);
  void linger_close();
  void close();
  void log_exchange();

  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  ServerState& state_;

  std::deque<std::string> writes_;
  bool writing_ = false;
  bool closed_ = false;
  bool exchange_active_ = false;   // a request was read and its response is not fully written
  bool response_complete_ = false; // the whole response is queued
  bool watching_ = false;          // a watch read is in flight
  bool keep_alive_ = true;
  bool linger_ = false;            // drain unread input before closing (after 413)
  bool resume_after_watch_ = false;  // the watch was cancelled to start the next request
  std::chrono::steady_clock::time_point read_deadline_;  // of the request being read

  std::shared_ptr<Generation> gen_;
  Headers cors_;  // CORS headers of the current exchange's response (cors.h)
  std::string method_, target_, endpoint_;
  int status_ = 0;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace deepinfer::server
