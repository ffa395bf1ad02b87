// libFuzzer harness for HTTP request handling: the bytes of one connection are sent to an
// in-process deepinfer server (Server over loopback, the shipped tokenizer, a scripted step
// engine in place of a model), so the whole request side runs as in production: Beast's parser
// with our limits, pipelining, 100-continue, routing, bearer auth, Content-Type checks, body
// parsing, prompt encoding, constraint compilation (small budgets) and the response writers.
// Byte 0 of the input picks how the client ends: even, it half-closes right after sending
// (the server reads EOF); odd, it keeps the connection open until the server closes it (after
// "Connection: close", an error, or the short idle/read timeouts set here). The response is
// read and discarded. Findings are crashes and sanitizer reports in any server thread, and a
// connection the server never closes (the recv timeout below, as a libFuzzer timeout).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/async_engine.h"
#include "fuzz_common.h"
#include "recipe/tokenizer.h"
#include "server/server.h"

using namespace deepinfer;

namespace {

const recipe::Tokenizer& tokenizer() {
  static const recipe::Tokenizer t = recipe::Tokenizer::from_file(fuzz::shipped_tokenizer_path());
  return t;
}

// Every request yields the tokens of a fixed text in order, one per step, up to max_tokens.
class ScriptedEngine : public StepEngine {
 public:
  ScriptedEngine() : script_(tokenizer().encode(" Hello world, {\"a\": 1} <think>x</think> done.", false)) {}
  void add_request(EngineRequest r) override { live_[r.id] = {r.params.max_tokens, 0}; }
  bool abort(const std::string& id) override { return live_.erase(id) > 0; }
  std::vector<RequestOutput> step() override {
    std::vector<RequestOutput> outs;
    for (auto it = live_.begin(); it != live_.end();) {
      auto& [max_tokens, produced] = it->second;
      RequestOutput o;
      o.id = it->first;
      o.new_tokens = {script_[static_cast<size_t>(produced) % script_.size()]};
      o.new_text = tokenizer().decode(o.new_tokens);
      ++produced;
      o.n_output_tokens = produced;
      o.finished = produced >= max_tokens;
      if (o.finished) o.finish_reason = "length";
      outs.push_back(std::move(o));
      it = outs.back().finished ? live_.erase(it) : std::next(it);
    }
    return outs;
  }
  bool has_unfinished() const override { return !live_.empty(); }

 private:
  std::vector<int32_t> script_;
  std::map<std::string, std::pair<int64_t, int64_t>> live_;
};

struct Harness {
  AsyncEngine engine{std::make_unique<ScriptedEngine>(), AsyncEngineOptions{.max_live_requests = 8}};
  std::unique_ptr<server::Server> server;
  std::thread thread;

  Harness() {
    server::ServerOptions o;
    o.port = 0;
    o.api_key = "k";
    o.model_name = "m";
    o.max_model_len = 64;
    o.max_body_bytes = 64 << 10;
    o.handle_signals = false;
    o.idle_timeout_seconds = 0.05;  // short: a kept-open connection costs the fuzzer this long
    o.read_timeout_seconds = 0.15;
    o.write_timeout_seconds = 1.0;
    o.limits.grammar.max_states = 20000;
    o.limits.grammar.max_memory_bytes = 32 << 20;
    o.limits.grammar.timeout_ms = 300;
    server = std::make_unique<server::Server>(o, tokenizer(), std::vector<int32_t>{1}, engine);
    thread = std::thread([this] { server->run(); });
  }
};

Harness& harness() {
  static Harness* h = new Harness();  // lives until exit: the server thread keeps running
  return *h;
}

int connect_to(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fuzz::finding("socket", "failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) fuzz::finding("connect", "failed");
  // Longer than every server timeout: a recv that waits this long means a hung connection,
  // which libFuzzer's -timeout then reports.
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)harness();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool keep_open = data[0] & 1;
  const int fd = connect_to(harness().server->port());
  size_t sent = 0;
  while (sent < size - 1) {
    const ssize_t n = ::send(fd, data + 1 + sent, size - 1 - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server closed early (413, 400): fine
    sent += static_cast<size_t>(n);
  }
  if (!keep_open) ::shutdown(fd, SHUT_WR);
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) fuzz::finding("http", "the server never closed the connection");
      break;  // reset by the server
    }
  }
  ::close(fd);
  return 0;
}
