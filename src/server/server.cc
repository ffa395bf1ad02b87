#include "server/server.h"

#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <boost/asio.hpp>

#include "base/error.h"
#include "base/logging.h"
#include "server/http_session.h"
#include "server/server_state.h"

namespace deepinfer::server {
namespace net = boost::asio;
using tcp = net::ip::tcp;

ListeningSocket::ListeningSocket(const std::string& host, uint16_t port) {
  net::io_context ioc;
  boost::system::error_code ec;
  std::vector<tcp::endpoint> endpoints;
  const net::ip::address address = net::ip::make_address(host, ec);
  if (!ec) {
    endpoints.emplace_back(address, port);
  } else {
    tcp::resolver resolver(ioc);
    const auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
    CHECK(!ec && !results.empty()) << "--host '" << host << "' is neither an IP address nor a name that resolves"
                                   << (ec ? ": " + ec.message() : std::string());
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  tcp::acceptor acceptor(ioc);
  std::string failures;
  for (const tcp::endpoint& endpoint : endpoints) {
    ec = {};
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
    if (!ec) {
      v6_ = endpoint.protocol() == tcp::v6();
      port_ = acceptor.local_endpoint().port();
      fd_ = acceptor.release();
      return;
    }
    failures += (failures.empty() ? "" : "; ") + endpoint.address().to_string() + ": " + ec.message();
    boost::system::error_code ignored;
    acceptor.close(ignored);
  }
  CHECK(false) << "cannot listen on " << host << ":" << port << " (" << failures << ")";
}

ListeningSocket::~ListeningSocket() {
  if (fd_ >= 0) ::close(fd_);
}

ListeningSocket::ListeningSocket(ListeningSocket&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), v6_(other.v6_), port_(other.port_) {}

struct Server::Impl {
  Impl(ServerOptions options, const recipe::Tokenizer& tokenizer, std::vector<int32_t> eos_ids,
       AsyncEngine& engine)
      : state{std::move(options), tokenizer, engine, {}, {}, 0, nullptr, nullptr},
        ioc(std::max(1, state.options.n_io_threads)),
        acceptor(ioc),
        signals(ioc),
        trim_timer(ioc) {
    state.model.tokenizer = &tokenizer;
    state.model.name = state.options.model_name;
    state.model.max_model_len = state.options.max_model_len;
    state.model.eos_ids = std::move(eos_ids);
    state.model.chat_version = state.options.chat_version;
    state.cors = CorsPolicy(state.options.allowed_origins);
    state.metrics.configure(state.options.model_name, state.options.max_model_len);
    state.prep_pool = std::make_unique<net::thread_pool>(std::max(1, state.options.n_prep_threads));
    state.grammar_pool = std::make_unique<net::thread_pool>(std::max(1, state.options.n_grammar_threads));
  }

  void accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](boost::system::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec != net::error::operation_aborted) {
          LOG(WARNING) << "accept failed: " << ec.message();
        }
        if (!acceptor.is_open()) return;
      } else {
        socket.set_option(tcp::no_delay(true), ec);
        std::make_shared<HttpSession>(std::move(socket), state)->start();
      }
      accept();
    });
  }

  // Hands freed heap back to the OS once the server is quiet: no request began or ended during
  // the last tick and the engine has nothing live, after some request activity since the last
  // trim. AsyncEngine trims after engine work; this also covers requests refused before the
  // engine (4xx with large bodies) and the buffers of connections that closed after the engine
  // went idle. Ends count too: a request refused after a long preparation (a 6 MB prompt
  // tokenized, then too long) frees its memory long after it began; watching only beginnings,
  // the trim ran before those frees and the next one waited for the next request (+100-220 MiB
  // resident meanwhile).
  void check_trim() {
    trim_timer.expires_after(std::chrono::milliseconds(500));
    trim_timer.async_wait([this](boost::system::error_code ec) {
      if (ec || shutting_down) return;
      const int64_t n = state.n_exchanges.load(std::memory_order_relaxed) +
                        state.n_exchanges_ended.load(std::memory_order_relaxed);
      if (n != trim_seen) {
        trim_seen = n;
        trim_due = true;
      } else if (trim_due && state.engine.stats().n_live == 0) {
        malloc_trim(0);
        trim_due = false;
      }
      check_trim();
    });
  }

  // Stops accepting; lets the engine drain on a helper thread (the io threads keep delivering
  // outputs meanwhile), then stops the io_context once the final writes had a moment. Called
  // again during the drain, it aborts every request still live (the drain ends at once).
  void begin_shutdown() {
    if (shutting_down.exchange(true)) return cut_drain();
    LOG(INFO) << "shutting down: draining requests for up to " << state.options.drain_seconds
              << " s (signal again to stop at once)";
    net::post(ioc, [this] {
      boost::system::error_code ec;
      acceptor.close(ec);
      trim_timer.cancel();
    });
    drainer = std::thread([this] {
      state.engine.shutdown(state.options.drain_seconds);
      auto timer = std::make_shared<net::steady_timer>(ioc, std::chrono::milliseconds(300));
      timer->async_wait([this, timer](boost::system::error_code) { ioc.stop(); });
    });
  }

  void cut_drain() {
    std::vector<std::string> ids = state.live.snapshot();
    LOG(INFO) << "shutting down now: aborting " << ids.size() << " live request(s)";
    for (const std::string& id : ids) state.engine.abort(id);
  }

  void wait_signal() {
    signals.async_wait([this](boost::system::error_code ec, int) {
      if (ec) return;
      begin_shutdown();
      wait_signal();
    });
  }

  ServerState state;
  net::io_context ioc;
  tcp::acceptor acceptor;
  net::signal_set signals;
  std::atomic<bool> shutting_down{false};
  std::thread drainer;
  net::steady_timer trim_timer;  // check_trim's state below is touched by its handler only
  int64_t trim_seen = 0;
  bool trim_due = false;
};

Server::Server(ServerOptions options, ListeningSocket socket, const recipe::Tokenizer& tokenizer,
               std::vector<int32_t> eos_ids, AsyncEngine& engine)
    : impl_(std::make_unique<Impl>(std::move(options), tokenizer, std::move(eos_ids), engine)) {
  const ServerOptions& o = impl_->state.options;
  CHECK(o.max_model_len > 0) << "max_model_len must be positive";
  CHECK(socket.fd_ >= 0) << "the listening socket was moved from";
  impl_->state.created = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  boost::system::error_code ec;
  impl_->acceptor.assign(socket.v6_ ? tcp::v6() : tcp::v4(), socket.fd_, ec);
  CHECK(!ec) << "cannot serve on " << o.host << ":" << socket.port_ << ": " << ec.message();
  socket.fd_ = -1;  // the acceptor owns it now
}

Server::Server(ServerOptions options, const recipe::Tokenizer& tokenizer, std::vector<int32_t> eos_ids,
               AsyncEngine& engine)
    : Server(options, ListeningSocket(options.host, options.port), tokenizer, std::move(eos_ids), engine) {}

Server::~Server() {
  if (impl_->drainer.joinable()) impl_->drainer.join();
}

uint16_t Server::port() const { return impl_->acceptor.local_endpoint().port(); }

void Server::run() {
  Impl& s = *impl_;
  if (s.state.options.handle_signals) {
    s.signals.add(SIGINT);
    s.signals.add(SIGTERM);
    s.wait_signal();
  }
  s.accept();
  s.check_trim();
  LOG(INFO) << "serving " << s.state.options.model_name << " on http://" << s.state.options.host << ":" << port()
            << " (chat encoding " << (s.state.options.chat_version == recipe::ChatVersion::kV41 ? "v4.1" : "v4")
            << ", max_model_len " << s.state.options.max_model_len << ", up to "
            << s.state.engine.max_live_requests() << " live requests, " << s.state.options.n_io_threads
            << " io thread(s), " << s.state.options.n_prep_threads << " preparation thread(s))";
  // Named so that /proc/PID/task/*/comm tells the HTTP threads' CPU time apart (bench).
  auto serve = [&s] {
    pthread_setname_np(pthread_self(), "di-http");
    s.ioc.run();
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < s.state.options.n_io_threads; ++i) threads.emplace_back(serve);
  for (std::thread& t : threads) t.join();
  s.state.prep_pool->stop();  // before the io_context goes: its jobs post to it
  s.state.prep_pool->join();
  s.state.grammar_pool->stop();  // after the preparation pool: its jobs post here
  s.state.grammar_pool->join();
  if (s.drainer.joinable()) s.drainer.join();
  LOG(INFO) << "server stopped";
}

void Server::stop() { impl_->begin_shutdown(); }

}  // namespace deepinfer::server
