#include "cli/bench_http.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>  // before asio: its awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deepinfer {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// One keep-alive connection, reopened when the server closed it.
class Connection {
 public:
  explicit Connection(const HttpTarget& target) : target_(target), stream_(io_) {}

  // Sends a request; returns the parser with the header read (the body follows).
  http::response_parser<http::buffer_body>& send(http::verb verb, const std::string& path, const std::string& body) {
    if (!open_) {
      asio::ip::tcp::resolver resolver(io_);
      stream_.connect(resolver.resolve(target_.host, target_.port));
      open_ = true;
    }
    http::request<http::string_body> req{verb, target_.path_prefix + path, 11};
    req.set(http::field::host, target_.host + ":" + target_.port);
    req.set(http::field::user_agent, "deepinfer-bench");
    if (verb == http::verb::post) req.set(http::field::content_type, "application/json");
    if (!target_.api_key.empty()) req.set(http::field::authorization, "Bearer " + target_.api_key);
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();
    http::write(stream_, req);
    parser_.emplace();
    // Not boost::none: Boost 1.74 compares a Content-Length with an empty limit as exceeding it.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    http::read_header(stream_, buffer_, *parser_);
    return *parser_;
  }

  // Reads the next piece of the body into `out` (appends); false once the body is complete.
  bool read_some(std::string& out) {
    if (parser_->is_done()) return false;
    char tmp[16384];
    parser_->get().body().data = tmp;
    parser_->get().body().size = sizeof(tmp);
    beast::error_code ec;
    http::read_some(stream_, buffer_, *parser_, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) throw beast::system_error(ec);
    out.append(tmp, sizeof(tmp) - parser_->get().body().size);
    return true;
  }

  void finish() {
    if (!parser_->get().keep_alive()) close();
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
    stream_.close();
    buffer_.clear();
    open_ = false;
  }

 private:
  const HttpTarget& target_;
  asio::io_context io_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  bool open_ = false;
};

std::string excerpt(const std::string& s) { return s.size() <= 300 ? s : s.substr(0, 300) + "..."; }

// Handles one SSE event's data; returns false at [DONE]. Appends the text to `reply`; reads the
// usage chunk's completion, prompt and cached prompt token counts.
bool on_event(const std::string& data, double at, RequestRecord& r, double& last, bool& started,
              int64_t& arrivals, std::optional<int64_t>& usage_tokens, HttpReply& reply) {
  if (data == "[DONE]") return false;
  const Json j = Json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw std::runtime_error("not JSON in the stream: " + excerpt(data));
  if (j.contains("error")) throw std::runtime_error("error event: " + excerpt(j["error"].dump()));
  if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("completion_tokens")) {
    const Json& u = j["usage"];
    usage_tokens = u["completion_tokens"].get<int64_t>();
    if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer()) {
      reply.prompt_tokens = u["prompt_tokens"].get<int64_t>();
    }
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object() &&
        u["prompt_tokens_details"].contains("cached_tokens") &&
        u["prompt_tokens_details"]["cached_tokens"].is_number_integer()) {
      reply.cached_tokens = u["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    }
  }
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return true;
  const Json& c = j["choices"][0];
  std::string text;
  if (c.contains("text") && c["text"].is_string()) text = c["text"].get<std::string>();
  if (text.empty()) return true;
  reply.text += text;
  if (!started) {
    started = true;
    r.ttft_s = at - r.send_s;
  } else {
    r.itl_s.push_back(at - last);
  }
  last = at;
  ++arrivals;
  return true;
}

std::string request_body(const HttpTarget& target, const Json& prompt, int64_t max_tokens) {
  Json body = {{"model", target.model},
               {"prompt", prompt},
               {"max_tokens", max_tokens},
               {"temperature", 0},
               {"ignore_eos", true},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  return body.dump();
}

// Runs one streaming request; fills r (ok or error) and `reply`. `now` gives seconds since the
// start. r.n_prompt_tokens is the prompt's length when it is token ids, else the usage's count.
template <typename Now>
void run_request(Connection& conn, const HttpTarget& target, const Json& prompt, int64_t max_tokens,
                 RequestRecord& r, Now now, HttpReply& reply) {
  r.n_prompt_tokens = prompt.is_array() ? static_cast<int64_t>(prompt.size()) : 0;
  const std::string body = request_body(target, prompt, max_tokens);
  try {
    r.send_s = now();
    auto& parser = conn.send(http::verb::post, target.endpoint, body);
    std::string pending;
    if (parser.get().result() != http::status::ok) {
      while (conn.read_some(pending)) {
      }
      conn.finish();
      r.error = "HTTP " + std::to_string(parser.get().result_int()) + ": " + excerpt(pending);
      return;
    }
    double last = 0;
    bool started = false, done = false;
    int64_t arrivals = 0;
    std::optional<int64_t> usage_tokens;
    while (!done && conn.read_some(pending)) {
      const double at = now();
      size_t end;
      while (!done && (end = pending.find("\n\n")) != std::string::npos) {
        std::string event = pending.substr(0, end);
        pending.erase(0, end + 2);
        std::erase(event, '\r');
        size_t pos = 0;
        while (!done && pos < event.size()) {
          size_t eol = event.find('\n', pos);
          if (eol == std::string::npos) eol = event.size();
          const std::string line = event.substr(pos, eol - pos);
          pos = eol + 1;
          if (line.rfind("data:", 0) != 0) continue;
          const size_t start = line.size() > 5 && line[5] == ' ' ? 6 : 5;
          done = !on_event(line.substr(start), at, r, last, started, arrivals, usage_tokens, reply);
        }
      }
    }
    while (conn.read_some(pending)) {
    }
    conn.finish();
    r.e2el_s = (started ? last : now()) - r.send_s;
    r.n_output_tokens = usage_tokens.value_or(arrivals);
    if (!prompt.is_array() && reply.prompt_tokens) r.n_prompt_tokens = *reply.prompt_tokens;
    r.ok = started;
    if (!started) r.error = "the stream ended without any text";
  } catch (const std::exception& e) {
    conn.close();
    r.ok = false;
    r.error = e.what();
  }
}

}  // namespace

HttpTarget parse_base_url(const std::string& url) {
  const std::string scheme = "http://";
  CHECK(url.rfind("https://", 0) != 0) << "--base-url " << url << ": https is not supported (plain http only)";
  CHECK(url.rfind(scheme, 0) == 0) << "--base-url " << url << ": expected http://HOST[:PORT][/PREFIX]";
  HttpTarget t;
  std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    t.path_prefix = rest.substr(slash);
    rest = rest.substr(0, slash);
    while (!t.path_prefix.empty() && t.path_prefix.back() == '/') t.path_prefix.pop_back();
  }
  const size_t colon = rest.rfind(':');
  t.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  t.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  CHECK(!t.host.empty()) << "--base-url " << url << ": no host";
  CHECK(!t.port.empty() && std::all_of(t.port.begin(), t.port.end(), [](char c) { return c >= '0' && c <= '9'; }))
      << "--base-url " << url << ": the port '" << t.port << "' is not a number";
  return t;
}

std::string first_served_model(const HttpTarget& target) {
  const std::string where = "http://" + target.host + ":" + target.port + target.path_prefix + "/v1/models";
  std::string body;
  int status = 0;
  try {
    Connection conn(target);
    auto& parser = conn.send(http::verb::get, "/v1/models", "");
    status = parser.get().result_int();
    while (conn.read_some(body)) {
    }
  } catch (const std::exception& e) {
    THROW(kInvalidInput) << "cannot reach " << where << ": " << e.what();
  }
  CHECK(status == 200) << where << " answered HTTP " << status << ": " << excerpt(body);
  const Json j = Json::parse(body, nullptr, false);
  CHECK(!j.is_discarded() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
        j["data"][0].contains("id") && j["data"][0]["id"].is_string())
      << where << " lists no model (give --model NAME): " << excerpt(body);
  return j["data"][0]["id"].get<std::string>();
}

HttpRun run_http_traffic(const HttpTarget& target, const Traffic& traffic, bool warmup) {
  const size_t n = traffic.prompts.size();
  ICHECK(n > 0 && traffic.arrival_s.size() == n);
  const auto t0 = Clock::now();
  auto now = [t0] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  if (warmup) {
    Connection conn(target);
    RequestRecord r;
    HttpReply reply;
    run_request(conn, target, Json(traffic.prompts.front()), traffic.output_len, r, now, reply);
    CHECK(r.ok) << "the warm-up request to " << target.host << ":" << target.port << target.path_prefix
                << target.endpoint << " failed: " << r.error;
  }
  HttpRun run;
  run.records.resize(n);
  const int64_t workers = traffic.max_concurrency > 0
                              ? std::min<int64_t>(traffic.max_concurrency, static_cast<int64_t>(n))
                              : std::min<int64_t>(kMaxHttpWorkers, static_cast<int64_t>(n));
  std::mutex mu;
  size_t next = 0;
  const auto start = Clock::now();
  auto since_start = [start] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      Connection conn(target);
      while (true) {
        size_t i;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (next == n) return;
          i = next++;
        }
        const double wait = traffic.arrival_s[i] - since_start();
        if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
        HttpReply reply;
        run_request(conn, target, Json(traffic.prompts[i]), traffic.output_len, run.records[i], since_start, reply);
      }
    });
  }
  for (auto& t : threads) t.join();
  run.duration_s = since_start();
  return run;
}

HttpReply http_text_completion(const HttpTarget& target, const std::string& prompt, int64_t max_tokens,
                               RequestRecord& record) {
  const auto t0 = Clock::now();
  auto now = [t0] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  Connection conn(target);
  HttpReply reply;
  run_request(conn, target, Json(prompt), max_tokens, record, now, reply);
  return reply;
}

std::string http_get(const HttpTarget& target, const std::string& path) {
  const std::string where = "http://" + target.host + ":" + target.port + target.path_prefix + path;
  std::string body;
  int status = 0;
  try {
    Connection conn(target);
    auto& parser = conn.send(http::verb::get, path, "");
    status = parser.get().result_int();
    while (conn.read_some(body)) {
    }
  } catch (const std::exception& e) {
    THROW(kInvalidInput) << "cannot reach " << where << ": " << e.what();
  }
  CHECK(status == 200) << where << " answered HTTP " << status << ": " << excerpt(body);
  return body;
}

}  // namespace deepinfer
