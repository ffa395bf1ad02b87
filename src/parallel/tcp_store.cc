// TcpStore: key-value rendezvous over TCP (see tcp_store.h).
//
// Wire format, client -> server: op (1 byte: 'S' set, 'G' get), key length (u32), key,
// then for 'S' value length (u64) and value, for 'G' the wait in milliseconds (u64).
// Server -> client: status (1 byte: 'O' ok, 'T' timed out), for 'O' after a get the value
// length (u64) and value. Integers are little-endian (every machine we run on).
#include "parallel/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "base/error.h"
#include "parallel/poll_wait.h"

namespace deepinfer {

namespace {

using Clock = std::chrono::steady_clock;

// Sends / receives exactly n bytes; false on a closed or failed socket.
bool send_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// Waits for readability until the deadline (nullopt-like: false on timeout or error).
bool recv_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    const int r = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 100)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) continue;
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

constexpr uint64_t kMaxValue = uint64_t{1} << 30;

}  // namespace

struct TcpStore::Server {
  int listen_fd = -1;
  int port = 0;
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::string> data;
  std::thread acceptor;
  std::vector<std::thread> clients;
  std::vector<int> client_fds;

  void set(const std::string& key, const std::string& value) {
    {
      std::lock_guard<std::mutex> lock(mu);
      data[key] = value;
    }
    cv.notify_all();
  }

  bool get(const std::string& key, Clock::time_point deadline, std::string* value) {
    std::unique_lock<std::mutex> lock(mu);
    const bool found = cv.wait_until(lock, deadline, [&] {
      return stop.load() || data.count(key) > 0;
    });
    if (!found || data.count(key) == 0) return false;
    *value = data[key];
    return true;
  }

  void serve(int fd) {
    const auto forever = [] { return Clock::now() + std::chrono::hours(24 * 365); };
    for (;;) {
      char op = 0;
      uint32_t key_len = 0;
      // Idle clients wait here; stop closes the socket (shutdown), which ends the recv.
      if (!recv_all(fd, &op, 1, forever()) || !recv_all(fd, &key_len, 4, forever())) break;
      if (key_len > (1u << 20)) break;
      std::string key(key_len, '\0');
      if (!recv_all(fd, key.data(), key_len, forever())) break;
      if (op == 'S') {
        uint64_t n = 0;
        if (!recv_all(fd, &n, 8, forever()) || n > kMaxValue) break;
        std::string value(n, '\0');
        if (!recv_all(fd, value.data(), n, forever())) break;
        set(key, value);
        if (!send_all(fd, "O", 1)) break;
      } else if (op == 'G') {
        uint64_t wait_ms = 0;
        if (!recv_all(fd, &wait_ms, 8, forever())) break;
        std::string value;
        if (get(key, Clock::now() + std::chrono::milliseconds(wait_ms), &value)) {
          const uint64_t n = value.size();
          if (!send_all(fd, "O", 1) || !send_all(fd, &n, 8) ||
              !send_all(fd, value.data(), n)) {
            break;
          }
        } else if (!send_all(fd, "T", 1)) {
          break;
        }
      } else {
        break;  // not our protocol: drop the client
      }
    }
  }

  void accept_loop() {
    while (!stop.load()) {
      pollfd pfd{listen_fd, POLLIN, 0};
      const int r = ::poll(&pfd, 1, 50);
      if (r <= 0) continue;
      const int fd = ::accept(listen_fd, nullptr, nullptr);
      if (fd < 0) continue;
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      std::lock_guard<std::mutex> lock(mu);
      client_fds.push_back(fd);
      clients.emplace_back([this, fd] { serve(fd); });
    }
  }

  ~Server() {
    stop.store(true);
    cv.notify_all();
    if (acceptor.joinable()) acceptor.join();
    {
      std::lock_guard<std::mutex> lock(mu);
      for (int fd : client_fds) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : clients) t.join();
    for (int fd : client_fds) ::close(fd);
    if (listen_fd >= 0) ::close(listen_fd);
  }
};

TcpStore::TcpStore(const std::string& host, int port, bool is_server,
                   std::chrono::milliseconds timeout)
    : host_(host), port_(port), timeout_(timeout) {
  CHECK(port >= 0 && port <= 65535) << "tcp store: port " << port << " is not a TCP port";
  CHECK(timeout.count() > 0) << "tcp store: timeout must be positive";
  if (is_server) {
    auto server = std::make_unique<Server>();
    server->listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    CHECK_KIND(kDevice, server->listen_fd >= 0)
        << "tcp store: socket() failed: " << std::strerror(errno);
    const int one = 1;
    setsockopt(server->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(server->listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(server->listen_fd, 128) != 0) {
      const int err = errno;
      THROW(kDevice) << "tcp store: cannot listen on port " << port << ": "
                     << std::strerror(err) << " (is MASTER_PORT in use?)";
    }
    socklen_t len = sizeof(addr);
    getsockname(server->listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
    server->port = ntohs(addr.sin_port);
    port_ = server->port;
    Server* s = server.get();
    server->acceptor = std::thread([s] { s->accept_loop(); });
    server_ = std::move(server);
    return;
  }
  CHECK(!host.empty()) << "tcp store: no server address (MASTER_ADDR)";
  CHECK(port > 0) << "tcp store: no server port (MASTER_PORT)";
  const auto deadline = Clock::now() + timeout;
  std::string last_error = "no attempt";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  for (;;) {
    addrinfo* found = nullptr;
    const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (gai != 0) {
      last_error = gai_strerror(gai);
    } else {
      for (addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          fd_ = fd;
        } else {
          last_error = std::strerror(errno);
          ::close(fd);
        }
      }
      ::freeaddrinfo(found);
    }
    if (fd_ >= 0) break;
    if (Clock::now() >= deadline) {
      THROW(kDevice) << "tcp store: could not connect to " << address() << " within "
                     << parallel_detail::format_seconds(timeout) << " (" << last_error
                     << "; is rank 0 running, and are MASTER_ADDR / MASTER_PORT right?)";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 may not be up yet
  }
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

int TcpStore::port() const { return port_; }

std::string TcpStore::address() const { return host_ + ":" + std::to_string(port_); }

void TcpStore::set(const std::string& key, const std::string& value) {
  CHECK(value.size() <= kMaxValue) << "tcp store: value of '" << key << "' is too large";
  if (server_ != nullptr) return server_->set(key, value);
  const uint32_t key_len = static_cast<uint32_t>(key.size());
  const uint64_t n = value.size();
  char status = 0;
  const bool ok = send_all(fd_, "S", 1) && send_all(fd_, &key_len, 4) &&
                  send_all(fd_, key.data(), key.size()) && send_all(fd_, &n, 8) &&
                  send_all(fd_, value.data(), n) &&
                  recv_all(fd_, &status, 1, Clock::now() + timeout_) && status == 'O';
  CHECK_KIND(kDevice, ok) << "tcp store: set '" << key << "' on " << address()
                          << " failed (the server closed the connection or did not answer "
                          << "within " << parallel_detail::format_seconds(timeout_) << ")";
}

bool TcpStore::wait(const std::string& key, std::chrono::milliseconds timeout,
                    std::string* value) {
  const auto deadline = Clock::now() + timeout;
  if (server_ != nullptr) return server_->get(key, deadline, value);
  const uint32_t key_len = static_cast<uint32_t>(key.size());
  const uint64_t wait_ms = static_cast<uint64_t>(timeout.count());
  bool ok = send_all(fd_, "G", 1) && send_all(fd_, &key_len, 4) &&
            send_all(fd_, key.data(), key.size()) && send_all(fd_, &wait_ms, 8);
  char status = 0;
  // The server answers by the deadline; allow a little for the trip back.
  const auto reply_by = deadline + std::chrono::seconds(5);
  ok = ok && recv_all(fd_, &status, 1, reply_by);
  CHECK_KIND(kDevice, ok && (status == 'O' || status == 'T'))
      << "tcp store: get '" << key << "' from " << address()
      << " failed (the server closed the connection or did not answer)";
  if (status == 'T') return false;
  uint64_t n = 0;
  ok = recv_all(fd_, &n, 8, reply_by) && n <= kMaxValue;
  std::string v(ok ? n : 0, '\0');
  ok = ok && recv_all(fd_, v.data(), n, reply_by);
  CHECK_KIND(kDevice, ok) << "tcp store: get '" << key << "' from " << address()
                          << ": the reply was cut off";
  *value = std::move(v);
  return true;
}

std::string TcpStore::get(const std::string& key) {
  std::string value;
  CHECK_KIND(kDevice, wait(key, timeout_, &value))
      << "tcp store: key '" << key << "' did not appear on " << address() << " within "
      << parallel_detail::format_seconds(timeout_) << " (a rank died or never started)";
  return value;
}

}  // namespace deepinfer
