// One HTTP connection's life with short, test-configured timeouts (scripted engine, no model):
// pipelined requests behind a running stream are answered in order; idle connections,
// half-sent and trickled requests are closed after their timeouts while a long generation is
// not; protocol details of refusals (Allow, WWW-Authenticate, bearer case, 415, n over the live
// limit). Requests are written raw; responses read with Beast's parser.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "script_engine.h"
#include "server/openai_request.h"
#include "server/server.h"

namespace deepinfer::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Clock = std::chrono::steady_clock;

constexpr double kIdle = 0.4;
constexpr double kRead = 0.6;

class HttpConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = std::make_unique<AsyncEngine>(std::make_unique<ScriptEngine>(&hold_),
                                            AsyncEngineOptions{.max_live_requests = 4});
    ServerOptions o;
    o.port = 0;
    o.api_key = "k";
    o.model_name = "m";
    o.max_model_len = 1000;
    o.handle_signals = false;
    o.idle_timeout_seconds = kIdle;
    o.read_timeout_seconds = kRead;
    server_ = std::make_unique<Server>(o, tokenizer(), std::vector<int32_t>{1}, *engine_);
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    hold_ = false;
    server_->stop();
    thread_.join();
  }

  // A connected client. Its reads are asynchronous (run here to completion) so that the
  // stream's expiry fails them after `limit` seconds instead of hanging the test.
  std::unique_ptr<beast::tcp_stream> connect(double limit = 10.0) {
    auto s = std::make_unique<beast::tcp_stream>(ioc_);
    s->connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), server_->port()));
    s->expires_after(std::chrono::milliseconds(static_cast<int64_t>(limit * 1000)));
    return s;
  }
  template <class Start>
  beast::error_code await(Start start) {
    beast::error_code result;
    start([&](beast::error_code ec, size_t) { result = ec; });
    ioc_.restart();
    ioc_.run();
    return result;
  }
  beast::error_code read(beast::tcp_stream& s, beast::flat_buffer& buffer, http::response<http::string_body>& res) {
    return await([&](auto handler) { http::async_read(s, buffer, res, handler); });
  }
  http::response<http::string_body> roundtrip(beast::tcp_stream& s, const std::string& request) {
    net::write(s, net::buffer(request));
    beast::flat_buffer buffer;
    http::response<http::string_body> res;
    const beast::error_code ec = read(s, buffer, res);
    EXPECT_FALSE(ec) << ec.message();
    return res;
  }
  static std::string post(const std::string& target, const std::string& body, const std::string& extra = "") {
    return "POST " + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\n" +
           extra + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  // Seconds until the server closes `s` (reads give EOF); -1 when data comes instead.
  double seconds_until_closed(beast::tcp_stream& s, Clock::time_point t0) {
    char byte;
    const beast::error_code ec =
        await([&](auto handler) { s.async_read_some(net::buffer(&byte, 1), handler); });
    if (!ec) return -1.0;
    EXPECT_TRUE(ec == net::error::eof || ec == net::error::connection_reset) << ec.message();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  std::atomic<bool> hold_{false};
  net::io_context ioc_;
  std::unique_ptr<AsyncEngine> engine_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

TEST_F(HttpConnectionTest, PipelinedRequestsBehindAStreamAreAnsweredInOrder) {
  auto s = connect();
  hold_ = true;  // the stream is still running when the pipelined requests arrive
  std::string data = post("/v1/completions", R"({"prompt": "a", "max_tokens": 30, "stream": true})");
  constexpr int kPipelined = 16;
  for (int k = 1; k <= kPipelined; ++k) {
    // Distinct answers, so that the order shows: completions of k tokens, /health, /v1/models.
    if (k % 4 == 1) {
      data += "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    } else if (k % 4 == 2) {
      data += "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n";
    } else {
      data += post("/v1/completions", R"({"prompt": "a", "max_tokens": )" + std::to_string(k) + "}",
                   k == kPipelined ? "Connection: close\r\n" : "");
    }
  }
  net::write(*s, net::buffer(data));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  hold_ = false;

  beast::flat_buffer buffer;
  http::response<http::string_body> stream_res;
  ASSERT_FALSE(read(*s, buffer, stream_res));
  ASSERT_EQ(stream_res.result_int(), 200);
  EXPECT_EQ(stream_res[http::field::content_type], "text/event-stream");
  EXPECT_TRUE(stream_res.body().ends_with("data: [DONE]\n\n"));
  for (int k = 1; k <= kPipelined; ++k) {
    http::response<http::string_body> res;
    const beast::error_code ec = read(*s, buffer, res);
    ASSERT_FALSE(ec) << "response " << k << " of " << kPipelined << ": " << ec.message();
    ASSERT_EQ(res.result_int(), 200) << k << ": " << res.body();
    const Json body = Json::parse(res.body());
    if (k % 4 == 1) {
      EXPECT_EQ(body["status"], "ok") << k;
    } else if (k % 4 == 2) {
      EXPECT_EQ(body["object"], "list") << k;
    } else {
      EXPECT_EQ(body["usage"]["completion_tokens"], k) << k;
    }
  }
  EXPECT_GE(seconds_until_closed(*s, Clock::now()), 0.0);  // Connection: close on the last
}

TEST_F(HttpConnectionTest, IdleConnectionIsClosedAfterTheIdleTimeout) {
  auto s = connect();
  const double t = seconds_until_closed(*s, Clock::now());
  EXPECT_GE(t, kIdle * 0.8);
  EXPECT_LT(t, kIdle + 3.0);
}

TEST_F(HttpConnectionTest, KeepAliveAfterAStreamIsClosedAfterTheIdleTimeout) {
  auto s = connect();
  net::write(*s, net::buffer(post("/v1/completions", R"({"prompt": "a", "max_tokens": 3, "stream": true})")));
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  ASSERT_FALSE(read(*s, buffer, res));
  ASSERT_EQ(res.result_int(), 200);
  EXPECT_TRUE(res.keep_alive());
  const double t = seconds_until_closed(*s, Clock::now());
  EXPECT_GE(t, kIdle * 0.8);
  EXPECT_LT(t, kIdle + 3.0);
}

TEST_F(HttpConnectionTest, HalfSentRequestIsClosedAfterTheReadTimeout) {
  auto s = connect();
  net::write(*s, net::buffer(std::string("POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"pro")));
  const double t = seconds_until_closed(*s, Clock::now());
  EXPECT_GE(t, kRead * 0.8);
  EXPECT_LT(t, kRead + 3.0);
}

// A slowloris keeps sending header lines: activity does not extend the request's deadline.
TEST_F(HttpConnectionTest, TrickledHeaderIsClosedAfterTheReadTimeout) {
  auto s = connect();
  const auto t0 = Clock::now();
  net::write(*s, net::buffer(std::string("GET /health HTTP/1.1\r\n")));
  beast::error_code ec;
  for (int i = 0; i < 100 && !ec; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    net::write(*s, net::buffer("X-" + std::to_string(i) + ": y\r\n"), ec);
  }
  const double t = seconds_until_closed(*s, t0);
  EXPECT_GE(t, kRead * 0.8);
  EXPECT_LT(t, kRead + 3.0);
}

TEST_F(HttpConnectionTest, GenerationLongerThanTheTimeoutsIsNotCut) {
  auto s = connect();
  hold_ = true;
  net::write(*s, net::buffer(post("/v1/completions", R"({"prompt": "a", "max_tokens": 2})")));
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>((kIdle + kRead) * 2000)));
  hold_ = false;
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  ASSERT_FALSE(read(*s, buffer, res));
  EXPECT_EQ(res.result_int(), 200) << res.body();
}

TEST_F(HttpConnectionTest, RefusalsCarryTheirHeaders) {
  auto s = connect();
  auto r405 = roundtrip(*s, "DELETE /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n");
  EXPECT_EQ(r405.result_int(), 405);
  EXPECT_EQ(r405[http::field::allow], "POST");
  auto r405get = roundtrip(*s, "POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(r405get.result_int(), 405);
  EXPECT_EQ(r405get[http::field::allow], "GET");
  auto r401 = roundtrip(*s, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\n\r\n");
  EXPECT_EQ(r401.result_int(), 401);
  EXPECT_EQ(r401[http::field::www_authenticate], "Bearer");
  auto missing = roundtrip(*s, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(missing.result_int(), 401);
  // The scheme is case-insensitive (RFC 7235); the key is not.
  EXPECT_EQ(roundtrip(*s, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: bearer k\r\n\r\n").result_int(), 200);
  EXPECT_EQ(roundtrip(*s, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: BEARER  k\r\n\r\n").result_int(), 200);
  EXPECT_EQ(roundtrip(*s, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer K\r\n\r\n").result_int(), 401);
  EXPECT_EQ(roundtrip(*s, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearerk\r\n\r\n").result_int(), 401);
}

TEST_F(HttpConnectionTest, NonJsonBodyIs415AndJsonVariantsPass) {
  auto s = connect();
  const std::string body = R"({"prompt": "a", "max_tokens": 1})";
  auto with_type = [&](const std::string& type) {
    return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: " + type +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  auto r415 = roundtrip(*s, with_type("text/plain"));
  EXPECT_EQ(r415.result_int(), 415);
  EXPECT_EQ(Json::parse(r415.body())["error"]["param"], "Content-Type");
  EXPECT_EQ(roundtrip(*s, with_type("application/x-www-form-urlencoded")).result_int(), 415);
  EXPECT_EQ(roundtrip(*s, with_type("Application/JSON; charset=utf-8")).result_int(), 200);
  EXPECT_EQ(roundtrip(*s, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n" + body)
                .result_int(),
            200);  // no Content-Type: read as JSON
}

TEST_F(HttpConnectionTest, MoreSequencesThanTheLiveLimitIs400NotRetryable) {
  auto s = connect();
  auto res = roundtrip(*s, post("/v1/completions", R"({"prompt": ["a", "b", "c"], "n": 2, "max_tokens": 1})"));
  EXPECT_EQ(res.result_int(), 400);
  EXPECT_EQ(Json::parse(res.body())["error"]["param"], "n");
  EXPECT_EQ(roundtrip(*s, post("/v1/completions", R"({"prompt": "a", "n": 4, "max_tokens": 1})")).result_int(), 200);
}

TEST(ListeningSocket, ResolvesNamesAndReportsAnAddressInUse) {
  EXPECT_GT(ListeningSocket("localhost", 0).port(), 0);
  ListeningSocket a("127.0.0.1", 0);
  EXPECT_GT(a.port(), 0);
  try {
    ListeningSocket b("127.0.0.1", a.port());
    ADD_FAILURE() << "bound a port in use";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cannot listen on 127.0.0.1:" + std::to_string(a.port())),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ListeningSocket("no-such-host.invalid", 0), std::exception);
}

}  // namespace
}  // namespace deepinfer::server
