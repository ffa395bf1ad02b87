// The HTTP server end to end over loopback with a scripted engine (no model): routing, auth,
// error format, non-streaming and SSE responses, admission (429 + Retry-After), body limit
// (413), keep-alive, graceful stop. Requests are written and read with Beast's own client.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "engine/async_engine.h"
#include "recipe/tokenizer.h"
#include "server/server.h"
#include "script_engine.h"

namespace deepinfer::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = std::make_unique<AsyncEngine>(std::make_unique<ScriptEngine>(&hold_),
                                            AsyncEngineOptions{.max_live_requests = 2});
    ServerOptions o;
    o.port = 0;
    o.api_key = "k";
    o.model_name = "m";
    o.max_model_len = 1000;
    o.max_body_bytes = 4096;
    o.handle_signals = false;
    server_ = std::make_unique<Server>(o, tokenizer(), std::vector<int32_t>{1}, *engine_);
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    hold_ = false;
    server_->stop();
    thread_.join();
  }

  http::response<http::string_body> send(http::verb method, const std::string& target, const std::string& body,
                                         const std::string& key = "k") {
    net::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), server_->port()));
    http::request<http::string_body> req(method, target, 11);
    req.set(http::field::host, "localhost");
    if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response<http::string_body> res;
    http::read(stream, buffer, res);
    return res;
  }
  static Json error_of(const http::response<http::string_body>& res) {
    const Json body = Json::parse(res.body());
    EXPECT_EQ(body["error"].size(), 4u) << res.body();
    return body["error"];
  }

  std::atomic<bool> hold_{false};
  std::unique_ptr<AsyncEngine> engine_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

TEST_F(HttpServerTest, CompletionNonStreaming) {
  auto res = send(http::verb::post, "/v1/completions", R"({"model": "m", "prompt": "hi", "max_tokens": 4})");
  ASSERT_EQ(res.result_int(), 200) << res.body();
  const Json body = Json::parse(res.body());
  const std::vector<int32_t> script = tokenizer().encode(kScript, false);
  EXPECT_EQ(body["choices"][0]["text"], tokenizer().decode(std::vector<int32_t>(script.begin(), script.begin() + 4)));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 4);
  EXPECT_EQ(body["usage"]["prompt_tokens"], static_cast<int64_t>(tokenizer().encode("hi", true).size()));
}

TEST_F(HttpServerTest, ChatStreamingSse) {
  auto res = send(http::verb::post, "/v1/chat/completions",
                  R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": true,
                      "stream_options": {"include_usage": true}})");
  ASSERT_EQ(res.result_int(), 200);
  EXPECT_EQ(res[http::field::content_type], "text/event-stream");
  const std::string& text = res.body();
  ASSERT_GE(text.size(), 14u);
  EXPECT_EQ(text.substr(text.size() - 14), "data: [DONE]\n\n");
  std::string content;
  int n_events = 0, n_finish = 0;
  Json last;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = text.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos);
    const std::string event = text.substr(pos, end - pos);
    pos = end + 2;
    ASSERT_EQ(event.rfind("data: ", 0), 0u) << event;
    if (event == "data: [DONE]") break;
    last = Json::parse(event.substr(6));
    ++n_events;
    for (const Json& c : last["choices"]) {
      if (c["delta"].contains("content")) content += c["delta"]["content"].get<std::string>();
      if (!c["finish_reason"].is_null()) ++n_finish;
    }
  }
  EXPECT_EQ(n_finish, 1);
  EXPECT_GT(n_events, 3);
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 5);
  const std::vector<int32_t> script = tokenizer().encode(kScript, false);
  EXPECT_EQ(content, tokenizer().decode(std::vector<int32_t>(script.begin(), script.begin() + 5)));
}

TEST_F(HttpServerTest, Errors) {
  auto r401 = send(http::verb::get, "/v1/models", "", "wrong");
  EXPECT_EQ(r401.result_int(), 401);
  EXPECT_EQ(error_of(r401)["code"], "invalid_api_key");
  EXPECT_EQ(send(http::verb::get, "/health", "", "").result_int(), 200);  // no key needed
  auto r404 = send(http::verb::post, "/v1/completions", R"({"model": "x", "prompt": "a"})");
  EXPECT_EQ(r404.result_int(), 404);
  EXPECT_EQ(error_of(r404)["code"], "model_not_found");
  auto r400 = send(http::verb::post, "/v1/chat/completions", "{nope");
  EXPECT_EQ(r400.result_int(), 400);
  EXPECT_EQ(error_of(r400)["type"], "invalid_request_error");
  EXPECT_EQ(send(http::verb::get, "/v1/completions", "").result_int(), 405);
  EXPECT_EQ(send(http::verb::get, "/nothing", "").result_int(), 404);
  auto r413 = send(http::verb::post, "/v1/completions", std::string(5000, ' '));
  EXPECT_EQ(r413.result_int(), 413);
  EXPECT_EQ(error_of(r413)["code"], "request_too_large");
}

TEST_F(HttpServerTest, FullAdmissionIs429WithRetryAfter) {
  hold_ = true;  // requests stay live
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&] {
      if (send(http::verb::post, "/v1/completions", R"({"prompt": "a", "max_tokens": 3})").result_int() == 200) ++ok;
    });
  }
  for (int i = 0; i < 500 && engine_->stats().n_live < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(engine_->stats().n_live, 2);
  auto r = send(http::verb::post, "/v1/completions", R"({"prompt": "a", "max_tokens": 3})");
  EXPECT_EQ(r.result_int(), 429);
  EXPECT_EQ(r[http::field::retry_after], "1");
  EXPECT_EQ(error_of(r)["code"], "rate_limit_exceeded");
  hold_ = false;
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok.load(), 2);
  EXPECT_EQ(send(http::verb::post, "/v1/completions", R"({"prompt": "a", "max_tokens": 1})").result_int(), 200);
}

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), server_->port()));
  beast::flat_buffer buffer;
  for (int i = 0; i < 3; ++i) {
    http::request<http::string_body> req(http::verb::post, "/v1/completions", 11);
    req.set(http::field::authorization, "Bearer k");
    req.body() = R"({"prompt": "a", "max_tokens": 2, "stream": )" + std::string(i % 2 ? "true" : "false") + "}";
    req.prepare_payload();
    http::write(stream, req);
    http::response<http::string_body> res;
    http::read(stream, buffer, res);
    EXPECT_EQ(res.result_int(), 200);
    EXPECT_TRUE(res.keep_alive());
  }
}

}  // namespace
}  // namespace deepinfer::server
