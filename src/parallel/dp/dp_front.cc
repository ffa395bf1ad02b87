// DpFront (dp_front.h): the data-parallel HTTP front. Blocking sockets, a thread per client
// connection, a poller per replica, a watchdog for every deadline.
#include "parallel/dp/dp_front.h"

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <utility>  // before Boost.Asio (its awaitable.hpp uses std::exchange)

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/logging.h"

namespace deepinfer::dp {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

namespace {

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string format_seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), "%g s", s);
  return b;
}

std::string error_body(const std::string& message, const std::string& code) {
  return Json{{"error", {{"message", message}, {"type", "server_error"}, {"param", nullptr}, {"code", code}}}}.dump(
      -1, ' ', false, Json::error_handler_t::replace);
}

std::string chunk(const std::string& data) {
  char size[24];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + data + "\r\n";
}

void write_all(tcp::socket& s, const std::string& data, beast::error_code& ec) {
  net::write(s, net::buffer(data), ec);
}

std::string response_head(int status, const std::string& content_type, const std::string& extra, bool keep_alive) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " +
                     std::string(http::obsolete_reason(http::int_to_status(unsigned(status)))) + "\r\n";
  head += "Server: deepinfer-dp\r\nContent-Type: " + content_type + "\r\n" + extra;
  head += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  return head;
}

std::string full_response(int status, const std::string& content_type, const std::string& body, bool keep_alive,
                          const std::string& extra = "") {
  return response_head(status, content_type, extra + "Content-Length: " + std::to_string(body.size()) + "\r\n",
                       keep_alive) +
         "\r\n" + body;
}

// Prometheus text with replica="i" added to every sample; comment lines once per name.
void relabel_metrics(const std::string& text, int replica, std::set<std::string>& seen_comments,
                     std::string& out) {
  std::istringstream in(text);
  std::string line;
  const std::string label = "replica=\"" + std::to_string(replica) + "\"";
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (seen_comments.insert(line).second) out += line + "\n";
      continue;
    }
    const size_t brace = line.find('{'), space = line.find(' ');
    if (brace != std::string::npos && (space == std::string::npos || brace < space)) {
      const bool empty_labels = brace + 1 < line.size() && line[brace + 1] == '}';
      out += line.substr(0, brace + 1) + label + (empty_labels ? "" : ",") + line.substr(brace + 1) + "\n";
    } else if (space != std::string::npos) {
      out += line.substr(0, space) + "{" + label + "}" + line.substr(space) + "\n";
    }
  }
}

}  // namespace

struct DpFront::Impl {
  // Deadlines and cuts: every blocking socket of the front is registered here; the watchdog
  // shuts a socket down when its deadline passes or its replica's group fails.
  struct Watch {
    int fd = -1;
    int replica = -1;              // -1: a client socket, -2: a poll (not cut with its group)
    Clock::time_point deadline = Clock::time_point::max();
    std::string expiry;            // what passing the deadline means
    std::string cut;               // why it was shut down ("" while not)
  };
  class Watched {
   public:
    Watched(Impl& impl, int fd, int replica) : impl_(impl) {
      std::lock_guard<std::mutex> lock(impl_.watch_mu);
      id_ = impl_.next_watch++;
      impl_.watches[id_] = Watch{fd, replica, Clock::time_point::max(), {}, {}};
    }
    ~Watched() {
      std::lock_guard<std::mutex> lock(impl_.watch_mu);
      impl_.watches.erase(id_);
    }
    Watched(const Watched&) = delete;
    Watched& operator=(const Watched&) = delete;
    // The socket is shut down `s` seconds from now (0: never) with `expiry` as the reason.
    void expire_in(double s, const std::string& expiry) {
      std::lock_guard<std::mutex> lock(impl_.watch_mu);
      Watch& w = impl_.watches.at(id_);
      w.deadline = s > 0 ? Clock::now() + seconds(s) : Clock::time_point::max();
      w.expiry = expiry;
    }
    std::string cut() const {
      std::lock_guard<std::mutex> lock(impl_.watch_mu);
      return impl_.watches.at(id_).cut;
    }

   private:
    Impl& impl_;
    int64_t id_ = 0;
  };

  struct Replica {
    ReplicaAddress address;
    bool ok = false;            // its last poll answered and it can step
    std::string why_not;        // why not ok
    ReplicaLoad load;
    int64_t n_routed = 0, n_failed = 0, n_affinity = 0;
  };

  explicit Impl(FrontOptions o) : options(std::move(o)), acceptor(ioc), policy(int(options.replicas.size()), options.route) {
    CHECK(!options.replicas.empty()) << "data-parallel front: no replicas";
    CHECK(options.poll_interval_seconds > 0 && options.health_timeout_seconds > 0 &&
          options.connect_timeout_seconds > 0 && options.request_timeout_seconds >= 0)
        << "data-parallel front: timeouts must be positive";
    beast::error_code ec;
    const auto address = net::ip::make_address(options.host, ec);
    CHECK(!ec) << "data-parallel front: --host '" << options.host << "' is not an IP address";
    const tcp::endpoint endpoint(address, options.port);
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
    CHECK(!ec) << "data-parallel front: cannot listen on " << options.host << ":" << options.port << " ("
               << ec.message() << ")";
    for (const ReplicaAddress& a : options.replicas) {
      replicas.push_back(Replica{a, false, "not polled yet", {}, 0, 0, 0});
    }
  }

  std::string name(int r) const {
    const ReplicaAddress& a = options.replicas[size_t(r)];
    return "replica " + std::to_string(r) + " (" + a.host + ":" + std::to_string(a.port) + ")";
  }

  // ---- group state (under mu) ----
  bool group_up(int group) const {
    for (const Replica& x : replicas) {
      if (x.address.group == group && !x.ok) return false;
    }
    return true;
  }
  std::string group_why(int group) const {
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (replicas[i].address.group == group && !replicas[i].ok) return name(int(i)) + " " + replicas[i].why_not;
    }
    return {};
  }
  // A replica's state changed; a group that went down has its requests cut.
  void set_ok(int r, bool ok, const std::string& why) {
    std::vector<int> cut;
    std::string reason;
    {
      std::lock_guard<std::mutex> lock(mu);
      Replica& x = replicas[size_t(r)];
      const int g = x.address.group;
      const bool was_up = group_up(g);
      x.ok = ok;
      if (!ok) x.why_not = why;
      const bool now_up = group_up(g);
      if (was_up && !now_up) {
        reason = name(r) + " failed: " + why;
        LOG(WARNING) << "data-parallel front: " << reason << "; its group " << g << " is out of service";
        for (size_t i = 0; i < replicas.size(); ++i) {
          if (replicas[i].address.group == g) {
            cut.push_back(int(i));
            policy.forget_replica(int(i));
            ++replicas[i].n_failed;
          }
        }
      } else if (!was_up && now_up) {
        LOG(INFO) << "data-parallel front: group " << g << " is serving (" << name(r) << " answered)";
      }
    }
    if (!cut.empty()) cut_requests(cut, reason);
  }

  void cut_requests(const std::vector<int>& rs, const std::string& reason) {
    std::lock_guard<std::mutex> lock(watch_mu);
    for (auto& [id, w] : watches) {
      for (int r : rs) {
        if (w.replica == r && w.cut.empty()) {
          w.cut = reason;
          ::shutdown(w.fd, SHUT_RDWR);
        }
      }
    }
  }

  void watchdog() {
    while (!stopping.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::lock_guard<std::mutex> lock(watch_mu);
      const auto now = Clock::now();
      for (auto& [id, w] : watches) {
        if (w.cut.empty() && now >= w.deadline) {
          w.cut = w.expiry;
          ::shutdown(w.fd, SHUT_RDWR);
        }
      }
    }
  }

  // ---- upstream calls ----
  // Connects to replica r within connect_timeout. Throws a message on failure.
  void connect(tcp::socket& s, int r) {
    const ReplicaAddress& a = options.replicas[size_t(r)];
    beast::error_code ec;
    const tcp::endpoint ep(net::ip::make_address(a.host, ec), a.port);
    if (ec) throw std::runtime_error("bad address " + a.host);
    s.open(ep.protocol());
    s.non_blocking(true);
    s.connect(ep, ec);
    if (ec == net::error::would_block || ec == net::error::in_progress) {
      pollfd p{s.native_handle(), POLLOUT, 0};
      const int n = ::poll(&p, 1, int(options.connect_timeout_seconds * 1000));
      if (n == 0) throw std::runtime_error("connect timed out after " + format_seconds(options.connect_timeout_seconds));
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(s.native_handle(), SOL_SOCKET, SO_ERROR, &err, &len);
      ec = beast::error_code(err, boost::system::system_category());
    }
    if (ec) throw std::runtime_error("cannot connect: " + ec.message());
    s.non_blocking(false);
    s.set_option(tcp::no_delay(true));
  }

  // GET `path` from replica r, within `timeout`: (status, body). Throws a message on failure.
  std::pair<int, std::string> get(int r, const std::string& path, double timeout) {
    tcp::socket s(ioc);
    connect(s, r);
    Watched watch(*this, s.native_handle(), -2);  // not cut with the group (a poll decides itself)
    watch.expire_in(timeout, "timed out after " + format_seconds(timeout) + " (GET " + path + " unanswered)");
    const ReplicaAddress& a = options.replicas[size_t(r)];
    beast::error_code ec;
    write_all(s, "GET " + path + " HTTP/1.1\r\nHost: " + a.host + "\r\nConnection: close\r\n\r\n", ec);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    if (!ec) http::read(s, buffer, parser, ec);
    const std::string cut = watch.cut();
    if (!cut.empty()) throw std::runtime_error(cut);
    if (ec) throw std::runtime_error("GET " + path + ": " + ec.message());
    return {int(parser.get().result_int()), parser.get().body()};
  }

  void poll_replica(int r) {
    while (!stopping.load()) {
      bool ok = false;
      std::string why;
      ReplicaLoad load;
      try {
        const auto [status, body] = get(r, "/internal/load", options.health_timeout_seconds);
        const Json j = Json::parse(body, nullptr, false);
        if (status != 200 || !j.is_object()) {
          why = "answered /internal/load with HTTP " + std::to_string(status);
        } else if (!j.value("unavailable", std::string()).empty()) {
          why = "is unavailable: " + j.value("unavailable", std::string());
        } else {
          ok = true;
          const int64_t slots = j.value("state_slots", int64_t(0));
          load.capacity = slots > 0 ? slots : j.value("max_live", int64_t(0));
          load.live = j.value("live", int64_t(0));
          load.block_usage = j.value("max_block_usage", 0.0);
        }
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (stopping.load()) return;
      {
        std::lock_guard<std::mutex> lock(mu);
        Replica& x = replicas[size_t(r)];
        if (ok) {
          x.load.capacity = load.capacity;
          x.load.live = load.live;
          x.load.block_usage = load.block_usage;
        }
      }
      set_ok(r, ok, why);
      std::unique_lock<std::mutex> lock(stop_mu);
      stop_cv.wait_for(lock, seconds(options.poll_interval_seconds), [this] { return stopping.load(); });
    }
  }

  // ---- client side ----
  struct Exchange {
    tcp::socket& client;
    bool keep_alive = true;
    bool broken = false;  // the client connection cannot be reused
    void send(const std::string& data) {
      beast::error_code ec;
      write_all(client, data, ec);
      if (ec) broken = true;
    }
  };

  void serve_connection(tcp::socket client) {
    Watched watch(*this, client.native_handle(), -1);
    beast::flat_buffer buffer;
    for (;;) {
      watch.expire_in(options.idle_timeout_seconds, "idle");
      http::request_parser<http::string_body> parser;
      parser.body_limit(options.max_body_bytes);
      beast::error_code ec;
      http::read(client, buffer, parser, ec);
      if (ec || stopping.load()) break;
      watch.expire_in(0, "");
      http::request<http::string_body> req = parser.release();
      Exchange ex{client, req.keep_alive()};
      try {
        handle(req, ex);
      } catch (const std::exception& e) {
        LOG(ERROR) << "data-parallel front: " << req.method_string() << " " << req.target() << ": " << e.what();
        ex.send(full_response(500, "application/json", error_body(e.what(), "internal_error"), false));
        ex.keep_alive = false;
      }
      if (!ex.keep_alive || ex.broken) break;
    }
    beast::error_code ignored;
    client.shutdown(tcp::socket::shutdown_both, ignored);
  }

  std::vector<ReplicaLoad> loads_locked() const {
    std::vector<ReplicaLoad> loads;
    for (size_t i = 0; i < replicas.size(); ++i) {
      ReplicaLoad l = replicas[i].load;
      l.up = group_up(replicas[i].address.group);
      auto it = in_flight.find(int(i));
      l.in_flight = it == in_flight.end() ? 0 : it->second;
      loads.push_back(l);
    }
    return loads;
  }

  void handle(const http::request<http::string_body>& req, Exchange& ex) {
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));
    if (req.method() == http::verb::get && path == "/health") {
      const int up = count_up();
      const Json body = {{"status", up > 0 ? "ok" : "unavailable"}, {"replicas_up", up},
                         {"replicas", int(replicas.size())}};
      return ex.send(full_response(up > 0 ? 200 : 503, "application/json", body.dump(), ex.keep_alive));
    }
    if (req.method() == http::verb::get && path == "/internal/replicas") {
      return ex.send(full_response(200, "application/json", replicas_json().dump(), ex.keep_alive));
    }
    if (req.method() == http::verb::get && path == "/metrics") {
      return ex.send(full_response(200, "text/plain; version=0.0.4; charset=utf-8", metrics(), ex.keep_alive));
    }
    const bool generation = req.method() == http::verb::post &&
                            (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/responses");
    const std::string text = generation ? routing_text(req.body()) : std::string();
    RouteDecision d;
    std::string why_none;
    {
      std::lock_guard<std::mutex> lock(mu);
      d = policy.choose(text, loads_locked());
      if (d.replica < 0) {
        ++n_unroutable;
        for (size_t g = 0, n = replicas.size(); g < n; ++g) {
          const std::string w = group_why(replicas[g].address.group);
          if (!w.empty() && why_none.find(w) == std::string::npos) why_none += (why_none.empty() ? "" : "; ") + w;
        }
      } else {
        ++in_flight[d.replica];
        ++replicas[size_t(d.replica)].n_routed;
        if (d.matched_chars > 0) ++replicas[size_t(d.replica)].n_affinity;
        if (!text.empty()) policy.record(text, d.replica);
      }
    }
    if (d.replica < 0) {
      return ex.send(full_response(503, "application/json",
                                   error_body("no replica is available (" + why_none + ")", "replica_failed"),
                                   ex.keep_alive, "Retry-After: 1\r\n"));
    }
    relay(req, d.replica, ex);
    std::lock_guard<std::mutex> lock(mu);
    --in_flight[d.replica];
  }

  // Forwards `req` to replica r and its answer to the client; a failure of the replica
  // becomes a 503 (or an SSE error event once a stream has started) and marks it down.
  void relay(const http::request<http::string_body>& req, int r, Exchange& ex) {
    tcp::socket up(ioc);
    bool started = false;  // the client has the response header
    auto fail = [&](const std::string& why) {
      const std::string message = name(r) + " failed: " + why;
      set_ok(r, false, why);
      LOG(WARNING) << "data-parallel front: " << req.method_string() << " " << req.target() << ": " << message;
      if (!started) {
        ex.send(full_response(503, "application/json", error_body(message, "replica_failed"), ex.keep_alive));
      } else {
        ex.send(chunk("data: " + error_body(message, "replica_failed") + "\n\n") + "0\r\n\r\n");
        ex.broken = true;  // the stream ended abnormally: close
      }
    };
    try {
      connect(up, r);
    } catch (const std::exception& e) {
      return fail(e.what());
    }
    Watched watch(*this, up.native_handle(), r);
    const double rt = options.request_timeout_seconds;
    const std::string stall = "timed out after " + format_seconds(rt) + " without a byte of its answer";
    watch.expire_in(rt, stall);
    const ReplicaAddress& a = options.replicas[size_t(r)];
    std::string head = std::string(req.method_string()) + " " + std::string(req.target()) + " HTTP/1.1\r\nHost: " +
                       a.host + ":" + std::to_string(a.port) + "\r\nConnection: close\r\n";
    for (const auto& f : req) {
      const auto n = f.name();
      if (n == http::field::host || n == http::field::connection || n == http::field::content_length ||
          n == http::field::transfer_encoding || n == http::field::expect || n == http::field::keep_alive) {
        continue;
      }
      head += std::string(f.name_string()) + ": " + std::string(f.value()) + "\r\n";
    }
    head += "Content-Length: " + std::to_string(req.body().size()) + "\r\n\r\n";
    beast::error_code ec;
    write_all(up, head + req.body(), ec);
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // not boost::none: Beast 1.74 compares lengths against an empty optional as "over"
    if (!ec) http::read_header(up, buffer, parser, ec);
    auto broken = [&](const beast::error_code& e) {
      const std::string cut = watch.cut();
      return cut.empty() ? e.message() : cut;
    };
    if (ec) return fail(broken(ec));
    const auto& res = parser.get();
    const int status = int(res.result_int());
    std::string extra;
    for (const auto& f : res) {
      const auto n = f.name();
      if (n == http::field::content_type || n == http::field::content_length || n == http::field::connection ||
          n == http::field::transfer_encoding || n == http::field::server || n == http::field::keep_alive) {
        continue;
      }
      extra += std::string(f.name_string()) + ": " + std::string(f.value()) + "\r\n";
    }
    const std::string content_type(res[http::field::content_type]);
    const bool streaming = parser.chunked() || !parser.content_length();
    std::string body;
    char piece[16384];
    if (streaming) {
      ex.send(response_head(status, content_type, extra + "Transfer-Encoding: chunked\r\n", ex.keep_alive) + "\r\n");
      started = true;
      if (ex.broken) return;
    }
    while (!parser.is_done()) {
      parser.get().body().data = piece;
      parser.get().body().size = sizeof(piece);
      http::read(up, buffer, parser, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) return fail(broken(ec));
      watch.expire_in(rt, stall);
      const size_t n = sizeof(piece) - parser.get().body().size;
      if (n == 0) continue;
      if (streaming) {
        ex.send(chunk(std::string(piece, n)));
        if (ex.broken) return;  // the client left: closing `up` aborts its request upstream
      } else {
        body.append(piece, n);
      }
    }
    if (streaming) {
      ex.send("0\r\n\r\n");
    } else {
      ex.send(full_response(status, content_type, body, ex.keep_alive, extra));
    }
  }

  int count_up() const {
    std::lock_guard<std::mutex> lock(mu);
    int n = 0;
    for (const Replica& x : replicas) n += group_up(x.address.group) ? 1 : 0;
    return n;
  }

  Json replicas_json() const {
    std::lock_guard<std::mutex> lock(mu);
    Json list = Json::array();
    for (size_t i = 0; i < replicas.size(); ++i) {
      const Replica& x = replicas[i];
      const bool up = group_up(x.address.group);
      list.push_back({{"replica", int(i)}, {"host", x.address.host}, {"port", x.address.port},
                      {"group", x.address.group}, {"up", up}, {"why_down", up ? "" : group_why(x.address.group)},
                      {"capacity", x.load.capacity}, {"live", x.load.live},
                      {"in_flight", in_flight.count(int(i)) ? in_flight.at(int(i)) : 0},
                      {"routed", x.n_routed}, {"affinity_routed", x.n_affinity}, {"failures", x.n_failed}});
    }
    return list;
  }

  std::string metrics() {
    std::string out;
    std::vector<bool> up;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto family = [&](const char* name, const char* type, const char* help, auto value) {
        out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
        for (size_t i = 0; i < replicas.size(); ++i) {
          out += std::string(name) + "{replica=\"" + std::to_string(i) + "\"} " + std::to_string(value(int(i))) + "\n";
        }
      };
      family("deepinfer_dp_replica_up", "gauge", "1 while the replica's group serves.",
             [&](int i) { return int64_t(group_up(replicas[size_t(i)].address.group)); });
      family("deepinfer_dp_requests_routed_total", "counter", "Requests the front sent to the replica.",
             [&](int i) { return replicas[size_t(i)].n_routed; });
      family("deepinfer_dp_affinity_routed_total", "counter", "Of those, routed by prefix affinity.",
             [&](int i) { return replicas[size_t(i)].n_affinity; });
      family("deepinfer_dp_replica_failures_total", "counter", "Times the replica's group went out of service.",
             [&](int i) { return replicas[size_t(i)].n_failed; });
      family("deepinfer_dp_in_flight", "gauge", "Requests the front has on the replica now.",
             [&](int i) { return in_flight.count(i) ? in_flight.at(i) : int64_t(0); });
      out += "# HELP deepinfer_dp_unroutable_total Requests answered 503 because no replica was up.\n"
             "# TYPE deepinfer_dp_unroutable_total counter\ndeepinfer_dp_unroutable_total " +
             std::to_string(n_unroutable) + "\n";
      for (const Replica& x : replicas) up.push_back(group_up(x.address.group));
    }
    std::set<std::string> seen;
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (!up[i]) continue;
      try {
        const auto [status, body] = get(int(i), "/metrics", options.health_timeout_seconds);
        if (status == 200) relabel_metrics(body, int(i), seen, out);
      } catch (const std::exception& e) {
        out += "# replica " + std::to_string(i) + ": " + e.what() + "\n";
      }
    }
    return out;
  }

  void run() {
    std::thread dog([this] { watchdog(); });
    std::vector<std::thread> pollers;
    for (size_t r = 0; r < replicas.size(); ++r) pollers.emplace_back([this, r] { poll_replica(int(r)); });
    LOG(INFO) << "data-parallel front on http://" << options.host << ":" << acceptor.local_endpoint().port()
              << " over " << replicas.size() << " replica(s)";
    while (!stopping.load()) {
      tcp::socket client(ioc);
      beast::error_code ec;
      acceptor.accept(client, ec);
      if (ec) {
        if (stopping.load()) break;
        LOG(WARNING) << "data-parallel front: accept failed: " << ec.message();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      client.set_option(tcp::no_delay(true), ec);
      ++n_connections;
      std::thread([this, c = std::move(client)]() mutable {
        serve_connection(std::move(c));
        std::lock_guard<std::mutex> lock(stop_mu);
        --n_connections;
        stop_cv.notify_all();
      }).detach();
    }
    {  // cut every connection still open, wait for their threads
      std::lock_guard<std::mutex> lock(watch_mu);
      for (auto& [id, w] : watches) {
        if (w.cut.empty()) w.cut = "the front is shutting down";
        ::shutdown(w.fd, SHUT_RDWR);
      }
    }
    {
      std::unique_lock<std::mutex> lock(stop_mu);
      stop_cv.wait(lock, [this] { return n_connections.load() == 0; });
    }
    for (std::thread& t : pollers) t.join();
    dog.join();
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(stop_mu);
      stopping.store(true);
    }
    stop_cv.notify_all();
    ::shutdown(acceptor.native_handle(), SHUT_RDWR);  // unblocks accept()
  }

  FrontOptions options;
  net::io_context ioc;
  tcp::acceptor acceptor;
  mutable std::mutex mu;  // replicas, policy, in_flight, counters
  std::vector<Replica> replicas;
  RoutePolicy policy;
  std::unordered_map<int, int64_t> in_flight;
  int64_t n_unroutable = 0;

  mutable std::mutex watch_mu;
  std::unordered_map<int64_t, Watch> watches;
  int64_t next_watch = 0;

  std::atomic<bool> stopping{false};
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  std::atomic<int64_t> n_connections{0};
};

DpFront::DpFront(FrontOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
DpFront::~DpFront() = default;
uint16_t DpFront::port() const { return impl_->acceptor.local_endpoint().port(); }
void DpFront::run() { impl_->run(); }
void DpFront::stop() { impl_->stop(); }
int DpFront::n_up() const { return impl_->count_up(); }

}  // namespace deepinfer::dp
